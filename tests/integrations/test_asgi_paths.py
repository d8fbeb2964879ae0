"""Every spelling of a protected route that a real Starlette router resolves meets the guard.

Starlette compiles ``Route("/login")`` to ``^/login$``, and ``$`` also matches before a final
``\\n``: ``POST /login%0A`` reaches the login view. These tests send such spellings through a
real Starlette app behind the middleware (httpx's ASGITransport), and let Hypothesis search for
any path the router sends to a protected view that failopen would not guard.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from _asgi_kit import API, Stack, drive, http_scope
from failopen.integrations.asgi import FailOpenMiddleware
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from failopen import Config
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage

Make = Callable[..., Stack]

# What a client can put into scope["path"] with percent-encoding (servers decode it once).
ENCODED_SPELLINGS = [
    "/login%0A", "/login%0a", "/login%0D%0A", "/login%20", "/login%09", "/login%00",
    "/login%0B", "/login%0C", "/login%1F", "/login%7F", "/login%C2%85", "/login%C2%A0",
    "/login%E2%80%A8", "/login%E3%80%80", "/login%EF%BB%BF", "/login;x", "/login%3Bx",
    "/login%3F", "/login%23", "/login%5C", "/login%250A",
]


@pytest.mark.anyio
async def test_post_login_with_a_trailing_newline_is_refused_without_a_token(
    make_asgi: Make,
) -> None:
    # The settings say "/login/"; the Starlette app routes "/login" (and "/login\n") to the view.
    stack = make_asgi(protected_paths=("/login/",))
    response = await stack.client.post("/login%0A", data={"username": "ann"})
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "missing_token"
    assert stack.verify.requests == 0


@pytest.mark.anyio
@pytest.mark.parametrize("path", ENCODED_SPELLINGS)
async def test_every_encoded_spelling_is_refused_without_a_token(
    make_asgi: Make, path: str
) -> None:
    stack = make_asgi(protected_paths=("/login/",))
    response = await stack.client.post(path, data={"username": "ann"})
    assert response.status_code == 403, (path, response.status_code, response.text)


@pytest.mark.anyio
@pytest.mark.parametrize(("path", "root_path"), [
    ("/app/login\n", "/app"), ("/login\n", "/app"), ("//login\n", ""), ("/./login \t", ""),
    ("/x/../login\x00", ""), ("/app//login\r\n", "/app"),
])
async def test_combined_spellings_are_guarded(make_asgi: Make, path: str, root_path: str) -> None:
    # Beyond what httpx sends: a raw scope, as a server builds it from "//login%0A" and the like.
    stack = make_asgi(protected_paths=("/login/",))
    reply = await drive(stack.app, http_scope(path, root_path=root_path, headers=API),
                        [{"type": "http.request", "body": b""}])
    assert (reply.status, reply.json()["error"]["code"]) == (403, "missing_token"), path


@pytest.mark.anyio
async def test_the_canonical_spelling_with_a_token_still_reaches_the_app(make_asgi: Make) -> None:
    stack = make_asgi(protected_paths=("/login/",))
    response = await stack.client.post("/login", headers={"X-Enforcement-Token": "good-token"})
    assert response.status_code == 200


# --- property: whatever the router resolves to a protected view was guarded ----------------------

PROTECTED = ("/login/", "/signup/", "/auth/login/", "/account/")
_ODD = ["\n", "\r", "\t", " ", "\x00", "\x0b", "\x7f", "\x85", "\xa0", "\u2028", "\ufeff", ";",
        "?", "#", "%", "%0A", "%20", "\\", "/", ".", "//", "/."]
_PIECES = st.sampled_from(["login", "signup", "auth", "account", "x", "L", *_ODD])
# A route's own spelling with odd characters around it, or any mix of the pieces.
_NEAR_A_ROUTE = st.builds(
    lambda before, route, after, tail: before + route + after + tail,
    st.sampled_from(["", "/", "/.", "/x/.."]),
    st.sampled_from(["/login", "/signup/", "/signup/x", "/auth/login", "/account/", "/account/x"]),
    st.lists(st.sampled_from(_ODD), max_size=3).map("".join),
    st.sampled_from(["", "/", "x", "/x"]),
)
_ANYTHING = st.lists(_PIECES, max_size=8).map(lambda parts: "/" + "".join(parts))


class _Verifier:
    """Every token is valid: the property is about which requests meet the guard at all."""

    def verify(self, token: str) -> VerifyResult:
        return VerifyResult(VerifyOutcome.VALID, "test")

    async def averify(self, token: str) -> VerifyResult:
        return VerifyResult(VerifyOutcome.VALID, "test")


async def _view(request: Request) -> PlainTextResponse:
    guarded = "failopen" in request.scope.get("state", {})
    return PlainTextResponse("guarded" if guarded else "UNGUARDED")


def _app() -> Starlette:
    # The routes a site protects with the PROTECTED settings, in the ways Starlette declares them.
    return Starlette(routes=[
        Route("/login", _view, methods=["POST"]),
        Route("/signup/", _view, methods=["POST"]),
        Route("/signup/{step}", _view, methods=["POST"]),
        Mount("/auth", routes=[Route("/login", _view, methods=["POST"])]),
        Mount("/account", routes=[Route("/", _view, methods=["POST"]),
                                  Route("/{rest:path}", _view, methods=["POST"])]),
    ])


_RUNTIME = FailOpen(Config(status_url="https://status.test", protected_paths=PROTECTED),
                    verifier=_Verifier(), status_transport=FakeStatusPage().transport())
_GUARDED = FailOpenMiddleware(_app(), runtime=_RUNTIME)
_BARE = _app()


def _call(app: Any, path: str, root_path: str) -> tuple[int, bytes]:
    scope = http_scope(root_path + path, root_path=root_path,
                       headers=[("X-Enforcement-Token", "t")])
    reply = asyncio.run(drive(app, scope, [{"type": "http.request", "body": b""}]))
    assert reply.status is not None
    return reply.status, reply.body


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.one_of(_NEAR_A_ROUTE, _ANYTHING), root_path=st.sampled_from(["", "/app"]))
@example(path="/login\n", root_path="")
@example(path="/auth/login\n", root_path="")
@example(path="/signup/\n", root_path="/app")
def test_whatever_starlette_routes_to_a_protected_view_is_guarded(
    path: str, root_path: str
) -> None:
    status, body = _call(_GUARDED, path, root_path)
    assert body != b"UNGUARDED", repr(path)
    if status == 200:
        assert body == b"guarded"
    # The same path without failopen: when the router reaches the view, failopen said so.
    bare_status, bare_body = _call(_BARE, path, root_path)
    if bare_body == b"UNGUARDED":
        assert _RUNTIME.config.protects_path(path) or _RUNTIME.config.protects_path(
            root_path + path), repr(path)


def teardown_module() -> None:
    _RUNTIME.stop()
