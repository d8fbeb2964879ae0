"""Helpers shared by the ASGI middleware tests: the apps behind it, and a raw ASGI driver.

``Recorder`` is a raw ASGI app keeping every scope and message it gets; ``starlette_app()`` the
Starlette app most tests put behind the middleware; ``drive()`` calls an ASGI app directly with
scripted ``receive`` messages, for what httpx cannot express (chunks, disconnects, counting
reads); ``LifespanServer`` plays a server's part in lifespan. The fixture building whole
stacks (``make_asgi``) is in conftest.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from failopen.integrations.asgi import FailOpenMiddleware
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI

Message = dict[str, Any]
PROTECTED = ("/login", "/raw", "/boom")
ADMIN_TOKEN = "adm-" + "k" * 40
CLIENT_IP = "203.0.113.9"
# An API client's Accept, for raw scopes: its refusals are JSON (a browser's get the HTML page).
API = (("Accept", "application/json"),)


async def _login(request: Request) -> JSONResponse:
    decision = request.state.failopen
    body = await request.body()
    return JSONResponse({"ok": True, "decision": decision.to_dict(), "bypassed": decision.bypassed,
                         "body_sha256": hashlib.sha256(body).hexdigest(), "body_len": len(body)})


async def _upload(request: Request) -> JSONResponse:
    sizes = [len(chunk) async for chunk in request.stream() if chunk]
    return JSONResponse({"chunks": len(sizes), "len": sum(sizes),
                         "failopen": "failopen" in request.scope.get("state", {})})


async def _health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def _boom(request: Request) -> PlainTextResponse:
    raise RuntimeError("the app's own bug")


def starlette_app() -> Starlette:
    """The app behind the middleware in most tests (``/login`` and ``/boom`` are protected)."""
    return Starlette(routes=[
        Route("/login", _login, methods=["POST"]),
        Route("/upload", _upload, methods=["POST"]),
        Route("/health", _health),
        Route("/boom", _boom, methods=["POST"]),
    ])


def sha256(data: bytes) -> str:
    """Hex digest, to compare the body the app read with the one sent."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class Recorder:
    """A raw ASGI app: keeps every scope and message it gets, answers 200 with the body."""

    calls: list[tuple[dict[str, Any], Any, Any]] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls.append((scope, receive, send))
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            self.messages.append(message)
            body += message.get("body", b"")
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


@dataclass
class Stack:
    """One middleware under test and everything around it."""

    page: FakeStatusPage
    verify: FakeVerifyAPI
    runtime: FailOpen
    app: FailOpenMiddleware
    recorder: Recorder
    client: httpx.AsyncClient


@dataclass
class Reply:
    """What ``drive`` saw the app send, and how often the app called ``receive``."""

    status: int | None
    headers: dict[str, str]
    body: bytes
    receive_calls: int

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


def http_scope(path: str, *, method: str = "POST", headers: Iterable[tuple[str, str]] = (),
               **extra: Any) -> dict[str, Any]:
    """A minimal http scope, as a server builds it."""
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": (CLIENT_IP, 4711), "server": ("testserver", 80),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers], **extra,
    }


def chunks(body: bytes, *sizes: int) -> list[Message]:
    """``body`` as http.request messages of the given sizes (the rest in the last one)."""
    messages, at = [], 0
    for size in sizes:
        messages.append({"type": "http.request", "body": body[at:at + size], "more_body": True})
        at += size
    messages.append({"type": "http.request", "body": body[at:], "more_body": False})
    return messages


async def drive(app: Any, scope: dict[str, Any], messages: Iterable[Message] = ()) -> Reply:
    """Call an ASGI app with scripted receive messages (then http.disconnect forever)."""
    queue: Iterator[Message] = iter(list(messages))
    calls = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal calls
        calls += 1
        return next(queue, {"type": "http.disconnect"})

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next((m for m in sent if m["type"] == "http.response.start"), None)
    headers = {k.decode(): v.decode() for k, v in start["headers"]} if start else {}
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Reply(start["status"] if start else None, headers, body, calls)


class LifespanServer:
    """What a server does for lifespan: startup, wait, shutdown; keeps what the app sent."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.scope: dict[str, Any] = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        self.sent: list[dict[str, Any]] = []
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._replied = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _receive(self) -> dict[str, Any]:
        return await self._inbox.get()

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        self._replied.set()

    async def _event(self, name: str) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.app(self.scope, self._receive, self._send))
        self._replied.clear()
        await self._inbox.put({"type": f"lifespan.{name}"})
        replied = asyncio.create_task(self._replied.wait())
        await asyncio.wait([replied, self._task], timeout=5, return_when=asyncio.FIRST_COMPLETED)
        replied.cancel()

    async def startup(self) -> None:
        await self._event("startup")

    async def shutdown(self) -> None:
        await self._event("shutdown")
        assert self._task is not None
        await asyncio.wait_for(self._task, 5)
