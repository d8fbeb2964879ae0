"""EnforcementTokenField in real forms and real views, through Django's sync and async clients.

A refusal is an error on the form (the page re-renders with what was typed); a valid token or
an outage policy that admits makes the form valid; the middleware is optional, and a request it
already judged is never sent to the vendor again. The vendor is the test kit's fakes, served on
loopback; everything else is real.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _manual import page as manual_page
from django.test import override_settings

from failopen.observe.audit_file import hash_user_agent
from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI, solve_challenge

EMAIL = "ada@example.com"
GOOD, BAD = FakeVerifyAPI.GOOD, FakeVerifyAPI.BAD
FALLBACK = {"FALLBACK_SECRET": "s" * 40, "FALLBACK_COST": 2000}
DID_NOT_FINISH = "The security check did not finish"
NOT_ACCEPTED = "The security check was not accepted"
CANNOT_VERIFY = "We cannot verify this form right now"
UNAVAILABLE = "This action is briefly unavailable"


@pytest.fixture(autouse=True)
def _urls() -> Any:
    with override_settings(ROOT_URLCONF="django_test_urls_forms"):
        yield


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


@pytest.fixture
def form_url(client_kind: str) -> Callable[[str], str]:
    """The sync view for the sync client, the async view for the async one."""
    return lambda kind: f"/forms/async/{kind}/" if client_kind == "async" else f"/forms/{kind}/"


@pytest.fixture
def outage(use_failopen: Callable[..., FailOpen | None],
           fake_status_page: FakeStatusPage) -> Callable[..., FailOpen]:
    """``outage(**settings)``: failopen with those settings, enforcement off (a confirmed
    outage of the vendor)."""
    def start(**changes: Any) -> FailOpen:
        runtime = use_failopen(**{**FALLBACK, **changes})
        assert runtime is not None
        fake_status_page.set_global("major_outage")
        runtime.poll_now()
        assert not runtime.state.enforce
        return runtime
    return start


def page(response: Any) -> str:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    return str(response.content.decode())


def test_a_valid_token_makes_the_form_valid(client: Any, use_failopen: Any, form_url: Any,
                                            fake_verify_api: FakeVerifyAPI) -> None:
    use_failopen()
    response = client.post(form_url("open"), {"email": EMAIL, "enforcement-token": GOOD})
    assert response.json() == {"ok": True, "email": EMAIL, "outcome": "valid",
                               "bypassed": False, "request": "valid"}
    assert fake_verify_api.tokens_seen == [GOOD]


def test_the_token_may_come_in_the_header_a_script_sends(
        client: Any, use_failopen: Any, form_url: Any, fake_verify_api: FakeVerifyAPI) -> None:
    use_failopen()
    response = client.post(form_url("open"), {"email": EMAIL},
                           headers={"X-Enforcement-Token": GOOD})
    assert response.json()["outcome"] == "valid" and fake_verify_api.tokens_seen == [GOOD]


def test_the_manuals_example_form_works(use_failopen: Any,
                                        fake_verify_api: FakeVerifyAPI) -> None:
    from django.test import RequestFactory

    use_failopen()
    code = re.search(r"```python\n(.*?)^```", manual_page("django-forms.md"), re.S | re.M)
    assert code is not None
    example: dict[str, Any] = {"__name__": "readme_example"}
    exec(code.group(1), example)  # the manual's own code, as a reader pastes it
    data = {"email": EMAIL, "enforcement-token": GOOD}
    form = example["SignupForm"](data)
    form.request = RequestFactory().post("/signup/", data)
    assert form.is_valid() and form.cleaned_data["token"].outcome == "valid"
    assert fake_verify_api.tokens_seen == [GOOD]


def test_a_class_based_form_view_gets_the_request_from_the_middleware(
        client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI) -> None:
    use_failopen()
    response = client.post("/forms/view/", {"email": EMAIL, "enforcement-token": GOOD})
    assert response.json()["outcome"] == "valid"
    assert fake_verify_api.requests == 1


def test_with_a_vendor_s_widget_the_field_renders_no_input_and_reads_the_widget_s(
        client: Any, use_failopen: Any, form_url: Any) -> None:
    # Turnstile's widget adds its own cf-turnstile-response input: an empty one of the same name
    # from the field, posted first, would hide the token (only the first value is read).
    use_failopen(VENDOR="turnstile", GLOBAL_COMPONENT="fakeglobal00")
    shown = page(client.get("/forms/open/"))
    assert 'name="cf-turnstile-response"' not in shown
    # Where the snippet renders the widget, and which form it protects.
    assert "<div data-failopen-captcha></div>" in shown
    html = page(client.post(form_url("open"), {"email": EMAIL, "cf-turnstile-response": BAD}))
    assert NOT_ACCEPTED in html and DID_NOT_FINISH not in html


def test_the_field_renders_the_input_the_snippet_fills(client: Any, use_failopen: Any) -> None:
    use_failopen(TOKEN_FIELD="bot-check")
    html = page(client.get("/forms/open/"))
    # Named after TOKEN_FIELD, not the form field ("token"), with no value and no label.
    assert '<input type="hidden" name="bot-check" id="id_token">' in html
    assert 'name="token"' not in html and "Token" not in html


@pytest.mark.parametrize(("token", "said"), [(None, DID_NOT_FINISH), (BAD, NOT_ACCEPTED),
                                             ("x" * 5000, NOT_ACCEPTED)])
def test_a_missing_or_refused_token_is_an_error_and_the_page_keeps_what_was_typed(
        client: Any, use_failopen: Any, form_url: Any, token: str | None, said: str) -> None:
    use_failopen()
    data = {"email": EMAIL} if token is None else {"email": EMAIL, "enforcement-token": token}
    html = page(client.post(form_url("open"), data))
    assert said in html
    assert f'value="{EMAIL}"' in html  # what the person typed is still there
    assert token is None or token not in html  # the used token is not sent back
    assert "Hidden field" not in html  # the message sits with the field, not as a hidden one's


def test_during_an_outage_an_open_form_is_valid_and_the_bypass_is_audited(
        client: Any, outage: Any, form_url: Any, fake_verify_api: FakeVerifyAPI,
        tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    runtime = outage(AUDIT_FILE=str(audit))
    response = client.post(form_url("open"), {"email": EMAIL},
                           headers={"User-Agent": "Mozilla/5.0 (form test)"})
    assert response.json() == {"ok": True, "email": EMAIL, "outcome": "bypassed_flag_off",
                               "bypassed": True, "request": "bypassed_flag_off"}
    assert fake_verify_api.requests == 0  # enforcement off: the token is never looked at
    assert runtime.guard.audit.file is not None
    runtime.guard.audit.file.drain()
    # The flag's own lines (event: enforcement_off) frame the request's one.
    (line,) = [entry for entry in map(json.loads, audit.read_text().splitlines())
               if "event" not in entry]
    assert (line["path"], line["client"]) == (form_url("open"), "127.0.0.1")
    assert line["ua"] == hash_user_agent("Mozilla/5.0 (form test)")


def test_during_an_outage_a_closed_form_is_an_error(client: Any, outage: Any, form_url: Any,
                                                   fake_verify_api: FakeVerifyAPI) -> None:
    outage()
    html = page(client.post(form_url("closed"), {"email": EMAIL, "enforcement-token": GOOD}))
    assert UNAVAILABLE in html and f'value="{EMAIL}"' in html
    assert fake_verify_api.requests == 0


def test_during_an_outage_a_fallback_form_takes_a_solved_challenge_once(
        client: Any, outage: Any, form_url: Any) -> None:
    outage()
    solved = solve_challenge(client.get("/failopen/challenge").json())
    admitted = client.post(form_url("fallback"), {"email": EMAIL, "altcha": solved})
    assert admitted.json()["outcome"] == "bypassed_fallback"
    assert NOT_ACCEPTED in page(client.post(form_url("fallback"),
                                            {"email": EMAIL, "altcha": solved}))
    assert DID_NOT_FINISH in page(client.post(form_url("fallback"), {"email": EMAIL}))


def test_a_field_cannot_loosen_the_sites_outage_policy(client: Any, outage: Any,
                                                      form_url: Any) -> None:
    outage(OUTAGE_POLICY="closed")
    assert UNAVAILABLE in page(client.post(form_url("loose"), {"email": EMAIL}))


def test_the_fallback_solution_may_come_in_the_header(client: Any, outage: Any,
                                                      form_url: Any) -> None:
    outage()
    solved = solve_challenge(client.get("/failopen/challenge").json())
    admitted = client.post(form_url("fallback"), {"email": EMAIL}, headers={"X-Altcha": solved})
    assert admitted.json()["outcome"] == "bypassed_fallback"


@pytest.mark.parametrize("fault", ["503", "reset"])
def test_an_unreachable_vendor_is_an_error_on_the_form(client: Any, use_failopen: Any,
                                                       form_url: Any, fake_verify_api: Any,
                                                       fault: str) -> None:
    use_failopen()  # the status page says operational: no outage is confirmed
    fake_verify_api.set_fault(fault)
    html = page(client.post(form_url("open"), {"email": EMAIL, "enforcement-token": GOOD}))
    assert CANNOT_VERIFY in html and f'value="{EMAIL}"' in html


def test_a_request_the_middleware_judged_is_not_verified_again(
        client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI) -> None:
    use_failopen()
    response = client.post("/forms/protected/open/", {"email": EMAIL, "enforcement-token": GOOD})
    # A second verify call would come back "previously verified" and fail the form.
    assert response.json()["outcome"] == "valid"
    assert fake_verify_api.requests == 1


@pytest.mark.parametrize(("kind", "said"), [("closed", UNAVAILABLE),
                                            ("fallback", DID_NOT_FINISH)])
def test_a_stricter_field_overrules_the_middlewares_open_bypass(
        client: Any, outage: Any, kind: str, said: str) -> None:
    # The middleware admitted the request under the route's policy (open); the form asks for
    # more, and gets it.
    outage()
    assert said in page(client.post(f"/forms/protected/{kind}/", {"email": EMAIL}))


def test_a_stricter_field_takes_a_solution_after_the_middlewares_bypass(client: Any,
                                                                      outage: Any) -> None:
    outage()
    solved = solve_challenge(client.get("/failopen/challenge").json())
    response = client.post("/forms/protected/fallback/", {"email": EMAIL, "altcha": solved})
    assert response.json()["outcome"] == "bypassed_fallback"


def _without_failopen() -> list[str]:
    # From the settings: in a whole-suite run "conftest" may name another folder's conftest.
    from django.conf import settings

    return [m for m in settings.MIDDLEWARE if not m.endswith(".FailOpenMiddleware")]


def test_without_the_middleware_a_form_that_keeps_the_request_works(
        client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI) -> None:
    use_failopen()
    with override_settings(MIDDLEWARE=_without_failopen()):
        response = client.post("/forms/explicit/", {"email": EMAIL, "enforcement-token": GOOD})
        assert response.json()["request"] == "valid"
        assert NOT_ACCEPTED in page(client.post("/forms/explicit/",
                                                {"email": EMAIL, "enforcement-token": BAD}))
    assert fake_verify_api.tokens_seen == [GOOD, BAD]


def test_without_a_request_the_form_is_refused_and_the_log_says_why(
        client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI,
        caplog: pytest.LogCaptureFixture) -> None:
    use_failopen()
    with override_settings(MIDDLEWARE=_without_failopen()), caplog.at_level(logging.ERROR):
        html = page(client.post("/forms/open/", {"email": EMAIL, "enforcement-token": GOOD}))
    assert CANNOT_VERIFY in html
    assert "has no request to judge" in caplog.text and "FailOpenMiddleware" in caplog.text
    assert fake_verify_api.requests == 0


def test_a_failure_inside_failopen_is_an_error_on_the_form(
        client: Any, use_failopen: Any, form_url: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from failopen.integrations.django import conf

    use_failopen()

    def broken() -> FailOpen:
        raise RuntimeError("a bug in failopen")

    monkeypatch.setattr(conf, "runtime", broken)
    with caplog.at_level(logging.ERROR):
        html = page(client.post(form_url("open"), {"email": EMAIL, "enforcement-token": GOOD}))
    assert CANNOT_VERIFY in html and "could not decide" in caplog.text


# --- as an outsider -------------------------------------------------------------------------


def test_a_token_under_the_form_fields_own_name_counts_for_nothing(
        client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI) -> None:
    use_failopen()
    for name in ("token", "again-enforcement-token", "id_token"):
        assert DID_NOT_FINISH in page(client.post("/forms/open/", {"email": EMAIL, name: GOOD}))
    assert fake_verify_api.requests == 0


def test_a_token_in_the_query_string_counts_for_nothing(
        client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI) -> None:
    use_failopen()
    html = page(client.post(f"/forms/open/?enforcement-token={GOOD}", {"email": EMAIL}))
    assert DID_NOT_FINISH in html and fake_verify_api.requests == 0


def test_of_two_tokens_only_the_first_is_verified(client: Any, use_failopen: Any,
                                                  fake_verify_api: FakeVerifyAPI) -> None:
    use_failopen()
    html = page(client.post("/forms/open/", {"email": EMAIL, "enforcement-token": [BAD, GOOD]}))
    assert NOT_ACCEPTED in html and fake_verify_api.tokens_seen == [BAD]


def test_a_form_sent_again_with_the_same_token_is_refused(
        client: Any, use_failopen: Any, form_url: Any, fake_verify_api: FakeVerifyAPI) -> None:
    use_failopen()
    token = fake_verify_api.issue_token()
    data = {"email": EMAIL, "enforcement-token": token}
    assert client.post(form_url("open"), data).json()["outcome"] == "valid"
    assert NOT_ACCEPTED in page(client.post(form_url("open"), data))


def test_two_forms_of_one_request_verify_the_token_once(
        client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI) -> None:
    use_failopen()
    response = client.post("/forms/two/", {"email": EMAIL, "again-email": EMAIL,
                                           "enforcement-token": GOOD})
    assert response.json() == {"valid": [True, True]}
    assert fake_verify_api.requests == 1


def test_a_field_disabled_by_the_view_refuses(client: Any, use_failopen: Any,
                                              fake_verify_api: FakeVerifyAPI) -> None:
    use_failopen()
    html = page(client.post("/forms/disabled/", {"email": EMAIL, "enforcement-token": GOOD}))
    assert CANNOT_VERIFY in html and fake_verify_api.requests == 0


def test_the_field_has_no_switch_to_skip_the_check() -> None:
    from failopen.integrations.django.forms import EnforcementTokenField

    for switch in ({"required": False}, {"disabled": True}):
        with pytest.raises(TypeError, match="always checked"):
            EnforcementTokenField(**switch)
    with pytest.raises(ValueError, match="open, fallback, closed"):
        EnforcementTokenField(outage="shut")


def test_a_form_refused_before_the_view_does_not_open_a_protected_view(
        client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI) -> None:
    # A middleware after failopen's cleans a form (the field leaves its refusal on
    # request.failopen) before Django resolves the view: the @protect view must still be judged,
    # not taken as judged already.
    from django.conf import settings

    use_failopen()
    peek = [*settings.MIDDLEWARE, "django_test_urls_forms.PeekMiddleware"]
    with override_settings(MIDDLEWARE=peek):
        response = client.post("/forms/reset/", {"email": EMAIL})
        assert response.status_code == 403 and b"ran" not in response.content
        # A valid token still opens it, verified once (the form's check is the view's too).
        response = client.post("/forms/reset/", {"email": EMAIL, "enforcement-token": GOOD})
        assert response.json() == {"ran": True}
    assert fake_verify_api.requests == 1
