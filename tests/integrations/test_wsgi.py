"""The WSGI FailOpenMiddleware through werkzeug's test Client: every guard branch and refusal.

Flask is the app behind it; the vendor is the test kit's fakes served in-process; nothing of
failopen is mocked. Bodies are in test_wsgi_body.py, the routes in test_wsgi_routes.py, a real
gunicorn in test_wsgi_gunicorn.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from _wsgi_kit import CLIENT_IP, PROTECTED, Recorder, WsgiStack, call, environ
from failopen.integrations.wsgi import FailOpenMiddleware
from werkzeug.test import TestResponse

from failopen import Config
from failopen.exceptions import ConfigError
from failopen.providers.verify import VerifyResult
from failopen.runtime import FailOpen
from failopen.testing import FakeVerifyAPI

Make = Callable[..., WsgiStack]
GOOD, BAD, DENIED = FakeVerifyAPI.GOOD, FakeVerifyAPI.BAD, FakeVerifyAPI.DENIED


def error_code(response: TestResponse) -> str:
    body = response.get_json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    return str(body["error"]["code"])


def test_valid_header_token_reaches_the_app_with_the_decision(make_wsgi: Make) -> None:
    stack = make_wsgi()
    response = stack.post(token=GOOD)
    assert response.status_code == 200
    body = response.get_json()
    assert (body["ok"], body["bypassed"]) == (True, False)
    assert body["decision"] == {"allow": True, "bypassed": False, "outcome": "valid",
                                "reason": "token verified", "shadow": False}
    assert stack.verify.tokens_seen == [GOOD]


@pytest.mark.parametrize(("token", "outcome"), [
    (None, "missing_token"), ("", "missing_token"), (BAD, "invalid_token"),
    (DENIED, "invalid_token"),
])
def test_missing_or_invalid_token_is_403_json(
    make_wsgi: Make, token: str | None, outcome: str
) -> None:
    stack = make_wsgi()
    response = stack.post(token=token)
    assert response.status_code == 403
    assert error_code(response) == outcome
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Cache-Control"] == "no-store"
    assert "Retry-After" not in response.headers


def test_a_browser_form_post_is_refused_with_an_html_page(make_wsgi: Make) -> None:
    stack = make_wsgi()
    response = stack.post(data={"username": "ann"}, headers={"Accept": "text/html,*/*"})
    assert response.status_code == 403
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert b"<h1>Request refused</h1>" in response.data
    assert int(response.headers["Content-Length"]) == len(response.data)


def test_verify_unavailable_without_an_outage_is_503_with_retry_after(make_wsgi: Make) -> None:
    stack = make_wsgi()
    stack.verify.set_fault("503")
    response = stack.post(token=GOOD)
    assert (response.status_code, error_code(response)) == (503, "cannot_verify")
    assert response.headers["Retry-After"] == "7"
    assert stack.runtime.state.enforce is True


def test_verify_unavailable_during_a_confirmed_outage_bypasses(
    make_wsgi: Make, caplog: pytest.LogCaptureFixture
) -> None:
    stack = make_wsgi()
    stack.verify.set_fault("timeout")
    stack.page.set_global("major_outage")
    with caplog.at_level(logging.WARNING, logger="failopen.audit"):
        response = stack.post(token=GOOD, environ_overrides={"REMOTE_ADDR": CLIENT_IP})
    assert response.status_code == 200
    body = response.get_json()
    assert body["bypassed"] is True
    assert body["decision"]["outcome"] == "bypassed_confirmed_outage"
    assert any(f"client='{CLIENT_IP}'" in r.getMessage() and "'/login'" in r.getMessage()
               for r in caplog.records)


def test_flag_off_admits_without_reading_the_body(make_wsgi: Make) -> None:
    stack = make_wsgi()
    stack.runtime.flag.force_off("vendor ticket 1234")
    env = environ("/raw", body=b"username=ann", CONTENT_TYPE="application/x-www-form-urlencoded",
                  CONTENT_LENGTH="12")
    stream = env["wsgi.input"]
    status, _, body = call(stack.app, env)
    assert (status, body) == ("200 OK", b"username=ann")
    assert stack.recorder.inputs == [stream]  # the server's own stream, unread by failopen
    assert env["failopen.decision"].outcome == "bypassed_flag_off"
    assert stack.verify.requests == 0


def test_shadow_mode_enforces_while_the_flag_is_off(make_wsgi: Make) -> None:
    stack = make_wsgi(mode="shadow")
    stack.runtime.flag.force_off("drill")
    assert stack.post().status_code == 403
    admitted = stack.post(token=GOOD)
    assert admitted.status_code == 200
    assert admitted.get_json()["decision"]["shadow"] is True
    flag = stack.client.get("/failopen/flag").get_json()
    assert (flag["enforce"], flag["would_bypass"], flag["mode"]) == (True, True, "shadow")


def test_unprotected_requests_pass_through_untouched(make_wsgi: Make) -> None:
    stack = make_wsgi()
    assert stack.client.get("/health").text == "ok"
    env = environ("/raw", method="GET", body=b"x", CONTENT_LENGTH="1")
    before = dict(env)
    status, _, body = call(stack.app, env)
    assert (status, body) == ("200 OK", b"x")
    assert stack.recorder.calls == [env] and env == before  # nothing added, nothing wrapped
    assert stack.verify.requests == 0


def test_the_apps_own_exceptions_propagate_unchanged(make_wsgi: Make) -> None:
    stack = make_wsgi()

    def boom(environ: Any, start_response: Any) -> Any:
        raise RuntimeError("the app's own bug")

    stack.app.app = boom  # plain WSGI: Flask would turn its own error into a 500
    with pytest.raises(RuntimeError, match="the app's own bug"):
        stack.post("/boom", token=GOOD)


def test_custom_token_header_and_field(make_wsgi: Make) -> None:
    stack = make_wsgi(token_header="X-Bot-Token", token_field="bot_token")
    assert stack.post(token=GOOD).status_code == 403
    assert stack.post(headers={"X-Bot-Token": GOOD}).status_code == 200
    response = stack.post(data={"bot_token": stack.verify.issue_token()})
    assert response.status_code == 200


class _BrokenVerifier:
    """A verifier with a bug: it raises instead of answering."""

    def verify(self, token: str) -> VerifyResult:
        raise ZeroDivisionError("verifier bug")

    async def averify(self, token: str) -> VerifyResult:
        raise ZeroDivisionError("verifier bug")


def test_a_failing_verifier_falls_closed_with_503(
    make_wsgi: Make, caplog: pytest.LogCaptureFixture
) -> None:
    stack = make_wsgi(runtime_kwargs={"verifier": _BrokenVerifier()})
    with caplog.at_level(logging.ERROR):
        response = stack.post(token=GOOD)
    assert (response.status_code, error_code(response)) == (503, "internal_error")
    assert response.headers["Retry-After"] == "7"
    assert any(r.exc_info for r in caplog.records)


class _Unprintable:
    def __str__(self) -> str:
        raise ValueError("a server bug")


@pytest.mark.parametrize("broken", ["no input", "unreadable path", "flag off, unreadable path"])
def test_a_failure_inside_the_middleware_falls_closed_with_503(
    make_wsgi: Make, caplog: pytest.LogCaptureFixture, broken: str
) -> None:
    stack = make_wsgi()
    env = environ("/raw", CONTENT_TYPE="application/json", CONTENT_LENGTH="2")
    if broken == "no input":
        del env["wsgi.input"]  # a server bug
    else:
        if broken.startswith("flag off"):
            stack.runtime.flag.force_off("even with the flag off, a failure never admits")
        env["PATH_INFO"] = _Unprintable()
    with caplog.at_level(logging.ERROR, logger="failopen.wsgi"):
        status, headers, body = call(stack.app, env)
    assert status == "503 Service Unavailable" and headers["Retry-After"] == "7"
    assert b'"internal_error"' in body
    assert stack.recorder.calls == []
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.name, r.exc_info is not None) for r in errors] == [("failopen.wsgi", True)]


def test_a_lower_case_method_and_head_are_guarded(make_wsgi: Make) -> None:
    stack = make_wsgi(protected_methods=("POST", "GET"))
    for method in ("post", "Post", "HEAD"):
        status, headers, body = call(stack.app, environ("/raw", method=method))
        assert status.startswith("403"), method
    status, headers, body = call(stack.app, environ("/raw", method="HEAD"))
    assert body == b"" and int(headers["Content-Length"]) > 0
    assert stack.recorder.calls == []


@pytest.mark.parametrize(("script", "path", "protected"), [
    ("/app", "/login", PROTECTED),              # mounted under /app: Flask routes on /login
    ("/app", "/login/", PROTECTED),
    ("/app", "/login", ("/app/login",)),        # the full path in the settings
    ("", "//raw", PROTECTED), ("", "/./raw", PROTECTED), ("", "/x/../raw", PROTECTED),
    ("", "/signup\n", ("/signup/",)), ("", "/sign%75p", ("/signup/",)),
    # PATH_INFO is latin-1 text of the raw bytes: read as UTF-8 (as werkzeug and Django do),
    # "/signup" + U+00A0 is a spelling of "/signup"; read as latin-1 it would not be.
    ("", "/signup\xc2\xa0", ("/signup/",)),
])
def test_every_spelling_of_a_protected_route_is_guarded(
    make_wsgi: Make, script: str, path: str, protected: tuple[str, ...]
) -> None:
    recorder = Recorder()
    stack = make_wsgi(inner=recorder, protected_paths=protected)
    stack.app.app = recorder
    status, _, _ = call(stack.app, environ(path, SCRIPT_NAME=script))
    assert status.startswith("403") and recorder.calls == []


def test_own_routes_are_found_under_script_name(make_wsgi: Make) -> None:
    stack = make_wsgi()
    status, _, body = call(stack.app, environ("/failopen/flag", method="GET",
                                              SCRIPT_NAME="/app"))
    assert status == "200 OK" and b'"enforce": true' in body


# --- construction --------------------------------------------------------------------------------


def _config(**changes: Any) -> Config:
    return Config(verify_url="https://verify.test/v", private_key="k", protected_paths=PROTECTED,
                  **changes)


@pytest.mark.parametrize("prefix", ["failopen", "/failopen/", "/", "", "/a b", "/x?y"])
def test_bad_prefix_fails_at_construction(prefix: str) -> None:
    with pytest.raises(ConfigError, match="prefix"):
        FailOpenMiddleware(Recorder(), config=_config(), prefix=prefix)


def test_config_and_a_different_runtime_conflict() -> None:
    runtime = FailOpen(_config())
    with pytest.raises(ConfigError, match="not both"):
        FailOpenMiddleware(Recorder(), config=_config(retry_after=9), runtime=runtime)
    assert FailOpenMiddleware(Recorder(), config=runtime.config, runtime=runtime).runtime is runtime


def test_configuration_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAILOPEN_PROTECTED_PATHS", "/signup,/login")
    monkeypatch.setenv("FAILOPEN_VERIFY_URL", "https://verify.test/api/v4/verify/")
    monkeypatch.setenv("FAILOPEN_PRIVATE_KEY", "secret-private-key")
    app = FailOpenMiddleware(Recorder())
    assert app.config.protected_paths == ("/signup", "/login")
    assert "secret-private-key" not in repr(app)
    assert not app.runtime.watcher.running  # building starts no thread


def test_a_misconfiguration_fails_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAILOPEN_PROTECTED_PATHS", "/login")  # no verify URL
    with pytest.raises(ConfigError, match="FAILOPEN_VERIFY_URL"):
        FailOpenMiddleware(Recorder())
    with pytest.raises(ConfigError, match="FAILOPEN_TOKEN_HEADER"):
        FailOpenMiddleware(Recorder(), config=_config(token_header="X-Tökén"))


def test_start_up_report(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="failopen.wsgi"):
        FailOpenMiddleware(Recorder(), config=_config(admin_token="a" * 40))
    levels = {r.levelname: r.getMessage() for r in caplog.records}
    assert "FAILOPEN_STATUS_URL" in levels["ERROR"]
    assert "memory:" in levels["WARNING"] and "a" * 40 not in caplog.text


def test_a_django_wsgi_handler_is_refused() -> None:
    from django.core.handlers.wsgi import WSGIHandler
    from werkzeug.middleware.dispatcher import DispatcherMiddleware

    django = WSGIHandler.__new__(WSGIHandler)  # its __init__ loads settings: not needed here
    for app in (django, DispatcherMiddleware(Recorder(), {"/admin": django})):
        with pytest.raises(ConfigError, match="Django middleware"):
            FailOpenMiddleware(app, config=_config())
