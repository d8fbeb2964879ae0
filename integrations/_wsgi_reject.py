"""A site's own refusal page for the WSGI middleware: ``FailOpenMiddleware(app, reject=...)``.

``reject(environ, decision)`` returns a WSGI app: a Flask or werkzeug ``Response`` is one (build
it inside ``app.request_context(environ)`` to render a template), so is any
``page(environ, start_response)``. ``environ["wsgi.input"]`` holds the body failopen read,
replayed; the protected app is never called.

The page is run to its end before anything reaches the server, so whatever goes wrong in it
(an exception, a body that is not bytes, no ``start_response``, something that is not an app)
is logged and answered with failopen's own refusal instead, never half a page and never an
exception into the server. What goes out is sealed: ``Cache-Control: no-store`` over any caching
it asked for, the decision's ``Retry-After`` when it set none (``web.sealed_page_headers``), no
body for HEAD. A refusal page is small; holding it whole costs nothing an admitted request pays.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from failopen import web
from failopen.engine.guard import Decision

from ._shared import check_reject
from ._wsgi_body import Environ, Response

__all__ = ["Reject", "SitePage", "site_page"]

logger = logging.getLogger("failopen.wsgi")

Reject = Callable[[Environ, Decision], Any]


def site_page(reject: Reject | None) -> SitePage | None:
    """The ``reject=`` of the middleware, checked now (a TypeError naming it), or None."""
    check_reject(reject, "environ", sync_only=True)
    return SitePage(reject) if reject is not None else None


def _run(page: Any, environ: Environ, decision: Decision) -> Response:
    """Call a WSGI app and keep its whole answer, checked as a server would check it."""
    if not callable(page):
        raise TypeError(f"reject= returned {type(page).__name__}, not a WSGI app "
                        "(a Flask Response, or (environ, start_response))")
    started: list[tuple[str, list[tuple[str, str]]]] = []
    chunks: list[bytes] = []

    def start_response(status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Callable[[bytes], object]:
        # Nothing has reached the server yet, so a second call (PEP 3333's exc_info) replaces
        # the first, as it may before the first byte.
        started[:] = [(status, list(headers))]
        return chunks.append  # the legacy write()

    body = page(environ, start_response)
    try:
        chunks.extend(body)
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()  # PEP 3333: always, so the page's resources are released
    if not started:
        raise TypeError("reject='s app never called start_response")
    status, headers = started[0]
    if not isinstance(status, str) or not all(
            isinstance(name, str) and isinstance(value, str) for name, value in headers):
        raise TypeError("reject='s app gave a status or headers that are not str")
    return Response(status, web.sealed_page_headers(headers, decision), b"".join(chunks))


class SitePage:
    """Runs a site's ``reject=`` callable; its page sealed, or None to send failopen's."""

    __slots__ = ("reject",)

    def __init__(self, reject: Reject) -> None:
        self.reject = reject

    def response(self, environ: Environ, decision: Decision) -> Response | None:
        """The site's page for this refusal, or None (logged) when it could not be had."""
        try:
            # Also when failopen itself failed before setting it: the page may read it.
            environ["failopen.decision"] = decision
            return _run(self.reject(environ, decision), environ, decision)
        except Exception:
            # Logged with the page's traceback, never with the request's headers or body.
            logger.exception("failopen reject= failed on a %d %s refusal; answering with "
                             "failopen's own page", decision.status_code, decision.outcome)
            return None
