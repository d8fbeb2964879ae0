"""FailOpenMiddleware through httpx's ASGITransport: every guard branch, every route, every refusal.

The vendor is the test kit's fakes served in-process; nothing of failopen is mocked. Body
handling is in test_asgi_body.py, lifespan in test_asgi_lifespan.py, a real uvicorn in
test_asgi_uvicorn.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
import pytest
from _asgi_kit import (
    ADMIN_TOKEN,
    API,
    CLIENT_IP,
    PROTECTED,
    Recorder,
    Stack,
    drive,
    http_scope,
    starlette_app,
)
from failopen.integrations.asgi import FailOpenMiddleware

from failopen import Config
from failopen.exceptions import ConfigError
from failopen.providers.verify import VerifyResult
from failopen.runtime import FailOpen
from failopen.stores.file import FileStore
from failopen.testing import FakeVerifyAPI
from failopen.web import COMPANION_FILES, SOLVER_PATH

pytestmark = pytest.mark.anyio

Make = Callable[..., Stack]
GOOD, BAD, DENIED = FakeVerifyAPI.GOOD, FakeVerifyAPI.BAD, FakeVerifyAPI.DENIED
FLAG_KEYS = {"enforce", "source", "reason", "since", "stale"}


async def login(stack: Stack, token: str | None = None, **kwargs: Any) -> httpx.Response:
    headers = {"X-Enforcement-Token": token} if token is not None else {}
    return await stack.client.post("/login", headers=headers, **kwargs)


def error_code(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    return str(body["error"]["code"])


# --- the guard's branches, as HTTP -------------------------------------------------------------


async def test_valid_header_token_reaches_the_app_with_the_decision(make_asgi: Make) -> None:
    stack = make_asgi()
    response = await login(stack, GOOD)
    assert response.status_code == 200
    body = response.json()
    assert (body["ok"], body["bypassed"]) == (True, False)
    assert body["decision"] == {"allow": True, "bypassed": False, "outcome": "valid",
                                "reason": "token verified", "shadow": False}
    assert stack.verify.tokens_seen == [GOOD]


@pytest.mark.parametrize(("token", "outcome"), [
    (None, "missing_token"), ("", "missing_token"), (BAD, "invalid_token"),
    (DENIED, "invalid_token"), ("not\x7fprintable", "invalid_token"),
])
async def test_missing_or_invalid_token_is_403_json(
    make_asgi: Make, token: str | None, outcome: str
) -> None:
    stack = make_asgi()
    response = await login(stack, token)
    assert response.status_code == 403
    assert error_code(response) == outcome
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    assert "retry-after" not in response.headers


async def test_verify_unavailable_without_an_outage_is_503_with_retry_after(
    make_asgi: Make,
) -> None:
    stack = make_asgi()
    stack.verify.set_fault("503")
    response = await login(stack, GOOD)
    assert (response.status_code, error_code(response)) == (503, "cannot_verify")
    assert response.headers["retry-after"] == "7"
    assert stack.runtime.state.enforce is True


async def test_verify_rate_limited_is_503_even_during_an_outage(make_asgi: Make) -> None:
    stack = make_asgi()
    stack.page.set_global("major_outage")
    stack.verify.set_fault("429", retry_after=3)
    response = await login(stack, GOOD)
    assert (response.status_code, error_code(response)) == (503, "rate_limited")
    assert response.headers["retry-after"] == "3"


async def test_verify_unavailable_during_a_confirmed_outage_bypasses(
    make_asgi: Make, caplog: pytest.LogCaptureFixture
) -> None:
    stack = make_asgi()
    stack.verify.set_fault("timeout")
    stack.page.set_global("major_outage")
    with caplog.at_level(logging.WARNING, logger="failopen.audit"):
        response = await login(stack, GOOD)
    assert response.status_code == 200
    body = response.json()
    assert body["bypassed"] is True
    assert body["decision"]["outcome"] == "bypassed_confirmed_outage"
    assert stack.runtime.state.enforce is False
    # The audit line names the path and the client address the server reported.
    assert any(f"client='{CLIENT_IP}'" in r.getMessage() and "'/login'" in r.getMessage()
               for r in caplog.records)


async def test_flag_off_admits_without_a_token_and_without_a_verify_call(make_asgi: Make) -> None:
    stack = make_asgi()
    stack.runtime.flag.force_off("vendor ticket 1234")
    response = await login(stack, None, data={"username": "ann"})
    assert response.status_code == 200
    assert response.json()["bypassed"] is True
    assert response.json()["decision"]["outcome"] == "bypassed_flag_off"
    assert stack.verify.requests == 0


async def test_shadow_mode_enforces_while_the_flag_is_off(make_asgi: Make) -> None:
    stack = make_asgi(mode="shadow")
    stack.runtime.flag.force_off("drill")
    assert (await login(stack, None)).status_code == 403
    admitted = await login(stack, GOOD)
    assert admitted.status_code == 200
    assert admitted.json()["decision"]["shadow"] is True
    assert admitted.json()["bypassed"] is False
    flag = (await stack.client.get("/failopen/flag")).json()
    assert (flag["enforce"], flag["would_bypass"], flag["mode"]) == (True, True, "shadow")


async def test_every_protected_prefix_and_only_protected_methods(make_asgi: Make) -> None:
    stack = make_asgi(protected_methods=("POST", "PUT"))
    assert (await stack.client.put("/raw/x")).status_code == 403
    assert (await stack.client.post("/raw/deeper/path")).status_code == 403
    assert (await stack.client.get("/raw/x")).status_code == 200  # GET is not protected
    assert (await stack.client.get("/login")).status_code == 405  # the app's answer
    assert stack.verify.requests == 0


async def test_unprotected_routes_pass_through_untouched(make_asgi: Make) -> None:
    stack = make_asgi()
    response = await stack.client.get("/health")
    assert (response.status_code, response.text) == (200, "ok")
    scope = http_scope("/raw", method="GET")  # a protected path, but not a protected method
    reply = await drive(stack.app, scope, [{"type": "http.request", "body": b"x"}])
    assert (reply.status, reply.body) == (200, b"x")
    (seen_scope, _, _), = stack.recorder.calls
    assert seen_scope is scope and "state" not in scope  # nothing added where nothing is guarded
    assert stack.verify.requests == 0


async def test_non_http_scopes_pass_straight_through(make_asgi: Make) -> None:
    stack = make_asgi(started=False)

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: Any) -> None:
        return None

    scope = {"type": "websocket", "path": "/raw/ws", "headers": []}
    await stack.app(scope, receive, send)
    assert stack.recorder.calls == [(scope, receive, send)]
    assert not stack.runtime.watcher.running  # nothing of failopen ran


async def test_decision_lands_in_an_existing_state_dict(make_asgi: Make) -> None:
    stack = make_asgi()
    stack.runtime.flag.force_off("drill")
    lifespan_state = {"db": "pool"}
    scope = http_scope("/raw", state=lifespan_state)
    reply = await drive(stack.app, scope, [{"type": "http.request", "body": b"x"}])
    assert reply.status == 200
    assert lifespan_state["db"] == "pool"
    assert lifespan_state["failopen"].outcome == "bypassed_flag_off"


async def test_the_apps_own_exceptions_propagate_unchanged(make_asgi: Make) -> None:
    stack = make_asgi()
    with pytest.raises(RuntimeError, match="the app's own bug"):
        await stack.client.post("/boom", headers={"X-Enforcement-Token": GOOD})


async def test_custom_token_header_and_field(make_asgi: Make) -> None:
    stack = make_asgi(token_header="X-Bot-Token", token_field="bot_token")
    assert (await login(stack, GOOD)).status_code == 403  # the default header means nothing now
    response = await stack.client.post("/login", headers={"x-bot-token": GOOD})
    assert response.status_code == 200
    # A solved token is good once: a fresh one for the form field.
    response = await stack.client.post("/login", data={"bot_token": stack.verify.issue_token()})
    assert response.status_code == 200


# --- an internal error falls closed, and never reaches the server ------------------------------


class _BrokenVerifier:
    """A verifier with a bug (a user's own, or ours): it raises instead of answering."""

    def verify(self, token: str) -> VerifyResult:
        raise ZeroDivisionError("verifier bug")

    async def averify(self, token: str) -> VerifyResult:
        raise ZeroDivisionError("verifier bug")


async def test_a_failing_verifier_falls_closed_with_503(
    make_asgi: Make, caplog: pytest.LogCaptureFixture
) -> None:
    stack = make_asgi(runtime_kwargs={"verifier": _BrokenVerifier()})
    with caplog.at_level(logging.ERROR):
        response = await login(stack, GOOD)
    assert (response.status_code, error_code(response)) == (503, "internal_error")
    assert response.headers["retry-after"] == "7"
    assert any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize("break_scope", ["immutable state", "no headers", "odd client"])
async def test_a_failure_inside_the_middleware_falls_closed_with_503(
    make_asgi: Make, caplog: pytest.LogCaptureFixture, break_scope: str
) -> None:
    stack = make_asgi()
    if break_scope != "no headers":  # with the flag off, the headers are never read
        stack.runtime.flag.force_off("even with the flag off, a failure never admits")
    scope = http_scope("/raw", headers=[("Accept", "application/json")])
    if break_scope == "immutable state":
        scope["state"] = MappingProxyType({})
    elif break_scope == "no headers":
        scope["headers"] = None  # a server bug
    else:
        scope["client"] = 4711  # a server bug
    with caplog.at_level(logging.ERROR, logger="failopen.asgi"):
        reply = await drive(stack.app, scope, [{"type": "http.request", "body": b""}])
    assert reply.status == 503
    assert reply.json()["error"]["code"] == "internal_error"
    assert reply.headers["retry-after"] == "7"
    assert stack.recorder.calls == []
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.name, r.exc_info is not None) for r in errors] == [("failopen.asgi", True)]


async def test_a_failing_route_answers_503_instead_of_raising(make_asgi: Make) -> None:
    stack = make_asgi()
    scope = http_scope("/failopen/flag", method="GET", query_string=None)  # a server bug
    reply = await drive(stack.app, scope)
    assert reply.status == 503
    assert reply.json()["error"]["code"] == "internal_error"


# --- GET <prefix>/flag ---------------------------------------------------------------------------


async def test_flag_endpoint_shape_and_no_store(make_asgi: Make) -> None:
    stack = make_asgi(started=False)
    response = await stack.client.get("/failopen/flag")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert set(body) >= FLAG_KEYS
    assert body["enforce"] is True and body["stale"] is False and body["mode"] == "enforce"
    assert body["since"].endswith("Z")
    assert stack.runtime.watcher.running  # the flag endpoint starts the watcher lazily


async def test_flag_confirm_during_an_outage_turns_enforcement_off(make_asgi: Make) -> None:
    stack = make_asgi()
    assert (await stack.client.get("/failopen/flag")).json()["enforce"] is True
    stack.page.set_global("major_outage")
    asked = stack.page.requests
    plain = (await stack.client.get("/failopen/flag")).json()
    assert plain["enforce"] is True and stack.page.requests == asked  # no check without confirm
    confirmed = (await stack.client.get("/failopen/flag", params={"confirm": "1"})).json()
    assert (confirmed["enforce"], confirmed["source"]) == (False, "confirmed")
    assert stack.page.requests == asked + 1


@pytest.mark.parametrize("value", ["1", "true", "yes"])
async def test_flag_confirm_without_an_outage_keeps_enforcing(make_asgi: Make, value: str) -> None:
    stack = make_asgi()
    asked = stack.page.requests
    body = (await stack.client.get("/failopen/flag", params={"confirm": value})).json()
    assert body["enforce"] is True
    assert stack.page.requests > asked  # it did look


async def test_flag_confirm_0_does_not_check(make_asgi: Make) -> None:
    stack = make_asgi()
    stack.page.set_global("major_outage")
    await stack.client.get("/failopen/flag")
    asked = stack.page.requests
    body = (await stack.client.get("/failopen/flag?confirm=0")).json()
    assert body["enforce"] is True and stack.page.requests == asked


async def test_flag_endpoint_shows_an_override(make_asgi: Make) -> None:
    stack = make_asgi()
    stack.runtime.flag.force_off("vendor ticket 1234", ttl=600)
    body = (await stack.client.get("/failopen/flag")).json()
    assert (body["enforce"], body["source"]) == (False, "override")
    assert "vendor ticket 1234" in body["reason"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
async def test_flag_endpoint_is_get_only(make_asgi: Make, method: str) -> None:
    stack = make_asgi()
    response = await stack.client.request(method, "/failopen/flag")
    assert (response.status_code, response.headers["allow"]) == (405, "GET, HEAD")


async def test_head_of_the_flag_has_headers_and_no_body(make_asgi: Make) -> None:
    stack = make_asgi()
    response = await stack.client.head("/failopen/flag")
    assert response.status_code == 200 and response.content == b""
    assert int(response.headers["content-length"]) > 0


async def test_routes_follow_the_prefix(make_asgi: Make) -> None:
    stack = make_asgi(prefix="/_ops/fo")
    assert (await stack.client.get("/_ops/fo/flag")).status_code == 200
    assert (await stack.client.get("/failopen/flag")).status_code == 404  # now the app's
    assert (await stack.client.get("/_ops/fo/flag/")).status_code == 404
    assert (await stack.client.get("/_ops/fo")).status_code == 404


# --- GET <prefix>/failopen.js --------------------------------------------------------------------


@pytest.fixture
def snippet(tmp_path: Path) -> Path:
    path = tmp_path / "failopen.js"
    path.write_text("/* failopen test snippet */ window.failopen = {};\n")
    return path


async def test_snippet_with_etag_and_long_caching(make_asgi: Make, snippet: Path) -> None:
    stack = make_asgi(snippet_path=snippet)
    response = await stack.client.get("/failopen/failopen.js")
    assert response.status_code == 200
    assert response.content == snippet.read_bytes()
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert response.headers["cache-control"] == "public, max-age=86400"
    etag = response.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) > 10


@pytest.mark.parametrize("form", ["{etag}", "W/{etag}", '"other", {etag}', "*"])
async def test_snippet_revalidation_is_304_without_a_body(
    make_asgi: Make, snippet: Path, form: str
) -> None:
    stack = make_asgi(snippet_path=snippet)
    etag = (await stack.client.get("/failopen/failopen.js")).headers["etag"]
    response = await stack.client.get("/failopen/failopen.js",
                                      headers={"If-None-Match": form.format(etag=etag)})
    assert response.status_code == 304
    assert response.content == b""
    assert response.headers["etag"] == etag
    assert response.headers["cache-control"] == "public, max-age=86400"
    assert "content-length" not in response.headers


async def test_snippet_stale_etag_gets_the_body(make_asgi: Make, snippet: Path) -> None:
    stack = make_asgi(snippet_path=snippet)
    response = await stack.client.get("/failopen/failopen.js",
                                      headers={"If-None-Match": '"old-version"'})
    assert response.status_code == 200 and response.content == snippet.read_bytes()


async def test_snippet_head_and_405(make_asgi: Make, snippet: Path) -> None:
    stack = make_asgi(snippet_path=snippet)
    head = await stack.client.head("/failopen/failopen.js")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(snippet.read_bytes()))
    assert (await stack.client.post("/failopen/failopen.js")).status_code == 405


async def test_the_fallback_solver_is_served_beside_the_snippet(
    make_asgi: Make, snippet: Path
) -> None:
    # The package's own, also when the site serves its own snippet: it answers our challenge.
    stack = make_asgi(snippet_path=snippet)
    response = await stack.client.get("/failopen/failopen-solver.js")
    assert response.status_code == 200 and response.content == SOLVER_PATH.read_bytes()
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert response.headers["cache-control"] == "public, max-age=86400"
    etag = response.headers["etag"]
    assert etag != (await stack.client.get("/failopen/failopen.js")).headers["etag"]
    again = await stack.client.get("/failopen/failopen-solver.js",
                                   headers={"If-None-Match": etag})
    assert (again.status_code, again.content) == (304, b"")
    assert (await stack.client.head("/failopen/failopen-solver.js")).content == b""
    assert (await stack.client.post("/failopen/failopen-solver.js")).status_code == 405


@pytest.mark.parametrize("name", sorted(set(COMPANION_FILES) - {SOLVER_PATH.name}))
async def test_every_vendor_adapter_is_served_beside_the_snippet(make_asgi: Make,
                                                                 name: str) -> None:
    # The snippet loads the configured vendor's adapter from its own folder: a 404 here would
    # leave every log-in waiting for a watchdog.
    stack = make_asgi()
    response = await stack.client.get("/failopen/" + name)
    assert response.status_code == 200 and response.content == COMPANION_FILES[name].read_bytes()
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    again = await stack.client.get("/failopen/" + name,
                                   headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304
    assert (await stack.client.get("/failopen/failopen-nobody.js")).status_code == 404


async def test_missing_snippet_is_404_and_logged_once_at_construction(
    make_asgi: Make, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="failopen.asgi"):
        stack = make_asgi(snippet_path=tmp_path / "absent.js")
        assert len(caplog.records) == 1 and "absent.js" in caplog.records[0].getMessage()
        for _ in range(3):
            response = await stack.client.get("/failopen/failopen.js")
            assert response.status_code == 404
        assert len(caplog.records) == 1


# --- POST <prefix>/override ----------------------------------------------------------------------


def bearer(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A store every worker sees: the route refuses memory: (test_asgi_override.py)."""
    return f"file://{tmp_path / 'override.json'}"


async def test_no_admin_token_means_no_override_route(make_asgi: Make) -> None:
    stack = make_asgi()
    response = await stack.client.post("/failopen/override", headers=bearer(),
                                       json={"enforce": False})
    assert response.status_code == 404  # Starlette's own 404: the route is not revealed
    assert response.text == "Not Found"
    assert stack.runtime.state.enforce is True


async def test_override_off_then_auto(
    make_asgi: Make, caplog: pytest.LogCaptureFixture, store: str
) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=store)
    with caplog.at_level(logging.DEBUG):
        response = await stack.client.post(
            "/failopen/override", headers=bearer(),
            json={"enforce": False, "ttl": 900, "reason": "vendor ticket 1234"})
        assert response.status_code == 200
        assert response.headers["cache-control"] == "no-store"
        body = response.json()
        assert body["override"]["enforce"] is False
        assert body["flag"]["enforce"] is False and body["flag"]["source"] == "override"
        admitted = await login(stack, None)
        assert (admitted.status_code, admitted.json()["bypassed"]) == (200, True)
        back = await stack.client.post("/failopen/override", headers=bearer(),
                                       json={"enforce": None})
        assert back.status_code == 200 and back.json()["override"] is None
        assert (await login(stack, None)).status_code == 403
    # The audit log names the actor, never the token.
    assert any("admin-token" in r.getMessage() for r in caplog.records)
    assert not any(ADMIN_TOKEN in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("headers", "status"), [
    ({}, 401),
    ({"Authorization": "Basic " + "x" * 20}, 401),
    ({"Authorization": "Bearer"}, 401),
    ({"Cookie": f"session={ADMIN_TOKEN}"}, 401),  # what a cross-site form post would carry
    (bearer("adm-" + "z" * 40), 403),
    (bearer(ADMIN_TOKEN[:-1]), 403),
    (bearer(ADMIN_TOKEN + "x"), 403),
])
async def test_override_refuses_without_the_bearer_token(
    make_asgi: Make, caplog: pytest.LogCaptureFixture, headers: dict[str, str], status: int
) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN)
    with caplog.at_level(logging.DEBUG):
        response = await stack.client.post("/failopen/override", headers=headers,
                                           json={"enforce": False})
    assert response.status_code == status
    assert error_code(response) in {"unauthorized", "forbidden"}
    assert ADMIN_TOKEN not in response.text
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"
    assert stack.runtime.state.enforce is True
    assert not any(ADMIN_TOKEN in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_override_is_post_only(make_asgi: Make, method: str) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN)
    response = await stack.client.request(method, "/failopen/override", headers=bearer())
    assert (response.status_code, response.headers["allow"]) == (405, "POST")


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"enforce": "off"}',
                                  b'{"enforce": false, "ttl": -1}', b'{"enforce": false, "x": 1}'])
async def test_override_bad_requests_are_400_and_change_nothing(
    make_asgi: Make, body: bytes, store: str
) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=store)
    response = await stack.client.post("/failopen/override", headers=bearer(), content=body)
    assert (response.status_code, error_code(response)) == (400, "bad_request")
    assert stack.runtime.state.enforce is True


async def test_override_body_is_capped(make_asgi: Make, store: str) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=store)
    huge = b'{"enforce": false, "reason": "' + b"x" * 5000 + b'"}'
    response = await stack.client.post("/failopen/override", headers=bearer(), content=huge)
    assert (response.status_code, error_code(response)) == (413, "body_too_large")

    async def stream() -> Any:
        yield b'{"enforce": false, "reason": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}'

    response = await stack.client.post("/failopen/override", headers=bearer(), content=stream())
    assert (response.status_code, error_code(response)) == (413, "body_too_large")
    assert stack.runtime.state.enforce is True


class _ExplodingStore(FileStore):
    """A store with a bug: writing raises something that is not a StoreError."""

    def save(self, override: Any) -> None:
        raise KeyError("store bug")


async def test_override_store_bug_is_503_not_a_crash(make_asgi: Make, tmp_path: Path) -> None:
    store = _ExplodingStore(tmp_path / "override.json")
    stack = make_asgi(admin_token=ADMIN_TOKEN, runtime_kwargs={"store": store})
    response = await stack.client.post("/failopen/override", headers=bearer(),
                                       json={"enforce": False})
    assert (response.status_code, error_code(response)) == (503, "internal_error")
    assert stack.runtime.state.enforce is True


# --- construction --------------------------------------------------------------------------------


def _config(**changes: Any) -> Config:
    return Config(verify_url="https://verify.test/v", private_key="k", protected_paths=PROTECTED,
                  **changes)


@pytest.mark.parametrize("prefix", ["failopen", "/failopen/", "/", "", "/a b", "/x?y", "/x#y",
                                    "/x%2F", "/\n"])
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


def test_a_misconfigured_environment_fails_at_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAILOPEN_PROTECTED_PATHS", "/login")  # no verify URL
    with pytest.raises(ConfigError, match="FAILOPEN_VERIFY_URL"):
        FailOpenMiddleware(Recorder())


def test_a_non_ascii_token_header_fails_at_construction() -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_TOKEN_HEADER"):
        FailOpenMiddleware(Recorder(), config=_config(token_header="X-Tökén"))


def test_building_starts_no_thread() -> None:
    app = FailOpenMiddleware(Recorder(), config=_config())
    assert not app.runtime.watcher.running


async def test_prebuilt_answers_survive_outer_middleware_editing_headers(
    make_asgi: Make, snippet: Path
) -> None:
    stack = make_asgi(snippet_path=snippet)

    async def security_headers(scope: Any, receive: Any, send: Any) -> None:
        # A common hand-written pure ASGI middleware: it appends to the header list in place.
        async def add_header(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", []).append((b"x-frame-options", b"DENY"))
            await send(message)

        await stack.app(scope, receive, add_header)

    async with httpx.AsyncClient(transport=httpx.ASGITransport(security_headers),
                                 base_url="http://testserver") as client:
        for _ in range(3):
            for method, path in (("GET", "/failopen/failopen.js"), ("POST", "/login"),
                                 ("DELETE", "/failopen/flag")):
                response = await client.request(method, path)
                assert response.headers.get_list("x-frame-options") == ["DENY"], path


async def test_starlette_add_middleware_form(make_asgi: Make) -> None:
    from starlette.applications import Starlette
    from starlette.middleware import Middleware

    stack = make_asgi()
    app = Starlette(routes=starlette_app().routes,
                    middleware=[Middleware(FailOpenMiddleware, runtime=stack.runtime)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                 base_url="http://testserver") as client:
        assert (await client.post("/login")).status_code == 403
        assert (await client.get("/failopen/flag")).json()["enforce"] is True
        admitted = await client.post("/login", headers={"X-Enforcement-Token": GOOD})
        assert admitted.json()["decision"]["outcome"] == "valid"


# --- every spelling of a protected route reaches the guard ---------------------------------------
# The app, not failopen, decides which view a request reaches: whatever the app could route to a
# protected view must be guarded, or the guard is one spelling away from never being asked.


@pytest.mark.parametrize("method", ["post", "Post"])
async def test_a_lower_case_method_is_guarded(make_asgi: Make, method: str) -> None:
    # Django's ASGI handler upper-cases scope["method"]: "post" runs the POST view.
    stack = make_asgi()
    reply = await drive(stack.app, http_scope("/raw", method=method, headers=API),
                        [{"type": "http.request", "body": b""}])
    assert (reply.status, reply.json()["error"]["code"]) == (403, "missing_token")
    assert stack.recorder.calls == []


async def test_head_is_guarded_when_get_is(make_asgi: Make) -> None:
    # Starlette and Django both run the GET view for a HEAD request.
    stack = make_asgi(protected_methods=("GET",))
    reply = await drive(stack.app, http_scope("/raw", method="HEAD"),
                        [{"type": "http.request", "body": b""}])
    assert reply.status == 403 and stack.recorder.calls == []


@pytest.mark.parametrize(("path", "root_path", "protected"), [
    # A server run with --root-path, or a Starlette Mount("/app", ...): the app routes on
    # "/login", as Starlette and Django drop root_path from the front.
    ("/app/login", "/app", PROTECTED),
    ("/app/login/", "/app", PROTECTED),
    ("/login", "/app", PROTECTED),  # an older server that leaves root_path out of path
    ("/login", "/app", ("/app/login",)),  # ... with the full path in the settings
    ("/app/login", "/app", ("/app/login",)),
])
async def test_a_route_under_root_path_is_guarded(
    make_asgi: Make, path: str, root_path: str, protected: tuple[str, ...]
) -> None:
    recorder = Recorder()
    stack = make_asgi(inner=recorder, protected_paths=protected)
    reply = await drive(stack.app, http_scope(path, root_path=root_path),
                        [{"type": "http.request", "body": b""}])
    assert reply.status == 403 and recorder.calls == []


@pytest.mark.parametrize("path", ["//raw", "///raw/x", "/./raw", "/x/../raw", "/.//raw"])
async def test_double_slashes_and_dot_segments_are_guarded(make_asgi: Make, path: str) -> None:
    # Routers that merge slashes or resolve dot segments (or a proxy doing it) reach "/raw".
    recorder = Recorder()
    stack = make_asgi(inner=recorder)
    reply = await drive(stack.app, http_scope(path), [{"type": "http.request", "body": b""}])
    assert reply.status == 403 and recorder.calls == []


async def test_a_protected_path_with_a_trailing_slash_also_guards_it_without(
    make_asgi: Make,
) -> None:
    # Django-style "/signup/" in the settings, and a route that also answers "/signup".
    recorder = Recorder()
    stack = make_asgi(inner=recorder, protected_paths=("/signup/",))
    for path in ("/signup", "/signup/", "/signup/step2"):
        reply = await drive(stack.app, http_scope(path), [{"type": "http.request", "body": b""}])
        assert reply.status == 403, path
    reply = await drive(stack.app, http_scope("/signups"), [{"type": "http.request", "body": b""}])
    assert reply.status == 200  # an exact match only: "/signup/" does not reach "/signups"


async def test_own_routes_are_found_under_root_path(make_asgi: Make) -> None:
    stack = make_asgi()
    reply = await drive(stack.app, http_scope("/app/failopen/flag", method="GET",
                                              root_path="/app"))
    assert reply.status == 200 and reply.json()["enforce"] is True


async def test_a_refused_head_request_gets_no_body(make_asgi: Make) -> None:
    stack = make_asgi(protected_methods=("GET",))
    reply = await drive(stack.app, http_scope("/raw", method="HEAD"),
                        [{"type": "http.request", "body": b""}])
    assert reply.status == 403 and reply.body == b""
    assert int(reply.headers["content-length"]) > 0  # what a GET would have carried


async def test_a_flood_of_confirms_makes_one_status_request_per_ttl(make_asgi: Make) -> None:
    stack = make_asgi(confirm_ttl=60.0)
    stack.page.set_global("major_outage")
    asked = stack.page.requests
    answers = await asyncio.gather(*(stack.client.get("/failopen/flag?confirm=1")
                                     for _ in range(100)))
    assert {a.status_code for a in answers} == {200}
    assert stack.page.requests == asked + 1
    assert stack.runtime.state.enforce is False  # the one check saw the outage


async def test_a_flood_of_confirms_never_turns_enforcement_off_without_an_outage(
    make_asgi: Make,
) -> None:
    stack = make_asgi()
    stack.page.set_region(next(iter(stack.page.region_ids)), "major_outage")  # regional only
    for fault in (None, "500", "429", "timeout", "malformed", "missing_global", "unknown_status"):
        stack.page.set_fault(fault)
        answers = await asyncio.gather(*(stack.client.get("/failopen/flag?confirm=1")
                                         for _ in range(20)))
        assert {a.json()["enforce"] for a in answers} == {True}, fault
    assert stack.runtime.state.enforce is True
