"""Under Django's real WSGIHandler and ASGIHandler the middleware runs natively: no adapter.

Django logs "Synchronous handler adapted for middleware ..." / "Asynchronous handler adapted ..."
(logger ``django.request``, DEBUG, when ``settings.DEBUG``) whenever it wraps a middleware in a
thread or an event loop. A control middleware that does need adapting proves the log is seen.
"""

from __future__ import annotations

import asyncio
import io
import logging
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.test import override_settings
from failopen.integrations.django import conf

from failopen.testing import FakeVerifyAPI

OURS = "failopen.integrations.django.middleware.FailOpenMiddleware"
CHAIN = ["django.middleware.common.CommonMiddleware", OURS]
GOOD = FakeVerifyAPI.GOOD
GOOD_TOO = "another-good-token"  # a solved token is good once: each view gets its own
# (path, method, token, expected status): protected and open routes, sync and async views.
REQUESTS = [
    ("/login/", "POST", None, 403), ("/login/", "POST", GOOD, 200),
    ("/login/async/", "POST", None, 403), ("/login/async/", "POST", GOOD_TOO, 200),
    ("/open/", "POST", None, 200), ("/open/async/", "GET", None, 200),
]


@pytest.fixture(autouse=True)
def _second_token(fake_verify_api: FakeVerifyAPI) -> None:
    fake_verify_api.add_token(GOOD_TOO)


def wsgi_call(handler: WSGIHandler, method: str, path: str, token: str | None) -> int:
    environ = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "SERVER_NAME": "testserver",
        "SERVER_PORT": "80", "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(b""),
        "CONTENT_LENGTH": "0", "REMOTE_ADDR": "127.0.0.1",
    }
    if token:
        environ["HTTP_X_ENFORCEMENT_TOKEN"] = token
    statuses: list[str] = []
    response = handler(environ, lambda status, headers: statuses.append(status))
    b"".join(response)
    response.close()
    return int(statuses[0].split()[0])


async def asgi_call(handler: ASGIHandler, method: str, path: str, token: str | None, *,
                    root_path: str = "") -> int:
    headers = [(b"host", b"testserver")]
    if token:
        headers.append((b"x-enforcement-token", token.encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": root_path, "scheme": "http", "headers": headers,
             "client": ("127.0.0.1", 5000), "server": ("testserver", 80)}
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the client stays connected until the handler is done
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await handler(scope, receive, send)
    return int(next(m["status"] for m in sent if m["type"] == "http.response.start"))


def adapted(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "handler adapted" in r.getMessage()]


@pytest.mark.parametrize("control", [None, "django_test_urls.AsyncOnlyMiddleware"])
def test_wsgi_handler_runs_the_middleware_natively(
    use_failopen: Any, caplog: pytest.LogCaptureFixture, control: str | None
) -> None:
    use_failopen(PROTECTED_PATHS=["/login/"])
    caplog.set_level(logging.DEBUG, logger="django.request")
    with override_settings(DEBUG=True, MIDDLEWARE=([control] if control else []) + CHAIN):
        handler = WSGIHandler()
        got = [wsgi_call(handler, method, path, token) for path, method, token, _ in REQUESTS]
    assert got == [status for *_, status in REQUESTS]
    if control:
        assert adapted(caplog) == [f"Synchronous handler adapted for middleware {control}."]
    else:
        assert adapted(caplog) == []


@pytest.mark.parametrize("control", [None, "django_test_urls.SyncOnlyMiddleware"])
def test_asgi_handler_runs_the_middleware_natively(
    use_failopen: Any, caplog: pytest.LogCaptureFixture, control: str | None
) -> None:
    use_failopen(PROTECTED_PATHS=["/login/"])
    caplog.set_level(logging.DEBUG, logger="django.request")

    async def scenario() -> list[int]:
        handler = ASGIHandler()
        try:
            return [await asgi_call(handler, method, path, token)
                    for path, method, token, _ in REQUESTS]
        finally:
            await conf.runtime().aclose()

    with override_settings(DEBUG=True, MIDDLEWARE=([control] if control else []) + CHAIN):
        got = asyncio.run(scenario())
    assert got == [status for *_, status in REQUESTS]
    if control:
        assert adapted(caplog) == [f"Asynchronous handler adapted for middleware {control}."]
    else:
        assert adapted(caplog) == []
