"""Lifespan: the watcher follows the server's startup and shutdown; the app still gets both."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from _asgi_kit import LifespanServer, Stack, drive, http_scope
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

pytestmark = pytest.mark.anyio

Make = Callable[..., Stack]


async def test_watcher_runs_from_startup_to_after_the_apps_shutdown(make_asgi: Make) -> None:
    seen: list[tuple[str, bool]] = []
    holder: list[Stack] = []

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        seen.append(("startup", holder[0].runtime.watcher.running))
        yield {"db": "pool"}
        seen.append(("shutdown", holder[0].runtime.watcher.running))

    async def whoami(request: Request) -> JSONResponse:
        return JSONResponse({"db": request.state.db,
                             "failopen": request.state.failopen.outcome})

    inner = Starlette(routes=[Route("/login", whoami, methods=["POST"])], lifespan=lifespan)
    stack = make_asgi(inner=inner, started=False)
    holder.append(stack)
    server = LifespanServer(stack.app)

    await server.startup()
    assert server.sent == [{"type": "lifespan.startup.complete"}]
    assert stack.runtime.watcher.running
    assert server.scope["state"] == {"db": "pool"}  # the app's lifespan state reached the server

    # A request carries a copy of the lifespan state, as servers do; both kinds of state show.
    stack.runtime.flag.force_off("drill")
    reply = await drive(stack.app, http_scope("/login", state=dict(server.scope["state"])),
                        [{"type": "http.request", "body": b""}])
    assert (reply.status, reply.json()) == (200, {"db": "pool", "failopen": "bypassed_flag_off"})

    await server.shutdown()
    assert server.sent[-1] == {"type": "lifespan.shutdown.complete"}
    assert seen == [("startup", True), ("shutdown", True)]
    assert not stack.runtime.watcher.running


async def test_a_failing_shutdown_still_stops_the_watcher(make_asgi: Make) -> None:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        raise RuntimeError("the app's shutdown failed")

    stack = make_asgi(inner=Starlette(lifespan=lifespan), started=False)
    server = LifespanServer(stack.app)
    await server.startup()
    assert stack.runtime.watcher.running
    with pytest.raises(RuntimeError, match="shutdown failed"):
        await server.shutdown()
    assert server.sent[-1]["type"] == "lifespan.shutdown.failed"
    assert not stack.runtime.watcher.running


async def test_a_failing_startup_passes_through(make_asgi: Make) -> None:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        raise RuntimeError("no database")
        yield

    stack = make_asgi(inner=Starlette(lifespan=lifespan), started=False)
    server = LifespanServer(stack.app)
    await server.startup()
    assert server.sent[0]["type"] == "lifespan.startup.failed"
    assert "no database" in server.sent[0]["message"]
    assert server._task is not None
    with pytest.raises(RuntimeError, match="no database"):
        await server._task


async def test_an_app_without_lifespan_behaves_as_it_did_and_starts_lazily(
    make_asgi: Make,
) -> None:
    class HttpOnly(Exception):
        pass

    async def http_only(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise HttpOnly(scope["type"])  # what servers read as "lifespan unsupported"
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    stack = make_asgi(inner=http_only, started=False)
    server = LifespanServer(stack.app)
    with pytest.raises(HttpOnly):
        await server.shutdown()  # startup then shutdown: the app raised on the first receive
    assert server.sent == []
    assert not stack.runtime.watcher.running
    response = await stack.client.post("/login", headers={"X-Enforcement-Token": "good-token"})
    assert response.status_code == 204
    assert stack.runtime.watcher.running  # started by the first guarded request


async def test_a_failing_startup_stops_the_watcher_it_started(make_asgi: Make) -> None:
    # The server gives up after startup.failed and never sends shutdown.
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        raise RuntimeError("no database")
        yield

    stack = make_asgi(inner=Starlette(lifespan=lifespan), started=False)
    server = LifespanServer(stack.app)
    await server.startup()
    assert server.sent[0]["type"] == "lifespan.startup.failed"
    assert not stack.runtime.watcher.running
    assert server._task is not None
    with pytest.raises(RuntimeError, match="no database"):
        await server._task
