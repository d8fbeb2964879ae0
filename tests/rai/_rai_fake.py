"""A scripted session-intelligence service for httpx.MockTransport, shared by the rai tests."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from failopen.rai import AsyncClient, Client

BASE = "https://rai.test"
CLIENT_ID = "client-1"
SECRET = "S3CRET-client-secret-4f9a"
AUTHORIZE = "/api/rai/v1/authorize"


def token_value(n: int) -> str:
    """The n-th token the fake issues (distinctive, so leak checks can search for it)."""
    return f"TOKEN-{n}-a8d3f0c2e1"


def envelope(status: int, code: str, message: str = "it failed", request_id: str = "req-1",
             headers: dict[str, str] | None = None) -> httpx.Response:
    """An error answer in the spec's envelope (2.4)."""
    return httpx.Response(
        status,
        json={"error": {"code": code, "message": message, "request_id": request_id}},
        headers=headers,
    )


def page(key: str, items: list[dict[str, Any]], token: str | None = None,
         **extra: Any) -> httpx.Response:
    """A list answer."""
    body: dict[str, Any] = {key: items, "schema_version": "rai-v1", **extra}
    if token is not None:
        body["next_page_token"] = token
    return httpx.Response(200, json=body)


def bearer(request: httpx.Request) -> str:
    return request.headers.get("authorization", "").removeprefix("Bearer ")


def _snapshot(request: httpx.Request) -> httpx.Request:
    # The auth flow re-signs the same Request object on a retry: keep what was sent each time.
    return httpx.Request(request.method, request.url, headers=request.headers.copy())


class FakeRai:
    """Answers authorize itself (counting calls, issuing numbered tokens); the rest goes to
    ``data``, a function of the request. ``authorize`` may replace the authorize answer.
    ``auth_delay`` holds authorize back, to make concurrent callers pile up."""

    def __init__(
        self,
        data: Callable[[httpx.Request], httpx.Response] | None = None,
        *,
        expires_in: int = 3600,
        authorize: Callable[[httpx.Request], httpx.Response | None] | None = None,
        auth_delay: float = 0.0,
    ) -> None:
        self.data = data or (lambda request: page("cohorts", []))
        self.expires_in = expires_in
        self.authorize = authorize
        self.auth_delay = auth_delay
        self.auth_calls = 0
        self.auth_bodies: list[Any] = []
        self.requests: list[httpx.Request] = []
        self._lock = threading.Lock()

    def _authorize(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            self.auth_calls += 1
            n = self.auth_calls
            self.auth_bodies.append(json.loads(request.content))
        if self.authorize is not None:
            answer = self.authorize(request)
            if answer is not None:
                return answer
        return httpx.Response(200, json={
            "access_token": token_value(n), "expires_in": self.expires_in, "token_type": "Bearer",
        })

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(AUTHORIZE):
            if self.auth_delay:
                time.sleep(self.auth_delay)
            return self._authorize(request)
        with self._lock:
            self.requests.append(_snapshot(request))
        return self.data(request)

    async def handle_async(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(AUTHORIZE):
            if self.auth_delay:
                await asyncio.sleep(self.auth_delay)
            return self._authorize(request)
        self.requests.append(_snapshot(request))
        return self.data(request)

    @property
    def params(self) -> list[list[tuple[str, str]]]:
        """The query of each data request, as (name, value) pairs in order."""
        return [list(request.url.params.multi_items()) for request in self.requests]


def make_client(fake: FakeRai, **kwargs: Any) -> tuple[Client, list[float]]:
    """A Client on the fake whose sleeps are recorded, not slept."""
    sleeps: list[float] = []
    kwargs.setdefault("sleep", sleeps.append)
    base = kwargs.pop("base_url", BASE)
    client = Client(base, CLIENT_ID, SECRET, transport=httpx.MockTransport(fake), **kwargs)
    return client, sleeps


def make_async_client(fake: FakeRai, **kwargs: Any) -> tuple[AsyncClient, list[float]]:
    """An AsyncClient on the fake whose sleeps are recorded, not slept."""
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    kwargs.setdefault("sleep", sleep)
    base = kwargs.pop("base_url", BASE)
    client = AsyncClient(
        base, CLIENT_ID, SECRET, transport=httpx.MockTransport(fake.handle_async), **kwargs
    )
    return client, sleeps


def misleading_pages(request: httpx.Request) -> httpx.Response:
    """Pages whose cursor comes first and whose record hides a decoy cursor further on."""
    token = request.url.params.get("page_token")
    if token == "decoy":
        return envelope(400, "invalid_page_token")
    index = 0 if token is None else int(token)
    following = str(index + 1) if index < 2 else ""
    record = f'{{"session_id":"s{index}","cohort_id":"c","note":{{"next_page_token":"decoy"}}}}'
    content = f'{{"next_page_token":"{following}","sessions":[{record}]}}'.encode()
    return httpx.Response(200, content=content, headers={"Content-Type": "application/json"})
