"""EnforcementTokenField in a real Flask-WTF form in a real Flask app (CSRF off in the test
config), with and without the WSGI middleware. The vendor is the test kit's fakes, in process."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _manual import page, section
from failopen.integrations.wsgi import FailOpenMiddleware
from failopen.integrations.wtforms import EnforcementTokenField
from flask import Flask, jsonify, render_template_string, request
from flask_wtf import FlaskForm
from werkzeug.test import Client, TestResponse
from wtforms import Form, StringField
from wtforms.validators import DataRequired

from failopen import Config
from failopen.observe.audit_file import hash_user_agent
from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI, solve_challenge

EMAIL = "ada@example.com"
GOOD, BAD = FakeVerifyAPI.GOOD, FakeVerifyAPI.BAD
DID_NOT_FINISH = "The security check did not finish"
NOT_ACCEPTED = "The security check was not accepted"
CANNOT_VERIFY = "We cannot verify this form right now"
UNAVAILABLE = "This action is briefly unavailable"
PAGE = """<form method="post">{{ form.hidden_tag() }}{{ form.email() }}
{% for error in form.token.errors %}<p class="error">{{ error }}</p>{% endfor %}</form>"""


class SignupForm(FlaskForm):
    email = StringField(validators=[DataRequired()])
    token = EnforcementTokenField()


class ClosedForm(SignupForm):
    token = EnforcementTokenField(outage="closed")


class FallbackForm(SignupForm):
    token = EnforcementTokenField(outage="fallback")


class LooseForm(SignupForm):
    token = EnforcementTokenField(outage="open")


FORMS: dict[str, type[SignupForm]] = {"open": SignupForm, "closed": ClosedForm,
                                      "fallback": FallbackForm, "loose": LooseForm}


class Site:
    """A Flask app with sign-up forms, the fakes behind its FailOpen, and a test client."""

    def __init__(self, runtime: FailOpen, page: FakeStatusPage, verify: FakeVerifyAPI, *,
                 middleware: bool, register: bool) -> None:
        self.runtime, self.page, self.verify = runtime, page, verify
        app = self.app = Flask("wtforms_site")
        app.config.update(SECRET_KEY="not-a-secret", WTF_CSRF_ENABLED=False)
        if register:
            app.extensions["failopen"] = runtime

        @app.route("/signup/<kind>", methods=["GET", "POST"])
        @app.route("/protected/<kind>", methods=["GET", "POST"])
        def signup(kind: str) -> Any:
            form = FORMS[kind]()
            if form.validate_on_submit():
                decision = form.token.decision
                return jsonify(ok=True, email=form.email.data, outcome=decision.outcome,
                               environ=request.environ["failopen.decision"].outcome)
            return render_template_string(PAGE, form=form)

        @app.post("/two")
        def two() -> Any:
            return jsonify(valid=[SignupForm().validate(), SignupForm(prefix="again").validate()])

        if middleware:
            app.wsgi_app = FailOpenMiddleware(app.wsgi_app,  # type: ignore[method-assign]
                                              runtime=runtime)
        self.client = Client(app)

    def post(self, path: str, data: dict[str, Any], **kwargs: Any) -> TestResponse:
        return self.client.post(path, data=data, environ_base={"REMOTE_ADDR": "203.0.113.9"},
                                **kwargs)

    def outage(self) -> None:
        self.page.set_global("major_outage")
        self.runtime.poll_now()
        assert not self.runtime.state.enforce

    def solution(self) -> str:
        assert self.runtime.challenges is not None
        return solve_challenge(self.runtime.challenges.issue())


@pytest.fixture
def make_site() -> Iterator[Callable[..., Site]]:
    """``make_site(middleware=False, register=True, **config)``: a site over fresh fakes."""
    runtimes: list[FailOpen] = []

    def make(*, middleware: bool = False, register: bool = True, **changes: Any) -> Site:
        page, verify = FakeStatusPage(), FakeVerifyAPI()
        settings: dict[str, Any] = {
            "status_url": "https://status.test", "verify_url": "https://verify.test" + verify.path,
            "private_key": verify.private_key, "protected_paths": ("/protected",),
            "poll_interval": 3600.0, "confirm_ttl": 0.001, "fallback_secret": "s" * 40,
            "fallback_cost": 2000, **changes}
        runtime = FailOpen(Config(**settings), status_transport=page.transport(),
                           verify_transport=verify.transport())
        runtimes.append(runtime)
        runtime.poll_now()
        return Site(runtime, page, verify, middleware=middleware, register=register)

    yield make
    for runtime in runtimes:
        runtime.stop()


def html(response: TestResponse) -> str:
    assert response.status_code == 200 and response.mimetype == "text/html"
    return response.get_data(as_text=True)


def test_a_valid_token_makes_the_form_valid(make_site: Callable[..., Site]) -> None:
    site = make_site()
    response = site.post("/signup/open", {"email": EMAIL, "enforcement-token": GOOD})
    assert response.get_json() == {"ok": True, "email": EMAIL, "outcome": "valid",
                                   "environ": "valid"}
    assert site.verify.tokens_seen == [GOOD]


def test_the_field_renders_the_input_the_snippet_fills(make_site: Callable[..., Site]) -> None:
    site = make_site(token_field="bot-check")
    page = html(site.client.get("/signup/open"))
    assert '<input id="token" name="bot-check" type="hidden">' in page  # via hidden_tag()
    assert 'name="token"' not in page


@pytest.mark.parametrize(("token", "said"), [(None, DID_NOT_FINISH), (BAD, NOT_ACCEPTED)])
def test_a_missing_or_refused_token_is_an_error_and_the_page_keeps_what_was_typed(
        make_site: Callable[..., Site], token: str | None, said: str) -> None:
    site = make_site()
    data = {"email": EMAIL} if token is None else {"email": EMAIL, "enforcement-token": token}
    page = html(site.post("/signup/open", data))
    assert f'<p class="error">{said}' in page and f'value="{EMAIL}"' in page
    assert token is None or token not in page


def test_during_an_outage_an_open_form_is_valid_and_the_bypass_is_audited(
        make_site: Callable[..., Site], tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    site = make_site(audit_file=str(audit))
    site.outage()
    response = site.post("/signup/open", {"email": EMAIL},
                         headers={"User-Agent": "Mozilla/5.0 (form test)"})
    assert response.get_json()["outcome"] == "bypassed_flag_off"
    assert site.verify.requests == 0
    assert site.runtime.guard.audit.file is not None
    site.runtime.guard.audit.file.drain()
    # The flag's own lines (event: enforcement_off) frame the request's one.
    (line,) = [entry for entry in map(json.loads, audit.read_text().splitlines())
               if "event" not in entry]
    assert (line["path"], line["client"]) == ("/signup/open", "203.0.113.9")
    assert line["ua"] == hash_user_agent("Mozilla/5.0 (form test)")


def test_during_an_outage_a_closed_form_is_an_error(make_site: Callable[..., Site]) -> None:
    site = make_site()
    site.outage()
    page = html(site.post("/signup/closed", {"email": EMAIL, "enforcement-token": GOOD}))
    assert UNAVAILABLE in page and site.verify.requests == 0


def test_during_an_outage_a_fallback_form_takes_a_solved_challenge_once(
        make_site: Callable[..., Site]) -> None:
    site = make_site()
    site.outage()
    solved = site.solution()
    admitted = site.post("/signup/fallback", {"email": EMAIL, "altcha": solved})
    assert admitted.get_json()["outcome"] == "bypassed_fallback"
    assert NOT_ACCEPTED in html(site.post("/signup/fallback", {"email": EMAIL, "altcha": solved}))
    assert DID_NOT_FINISH in html(site.post("/signup/fallback", {"email": EMAIL}))
    in_header = site.post("/signup/fallback", {"email": EMAIL},
                          headers={"X-Altcha": site.solution()})
    assert in_header.get_json()["outcome"] == "bypassed_fallback"


def test_a_field_cannot_loosen_the_sites_outage_policy(make_site: Callable[..., Site]) -> None:
    site = make_site(outage_policy="closed")
    site.outage()
    assert UNAVAILABLE in html(site.post("/signup/loose", {"email": EMAIL}))


def test_an_unreachable_vendor_is_an_error_on_the_form(make_site: Callable[..., Site]) -> None:
    site = make_site()
    site.verify.set_fault("503")
    page = html(site.post("/signup/open", {"email": EMAIL, "enforcement-token": GOOD}))
    assert CANNOT_VERIFY in page and f'value="{EMAIL}"' in page


def test_a_request_the_middleware_judged_is_not_verified_again(
        make_site: Callable[..., Site]) -> None:
    site = make_site(middleware=True)
    response = site.post("/protected/open", {"email": EMAIL, "enforcement-token": GOOD})
    assert response.get_json()["outcome"] == "valid"
    assert site.verify.requests == 1


@pytest.mark.parametrize(("kind", "said"), [("closed", UNAVAILABLE),
                                            ("fallback", DID_NOT_FINISH)])
def test_a_stricter_field_overrules_the_middlewares_open_bypass(
        make_site: Callable[..., Site], kind: str, said: str) -> None:
    site = make_site(middleware=True)
    site.outage()
    assert said in html(site.post(f"/protected/{kind}", {"email": EMAIL}))


def test_a_request_passed_explicitly_to_a_plain_wtforms_form(
        make_site: Callable[..., Site]) -> None:
    site = make_site()

    class PlainForm(Form):
        token = EnforcementTokenField(runtime=site.runtime)

    environ = {"REMOTE_ADDR": "203.0.113.9", "PATH_INFO": "/signup/open"}
    formdata = _MultiDict({"enforcement-token": [GOOD]})
    form = PlainForm(formdata, meta={"request": environ})
    assert form.validate() and form.token.decision is not None
    assert environ["failopen.decision"] is form.token.decision
    unjudged = PlainForm(_MultiDict({"enforcement-token": [BAD]}))  # no request anywhere
    assert not unjudged.validate() and unjudged.token.errors == [
        "We cannot verify this form right now. Please try again in a moment."]
    assert site.verify.tokens_seen == [GOOD]


def test_no_runtime_registered_builds_one_from_the_environment(
        make_site: Callable[..., Site], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from failopen.integrations import wtforms as module

    monkeypatch.setattr(module, "_runtime", None)
    site = make_site(register=False)
    # No FAILOPEN_VERIFY_URL in the environment: no token can be verified, so none passes.
    with caplog.at_level(logging.INFO, logger="failopen.wtforms"):
        page = html(site.post("/signup/open", {"email": EMAIL, "enforcement-token": GOOD}))
    assert NOT_ACCEPTED in page and "FAILOPEN_* variables" in caplog.text
    assert module._runtime is not None
    module._runtime.stop()
    assert site.verify.requests == 0


def test_a_failure_inside_failopen_is_an_error_on_the_form(
        make_site: Callable[..., Site], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    site = make_site()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in failopen")

    monkeypatch.setattr(site.runtime, "bypass", broken)
    with caplog.at_level(logging.ERROR):
        page = html(site.post("/signup/open", {"email": EMAIL, "enforcement-token": GOOD}))
    assert CANNOT_VERIFY in page and "could not decide" in caplog.text


# --- as an outsider -------------------------------------------------------------------------


def test_a_token_under_another_name_or_in_the_query_string_counts_for_nothing(
        make_site: Callable[..., Site]) -> None:
    site = make_site()
    for name in ("token", "again-enforcement-token"):
        assert DID_NOT_FINISH in html(site.post("/signup/open", {"email": EMAIL, name: GOOD}))
    assert DID_NOT_FINISH in html(site.post(f"/signup/open?enforcement-token={GOOD}",
                                            {"email": EMAIL}))
    assert site.verify.requests == 0


def test_of_two_tokens_only_the_first_is_verified(make_site: Callable[..., Site]) -> None:
    site = make_site()
    page = html(site.post("/signup/open", {"email": EMAIL, "enforcement-token": [BAD, GOOD]}))
    assert NOT_ACCEPTED in page and site.verify.tokens_seen == [BAD]


def test_a_form_sent_again_with_the_same_token_is_refused(make_site: Callable[..., Site]) -> None:
    site = make_site()
    data = {"email": EMAIL, "enforcement-token": site.verify.issue_token()}
    assert site.post("/signup/open", data).get_json()["outcome"] == "valid"
    assert NOT_ACCEPTED in html(site.post("/signup/open", data))


def test_two_forms_of_one_request_verify_the_token_once(make_site: Callable[..., Site]) -> None:
    site = make_site()
    response = site.post("/two", {"email": EMAIL, "again-email": EMAIL,
                                  "enforcement-token": GOOD})
    assert response.get_json() == {"valid": [True, True]}
    assert site.verify.requests == 1


def test_the_manuals_flask_example_works(make_site: Callable[..., Site],
                                         tmp_path: Path) -> None:
    site = make_site()
    recipe = section(page("wsgi.md"), "## Flask-WTF and WTForms forms")
    code = re.search(r"```python\n(.*?)^```", recipe, re.S | re.M)
    assert code is not None
    (tmp_path / "signup.html").write_text(PAGE)
    app = Flask("readme_example", template_folder=str(tmp_path))
    app.config.update(SECRET_KEY="not-a-secret", WTF_CSRF_ENABLED=False)
    # What the manual leaves to the reader: the app, and a Config (here without a status page:
    # nothing to poll over the network; the fake's verifier goes in below).
    config = dataclasses.replace(site.runtime.config, status_url=None)
    exec(code.group(1), {"__name__": "readme_example", "app": app,  # the manual's own code
                         "config": config})
    runtime = app.wsgi_app.runtime  # type: ignore[attr-defined]
    runtime.guard.verifier = site.runtime.guard.verifier  # the fake's in-process transport
    try:
        client = Client(app)
        refused = client.post("/signup", data={"email": EMAIL, "enforcement-token": BAD})
        assert NOT_ACCEPTED in refused.get_data(as_text=True)
        admitted = client.post("/signup", data={"email": EMAIL, "enforcement-token": GOOD})
        assert admitted.status_code == 200 and "error" not in admitted.get_data(as_text=True)
        assert site.verify.tokens_seen == [BAD, GOOD]
    finally:
        runtime.stop()


def test_the_field_refuses_an_unknown_outage_policy() -> None:
    with pytest.raises(ValueError, match="open, fallback, closed"):
        EnforcementTokenField(outage="shut")


def test_without_wtforms_the_import_names_what_to_install() -> None:
    # A fresh interpreter where importing wtforms fails, as it does when it is not installed.
    code = ("import sys; sys.modules['wtforms'] = None\n"
            "try:\n    import failopen.integrations.wtforms\n"
            "except ImportError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert 'pip install "failopen[wtforms]"' in out


class _MultiDict(dict[str, list[str]]):
    """The formdata protocol WTForms reads (``getlist``), as a framework's multidict has it."""

    def getlist(self, name: str) -> list[str]:
        return list(self.get(name, []))


def test_the_middleware_itself_in_app_extensions_is_the_failopen_the_field_asks(
        make_site: Callable[..., Site], monkeypatch: pytest.MonkeyPatch,
        fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI) -> None:
    # A careless line: the middleware in app.extensions, not its .runtime. The field must still
    # ask the middleware's FailOpen. Another one, built from the FAILOPEN_* variables, keeps a
    # flag of its own: an operator's "enforce" placed through the middleware never reaches it.
    from failopen.integrations import wtforms as module

    monkeypatch.setattr(module, "_runtime", None)
    for name, value in {"FAILOPEN_STATUS_URL": fake_status_page.url,
                        "FAILOPEN_VERIFY_URL": fake_verify_api.verify_url,
                        "FAILOPEN_PRIVATE_KEY": fake_verify_api.private_key,
                        "FAILOPEN_POLL_INTERVAL": "1h"}.items():
        monkeypatch.setenv(name, value)
    fake_status_page.set_global("major_outage")  # the page the variables name says outage
    site = make_site(middleware=True, register=False)
    site.app.extensions["failopen"] = site.app.wsgi_app
    site.outage()
    site.runtime.flag.force_on("the outage is not ours: enforce", set_by="on-call")
    try:
        page = html(site.post("/signup/open", {"email": EMAIL}))
        assert DID_NOT_FINISH in page
    finally:
        if module._runtime is not None:
            module._runtime.stop()


def test_something_else_in_app_extensions_refuses_the_form_and_says_why(
        make_site: Callable[..., Site], caplog: pytest.LogCaptureFixture) -> None:
    site = make_site(register=False)
    site.app.extensions["failopen"] = {"runtime": site.runtime}  # not a FailOpen
    with caplog.at_level(logging.ERROR, logger="failopen.wtforms"):
        page = html(site.post("/signup/open", {"email": EMAIL, "enforcement-token": GOOD}))
    assert CANNOT_VERIFY in page and site.verify.requests == 0
    assert "app.extensions['failopen'] holds a dict" in caplog.text


def test_with_a_vendor_s_widget_the_field_renders_no_input_and_reads_the_widget_s(
        make_site: Callable[..., Site]) -> None:
    # Turnstile's widget adds its own cf-turnstile-response input: an empty one of the same name
    # from the field, posted first, would hide the token (only the first value is read).
    site = make_site(vendor="turnstile", global_component=FakeStatusPage().global_id)
    page = html(site.client.get("/signup/open"))
    assert 'name="cf-turnstile-response"' not in page
    # Where the snippet renders the widget, and which form it protects.
    assert "<div data-failopen-captcha></div>" in page
    response = site.post("/signup/open", {"email": EMAIL, "cf-turnstile-response": "junk"})
    assert NOT_ACCEPTED in html(response)
