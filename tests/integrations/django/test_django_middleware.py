"""FailOpenMiddleware through Django's test client and async client, against the served fakes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI

GOOD, BAD = FakeVerifyAPI.GOOD, FakeVerifyAPI.BAD
JSON = {"accept": "application/json"}


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def flag_off(runtime: FailOpen, page: FakeStatusPage) -> None:
    """A confirmed outage, as the watcher sees it."""
    page.set_global("major_outage")
    runtime.poll_now()
    assert not runtime.state.enforce


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


def test_valid_token_in_header_is_admitted(client: Any, use_failopen: Any) -> None:
    use_failopen()
    response = client.post("/login/", {"username": "ann"}, headers={"X-Enforcement-Token": GOOD})
    assert response.status_code == 200
    body = response.json()
    assert body["form"] == "ann"
    assert body["failopen"]["enforce"] is True
    assert body["failopen"]["bypassed"] is False
    assert body["failopen"]["outcome"] == "valid"


def test_valid_token_in_form_field(client: Any, use_failopen: Any) -> None:
    use_failopen()
    response = client.post("/login/", {"username": "ann", "enforcement-token": GOOD})
    assert response.status_code == 200
    assert response.json()["failopen"]["outcome"] == "valid"


def test_valid_token_in_multipart_form(client: Any, use_failopen: Any, tmp_path: Any) -> None:
    use_failopen()
    upload = tmp_path / "avatar.txt"
    upload.write_text("not the token")
    with upload.open("rb") as handle:
        response = client.post("/login/", {"username": "ann", "enforcement-token": GOOD,
                                           "avatar": handle})
    assert response.status_code == 200
    assert response.json()["form"] == "ann"


def test_valid_token_in_json_body_and_the_view_still_reads_the_body(
    client: Any, use_failopen: Any
) -> None:
    use_failopen()
    response = client.post("/login/json/", json.dumps({"username": "ann",
                                                        "enforcement-token": GOOD}),
                           content_type="application/json")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "user": "ann", "outcome": "valid"}


def test_configured_header_and_field_names(
    client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI
) -> None:
    use_failopen(TOKEN_HEADER="X-Bot-Token", TOKEN_FIELD="bot")
    assert client.post("/login/", headers={"X-Bot-Token": GOOD}).status_code == 200
    # A solved token is good once: each request carries a fresh one.
    assert client.post("/login/", {"bot": fake_verify_api.issue_token()}).status_code == 200
    fresh = fake_verify_api.issue_token()
    assert client.post("/login/", {"enforcement-token": fresh}).status_code == 403


def test_missing_token_gets_403_html_page(client: Any, use_failopen: Any) -> None:
    use_failopen()
    response = client.post("/login/", {"username": "ann"})
    assert response.status_code == 403
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert response["Cache-Control"] == "no-store"
    assert b"This request needs an enforcement token." in response.content
    assert not response.has_header("Retry-After")


def test_missing_token_gets_403_json_when_the_client_accepts_json(
    client: Any, use_failopen: Any
) -> None:
    use_failopen()
    response = client.post("/login/", {"username": "ann"}, headers=JSON)
    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"error": {"code": "missing_token",
                                         "message": "This request needs an enforcement token."}}


def test_invalid_token_gets_403(
    client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI
) -> None:
    use_failopen()
    response = client.post("/login/", headers={**JSON, "X-Enforcement-Token": BAD})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "invalid_token"
    assert fake_verify_api.tokens_seen == [BAD]


def test_flag_off_admits_without_token(
    client: Any, use_failopen: Any, fake_status_page: FakeStatusPage,
    fake_verify_api: FakeVerifyAPI,
) -> None:
    runtime = use_failopen()
    flag_off(runtime, fake_status_page)
    response = client.post("/login/", {"username": "ann"})
    assert response.status_code == 200
    decision = response.json()["failopen"]
    assert decision["bypassed"] is True and decision["enforce"] is False
    assert decision["outcome"] == "bypassed_flag_off"
    assert fake_verify_api.requests == 0


def test_flag_off_leaves_the_body_unread_for_the_view(
    client: Any, use_failopen: Any, fake_status_page: FakeStatusPage, tmp_path: Any
) -> None:
    # With enforcement off no token is looked at, so the body is not parsed for one: a view
    # that reads the raw multipart body (or swaps upload handlers) still can.
    runtime = use_failopen()
    flag_off(runtime, fake_status_page)
    upload = tmp_path / "avatar.txt"
    upload.write_text("x" * 1000)
    with upload.open("rb") as handle:
        response = client.post("/login/raw/", {"username": "ann", "avatar": handle})
    assert response.status_code == 200
    assert response.json()["outcome"] == "bypassed_flag_off"
    assert response.json()["bytes"] > 1000


def test_flag_on_again_after_recovery(
    client: Any, use_failopen: Any, fake_status_page: FakeStatusPage
) -> None:
    runtime = use_failopen(POLL_INTERVAL=3600)
    flag_off(runtime, fake_status_page)
    fake_status_page.set_global("operational")
    for _ in range(2):  # close_after=2
        runtime.poll_now()
    assert client.post("/login/").status_code == 403


def test_verify_unavailable_without_outage_is_503_with_retry_after(
    client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI
) -> None:
    use_failopen(RETRY_AFTER=7)
    fake_verify_api.set_fault("503")
    response = client.post("/login/", headers={**JSON, "X-Enforcement-Token": GOOD})
    assert response.status_code == 503
    assert response["Retry-After"] == "7"
    assert response.json()["error"]["code"] == "cannot_verify"


def test_verify_unavailable_with_outage_confirmed_admits(
    client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI,
    fake_status_page: FakeStatusPage,
) -> None:
    runtime = use_failopen(POLL_INTERVAL=3600)
    runtime.ensure_started()
    wait_for(lambda: runtime.state.source == "watcher")  # the first poll: operational
    fake_status_page.set_global("major_outage")
    fake_verify_api.set_fault("503")
    response = client.post("/login/", headers={"X-Enforcement-Token": GOOD})
    assert response.status_code == 200
    assert response.json()["failopen"]["outcome"] == "bypassed_confirmed_outage"
    assert not runtime.state.enforce


def test_shadow_mode_enforces_while_the_flag_is_off(
    client: Any, use_failopen: Any, fake_status_page: FakeStatusPage
) -> None:
    runtime = use_failopen(MODE="shadow")
    flag_off(runtime, fake_status_page)
    assert client.post("/login/", headers=JSON).status_code == 403
    admitted = client.post("/login/", headers={"X-Enforcement-Token": GOOD})
    assert admitted.status_code == 200
    assert admitted.json()["failopen"]["shadow"] is True
    assert admitted.json()["failopen"]["bypassed"] is False


def test_unprotected_requests_pass_untouched(
    client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI
) -> None:
    use_failopen()
    assert client.post("/open/").json() == {"ok": True, "failopen": None, "form": None}
    assert client.get("/login/").json()["failopen"] is None  # GET is not a protected method
    assert client.post("/open/async/").json()["failopen"] is None
    assert fake_verify_api.requests == 0


def test_protected_methods_are_configurable(client: Any, use_failopen: Any) -> None:
    use_failopen(PROTECTED_METHODS=["POST", "PUT"])
    assert client.put("/login/").status_code == 403
    assert client.put("/login/", headers={"X-Enforcement-Token": GOOD}).status_code == 200


def test_async_view_behind_the_middleware(client: Any, use_failopen: Any) -> None:
    use_failopen()
    assert client.post("/login/async/").status_code == 403
    response = client.post("/login/async/", headers={"X-Enforcement-Token": GOOD})
    assert response.json()["failopen"]["outcome"] == "valid"


def test_oversized_json_body_is_refused_unread(client: Any, use_failopen: Any) -> None:
    use_failopen(MAX_BODY_BYTES=64)
    body = json.dumps({"enforcement-token": GOOD, "padding": "x" * 100})
    response = client.post("/login/json/", body, content_type="application/json")
    assert response.status_code == 413  # as the ASGI adapter answers
    assert response.json()["error"]["code"] == "body_too_large"
    small = json.dumps({"enforcement-token": GOOD})
    assert client.post("/login/json/", small, content_type="application/json").status_code == 200


@pytest.mark.parametrize("view", ["django_test_urls.site_reject", "django_test_urls.asite_reject"])
def test_reject_view_renders_the_sites_own_page(
    client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI, view: str
) -> None:
    use_failopen(REJECT_VIEW=view)
    response = client.post("/login/")
    assert response.status_code == 403
    assert response.content == b"site says no: missing_token"
    assert response["Cache-Control"] == "no-store"
    fake_verify_api.set_fault("503")
    unavailable = client.post("/login/", headers={"X-Enforcement-Token": GOOD})
    assert unavailable.status_code == 503
    assert unavailable["Retry-After"] == "5"


def test_a_reject_view_cannot_make_a_refusal_cacheable(client: Any, use_failopen: Any) -> None:
    # As ASGI and WSGI: a refusal a CDN kept would be served to everyone after it, and a
    # re-rendered log-in page holds a CSRF token.
    use_failopen(REJECT_VIEW="django_test_urls.cached_reject")
    response = client.post("/login/")
    assert response.status_code == 403 and response.content == b"site says no: missing_token"
    assert response["Cache-Control"] == "no-store"
    assert not response.has_header("CDN-Cache-Control")


def test_broken_reject_view_falls_back_to_the_default_page(
    client: Any, use_failopen: Any, caplog: pytest.LogCaptureFixture
) -> None:
    use_failopen(REJECT_VIEW="django_test_urls.broken_reject")
    response = client.post("/login/", headers=JSON)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "missing_token"
    assert "REJECT_VIEW failed" in caplog.text


def test_broken_settings_fail_closed_on_protected_paths_only(
    client: Any, use_failopen: Any, caplog: pytest.LogCaptureFixture
) -> None:
    use_failopen(POLL_INTERVAL="soon")
    response = client.post("/login/", headers=JSON)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "internal_error"
    assert client.post("/open/").status_code == 200
    assert "failopen settings unusable" in caplog.text


def test_unreadable_protected_paths_fail_closed_on_unsafe_methods(
    client: Any, use_failopen: Any
) -> None:
    use_failopen(PROTECTED_PATHS="login")  # not a path: not even the protected paths are known
    assert client.post("/open/").status_code == 503
    assert client.get("/open/").status_code == 200


def test_runtime_that_cannot_start_fails_closed(client: Any, use_failopen: Any) -> None:
    assert use_failopen(VERIFY_URL=None, PRIVATE_KEY=None) is None
    assert client.post("/login/", headers={"X-Enforcement-Token": GOOD}).status_code == 503
    assert client.post("/open/").status_code == 200


def test_private_key_never_reaches_logs_or_responses(
    client: Any, use_failopen: Any, caplog: pytest.LogCaptureFixture,
    fake_verify_api: FakeVerifyAPI,
) -> None:
    use_failopen(POLL_INTERVAL="soon")  # broken: the error is logged
    body = client.post("/login/").content
    assert fake_verify_api.private_key not in caplog.text
    assert fake_verify_api.private_key.encode() not in body


def test_override_settings_replaces_the_runtime(client: Any, use_failopen: Any) -> None:
    first = use_failopen()
    assert client.post("/login/").status_code == 403
    second = use_failopen(PROTECTED_PATHS=["/open/"])
    assert second is not first
    assert client.post("/login/").status_code == 200
    assert client.post("/open/").status_code == 403
