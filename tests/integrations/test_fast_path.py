"""The unprotected-route fast path of the WSGI and ASGI middlewares guards exactly what
``Config.is_protected`` does, for every method spelling, path spelling and mount.

A request with a method that no path is protected for (``unguarded_methods``) skips the path
check and goes to the app unless it is one of failopen's own routes. Every case here is
compared with the slow answer: guarded iff ``is_protected`` says so for the path with or
without the mount (``SCRIPT_NAME`` / ``root_path``); otherwise failopen's route if the path is
one, else the app.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest
from _asgi_kit import drive, http_scope
from _wsgi_kit import call, environ
from failopen.integrations._shared import METHODS, unguarded_methods
from failopen.integrations.asgi import FailOpenMiddleware as AsgiMiddleware
from failopen.integrations.wsgi import FailOpenMiddleware as WsgiMiddleware
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from failopen import Config
from failopen.runtime import FailOpen

PATHS = ("/login", "/signup/", "/account")
SPELLED = (*METHODS, "get", "post", "Head", "head", "put", "PROPFIND", "")
PATH_SPELLINGS = (
    "/", "/health", "/login", "/login/", "/LOGIN", "//login", "/x/../login", "/./login",
    "/login;x", "/%6Cogin", "/login%0A", "/login\n", "/signup", "/signup/1", "/account/x",
    "/accountx", "/app/login", "/failopen/flag", "/failopen/failopen.js", "/failopen/override",
    "/f\u00e4ilopen/flag", "/l\u00f6gin", "/flag", "/challenge",
)
METHOD_SETS = (("POST",), ("GET",), ("HEAD",), ("POST", "PUT"), ("DELETE", "PATCH"),
               ("GET", "POST", "OPTIONS"))
MOUNTS = ("", "/app", "/failopen")


def _config(methods: Iterable[str]) -> Config:
    return Config(protected_paths=PATHS, protected_methods=frozenset(methods),
                  verify_url="http://127.0.0.1:9/api/v4/verify/", private_key="k",
                  outage_rate="none")


def _raw_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"APP"]


async def _asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"APP"})


_STACKS: dict[tuple[str, ...], tuple[FailOpen, WsgiMiddleware, AsgiMiddleware]] = {}


def _stack(methods: tuple[str, ...]) -> tuple[FailOpen, WsgiMiddleware, AsgiMiddleware]:
    if methods not in _STACKS:
        runtime = FailOpen(_config(methods))
        _STACKS[methods] = (runtime, WsgiMiddleware(_raw_app, runtime=runtime),
                            AsgiMiddleware(_asgi_app, runtime=runtime))
    return _STACKS[methods]


def _expected(config: Config, routes: Iterable[str], method: str, path: str,
              mount: str) -> str:
    """What the full check does: "guarded", "route" (failopen answers) or "app"."""
    if mount + path in routes or path in routes:
        return "route"
    if config.is_protected(method or "GET", mount + path) or config.is_protected(
            method or "GET", path):
        return "guarded"
    return "app"


def _wsgi_outcome(app: WsgiMiddleware, method: str, path: str, mount: str) -> str:
    raw_path = path.encode("utf-8").decode("latin-1")  # as a server puts it in the environ
    raw_mount = mount.encode("utf-8").decode("latin-1")
    status, _, body = call(app, environ(raw_path, method=method, SCRIPT_NAME=raw_mount))
    if body == b"APP":
        return "app"
    # No token: a guarded request is refused (403; HEAD: without the body saying why).
    return "guarded" if status.startswith("403") else "route"


def _asgi_outcome(app: AsgiMiddleware, method: str, path: str, mount: str) -> str:
    scope = http_scope(mount + path, method=method, root_path=mount,
                       headers=[("Accept", "application/json")])
    reply = asyncio.run(drive(app, scope, [{"type": "http.request", "body": b""}]))
    if reply.body == b"APP":
        return "app"
    return "guarded" if reply.status == 403 else "route"


def _check(methods: tuple[str, ...], method: str, path: str, mount: str) -> None:
    runtime, wsgi, asgi = _stack(methods)
    expected = _expected(runtime.config, wsgi._routes, method, path, mount)
    assert _wsgi_outcome(wsgi, method, path, mount) == expected, ("WSGI", method, path, mount)
    if method:  # an ASGI server always names the method
        expected = _expected(runtime.config, asgi._routes, method, path, mount)
        assert _asgi_outcome(asgi, method, path, mount) == expected, ("ASGI", method, path,
                                                                      mount)


@pytest.mark.parametrize("methods", METHOD_SETS)
@pytest.mark.parametrize("mount", MOUNTS)
def test_every_method_and_path_spelling_is_guarded_as_is_protected_says(
        methods: tuple[str, ...], mount: str) -> None:
    for method in SPELLED:
        for path in PATH_SPELLINGS:
            _check(methods, method, path, mount)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(methods=st.sampled_from(METHOD_SETS), method=st.sampled_from(SPELLED),
       path=st.text(alphabet="/lLoginsupact.%;0A\n\u00e4", max_size=14).map(lambda p: "/" + p),
       mount=st.sampled_from(MOUNTS))
def test_any_path_is_guarded_as_is_protected_says(
        methods: tuple[str, ...], method: str, path: str, mount: str) -> None:
    _check(methods, method, path, mount)


@pytest.mark.parametrize("methods", METHOD_SETS)
def test_an_unguarded_method_is_guarded_at_no_path(methods: tuple[str, ...]) -> None:
    config = _config(methods)
    unguarded = unguarded_methods(config, "/failopen")
    assert unguarded, methods  # the fast path exists for every one of these
    for method in unguarded:
        assert not any(config.is_protected(method, path) for path in (*PATH_SPELLINGS, *PATHS))
    # And the set is as large as it may be: every method it leaves out is guarded somewhere.
    for method in set(METHODS) - unguarded:
        assert config.is_protected(method, PATHS[0]), method


def test_head_is_guarded_where_get_is_so_it_never_takes_the_fast_path() -> None:
    assert unguarded_methods(_config(("GET",)), "/failopen").isdisjoint({"GET", "HEAD"})


def test_no_fast_path_for_a_prefix_outside_ascii_or_with_nothing_protected() -> None:
    assert unguarded_methods(_config(("POST",)), "/f\u00e4ilopen") == frozenset()
    assert unguarded_methods(Config(protected_paths=(), verify_url="http://127.0.0.1:9/v",
                                    private_key="k"), "/failopen") == frozenset()


def test_a_route_under_a_prefix_outside_ascii_is_still_answered() -> None:
    """The fast path compares raw text with the routes: a prefix outside ASCII turns it off,
    so the server's latin-1 spelling of the route still reaches it."""
    runtime = FailOpen(_config(("POST",)))
    try:
        wsgi = WsgiMiddleware(_raw_app, runtime=runtime, prefix="/f\u00e4ilopen")
        assert _wsgi_outcome(wsgi, "GET", "/f\u00e4ilopen/flag", "") == "route"
    finally:
        runtime.stop()


def test_an_environ_without_method_or_path_takes_the_full_check() -> None:
    """A missing REQUEST_METHOD is read as GET by the full check: guarded where GET is."""
    _, wsgi, _ = _stack(("GET",))
    env = environ("/login", method="GET")
    del env["REQUEST_METHOD"]
    assert call(wsgi, env)[0].startswith("403")
    env = environ("/", method="GET")
    del env["PATH_INFO"]
    assert call(wsgi, env)[2] == b"APP"


def teardown_module() -> None:
    for runtime, _, _ in _STACKS.values():
        runtime.stop()
