"""Fixtures for the ASGI and WSGI middleware tests. Nothing here configures Django (see django/).

``make_asgi`` builds the whole stack: the test kit's fakes of the vendor served in-process
(``transport()``), a real FailOpen, the Starlette app of ``_asgi_kit`` (plus a raw ASGI recorder
under ``/raw``) wrapped in FailOpenMiddleware, and an httpx client over ``ASGITransport``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _asgi_kit import CLIENT_IP, PROTECTED, Recorder, Stack, starlette_app
from _wsgi_kit import PROTECTED as WSGI_PROTECTED
from _wsgi_kit import Recorder as WsgiRecorder
from _wsgi_kit import WsgiStack, flask_app
from failopen.integrations.asgi import FailOpenMiddleware
from failopen.integrations.wsgi import FailOpenMiddleware as WsgiMiddleware
from werkzeug.test import Client

from failopen import Config
from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI


def runtime_over_fakes(protected: Any, changes: dict[str, Any],
                       runtime_kwargs: dict[str, Any] | None,
                       ) -> tuple[FakeStatusPage, FakeVerifyAPI, FailOpen]:
    """A runtime in process over fresh fakes; ``changes`` are Config fields."""
    page, verify = FakeStatusPage(), FakeVerifyAPI()
    settings: dict[str, Any] = {
        "status_url": "https://status.test", "verify_url": "https://verify.test" + verify.path,
        "private_key": verify.private_key, "protected_paths": protected,
        # The watcher reads the page once at start; tests flip the flag through the guard's
        # confirmation (a tiny TTL: every failing verify checks again) or an override.
        "poll_interval": 3600.0, "confirm_ttl": 0.001, "retry_after": 7,
    }
    settings.update(changes)
    runtime = FailOpen(Config(**settings), status_transport=page.transport(),
                       verify_transport=verify.transport(),
                       verify_async_transport=verify.transport(), **(runtime_kwargs or {}))
    return page, verify, runtime


def start_and_read_once(runtime: FailOpen) -> None:
    """The watcher's first reading is in before the test changes what the page says."""
    runtime.start()
    deadline = time.monotonic() + 5
    while runtime.state.source == "default" and time.monotonic() < deadline:
        time.sleep(0.001)
    assert runtime.state.source == "watcher", runtime.state


@pytest.fixture
async def make_asgi(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[..., Stack]]:
    """Build stacks (Config fields as keywords); every runtime and client is closed afterwards.

    ``started=True`` (the default) starts the watcher and waits for its first reading of the
    (operational) page, so the flag's state is the watcher's before the test begins.
    """
    stacks: list[Stack] = []

    def build(*, inner: Any = None, prefix: str = "/failopen", snippet_path: Path | None = None,
              runtime_kwargs: dict[str, Any] | None = None, started: bool = True,
              reject: Any = None, **changes: Any) -> Stack:
        page, verify, runtime = runtime_over_fakes(PROTECTED, changes, runtime_kwargs)
        recorder = Recorder()
        app_inner = inner if inner is not None else starlette_app()

        async def dispatch(scope: Any, receive: Any, send: Any) -> None:
            target = recorder if scope.get("path", "").startswith("/raw") else app_inner
            await target(scope, receive, send)

        app = FailOpenMiddleware(dispatch, runtime=runtime, prefix=prefix,
                                 snippet_path=snippet_path, reject=reject)
        # An API client's Accept, as make_wsgi's posts send: a refusal is then JSON (a browser's
        # Accept gets the HTML page; tests that want it say so).
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app, client=(CLIENT_IP, 4711)),
                                   base_url="http://testserver",
                                   headers={"Accept": "application/json"})
        stack = Stack(page, verify, runtime, app, recorder, client)
        stacks.append(stack)
        if started:
            start_and_read_once(runtime)
        return stack

    yield build
    for stack in stacks:
        await stack.client.aclose()
        await stack.runtime.aclose()


@pytest.fixture
def make_wsgi() -> Iterator[Callable[..., WsgiStack]]:
    """``make_asgi``'s WSGI twin: Flask behind FailOpenMiddleware, a werkzeug test Client."""
    stacks: list[WsgiStack] = []

    def build(*, inner: Any = None, prefix: str = "/failopen", snippet_path: Path | None = None,
              runtime_kwargs: dict[str, Any] | None = None, started: bool = True,
              reject: Any = None, **changes: Any) -> WsgiStack:
        page, verify, runtime = runtime_over_fakes(WSGI_PROTECTED, changes, runtime_kwargs)
        recorder = WsgiRecorder()
        app_inner = inner if inner is not None else flask_app()

        def dispatch(environ: dict[str, Any], start_response: Any) -> Any:
            target = recorder if environ.get("PATH_INFO", "").startswith("/raw") else app_inner
            return target(environ, start_response)

        app = WsgiMiddleware(dispatch, runtime=runtime, prefix=prefix, snippet_path=snippet_path,
                             reject=reject)
        client = Client(app)
        stack = WsgiStack(page, verify, runtime, app, recorder, client)
        stacks.append(stack)
        if started:
            start_and_read_once(runtime)
        return stack

    yield build
    for stack in stacks:
        stack.runtime.stop()
