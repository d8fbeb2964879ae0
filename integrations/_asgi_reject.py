"""A site's own refusal page for the ASGI middleware: ``FailOpenMiddleware(app, reject=...)``.

``reject(scope, decision)`` (a plain or an ``async`` function) returns an ASGI app: a Starlette or
FastAPI ``Response`` is one, so is any ``async def page(scope, receive, send)``. As Starlette
calls its exception handlers, a plain function runs in a worker thread (it may render templates)
and an ``async`` one on the event loop. The page's app gets the request's ``receive``, with the
body failopen read replayed; the protected app is never called.

What it sends is sealed on its way out: ``Cache-Control: no-store`` over any caching it asked
for, the decision's ``Retry-After`` when it set none (``web.sealed_page_headers``), no body for
HEAD. When the function raises, returns something that is not an app, or its app fails or ends
before starting a response, the error is logged and failopen's own refusal goes out instead; a
page that fails after starting has its response ended. Never an exception into the server.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from failopen import web
from failopen.engine.guard import Decision

from ._asgi_body import Message, Receive, Scope, Send, encode_headers
from ._shared import check_reject, is_async_callable

__all__ = ["Reject", "SitePage", "site_page"]

logger = logging.getLogger("failopen.asgi")

Reject = Callable[[Scope, Decision], Any]


def site_page(reject: Reject | None) -> SitePage | None:
    """The ``reject=`` of the middleware, checked now (a TypeError naming it), or None."""
    check_reject(reject, "scope")
    return SitePage(reject) if reject is not None else None


def _sealed(message: Message, decision: Decision) -> Message:
    """``http.response.start`` with the headers every refusal carries."""
    pairs = [(bytes(name).decode("latin-1"), bytes(value).decode("latin-1"))
             for name, value in message.get("headers", ())]
    return {**message, "headers": encode_headers(web.sealed_page_headers(pairs, decision))}


class SitePage:
    """Sends the page a site's ``reject=`` callable returns, sealed; says when it could not."""

    __slots__ = ("_is_async", "reject")

    def __init__(self, reject: Reject) -> None:
        self.reject = reject
        self._is_async = is_async_callable(reject)

    async def _app(self, scope: Scope, decision: Decision) -> Any:
        if self._is_async:
            page = await self.reject(scope, decision)
        else:
            page = await asyncio.to_thread(self.reject, scope, decision)
            if inspect.isawaitable(page):  # a plain function handing back a coroutine
                page = await page
        if not callable(page):
            raise TypeError(f"reject= returned {type(page).__name__}, not an ASGI app "
                            "(a Starlette Response, or async (scope, receive, send))")
        return page

    async def send(
        self, scope: Scope, receive: Receive, send: Send, decision: Decision, *, head: bool
    ) -> bool:
        """Send the site's page; False when nothing was sent (the caller sends failopen's)."""
        started = finished = False

        async def sealed_send(message: Message) -> None:
            nonlocal started, finished
            kind = message["type"]
            if kind == "http.response.start":
                if started:
                    raise RuntimeError("reject='s app started its response twice")
                await send(_sealed(message, decision))
                started = True
            elif kind == "http.response.body":
                if not started or finished:
                    raise RuntimeError("reject='s app sent a body outside its response")
                if head and message.get("body"):
                    message = {**message, "body": b""}
                await send(message)
                finished = not message.get("more_body", False)
            else:  # an extension's message (Starlette's test client asks for debug ones)
                await send(message)
                finished = finished or kind == "http.response.pathsend"

        try:
            # Also when failopen itself failed before setting it: the page may read it.
            state = scope.get("state")
            if state is None:
                scope["state"] = state = {}
            state["failopen"] = decision
            page = await self._app(scope, decision)
            await page(scope, receive, sealed_send)
        except Exception:
            # Logged with the page's traceback, never with the request's headers or body.
            logger.exception("failopen reject= failed on a %d %s refusal%s",
                             decision.status_code, decision.outcome,
                             " after its response started" if started
                             else "; answering with failopen's own page")
        else:
            if not started:
                logger.error("failopen reject= sent no response for a %d %s refusal; answering "
                             "with failopen's own page", decision.status_code, decision.outcome)
        if not started:
            return False
        if not finished:
            await _end(send)
        return True


async def _end(send: Send) -> None:
    """Close a started response its page left open, so the server does not wait for more."""
    try:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except Exception:  # the server may have ended it already: nothing more to say
        logger.debug("failopen could not close a reject= response", exc_info=True)
