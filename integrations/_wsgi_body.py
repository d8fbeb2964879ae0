"""Raw WSGI plumbing for the middleware: capped body reads, replay, prebuilt answers.

Every answer's content comes from ``failopen.web``; this module only turns it into WSGI calls.
A protected route may carry its token inside the body. Reading it consumes ``wsgi.input``;
:func:`replay` hands the app the very same bytes afterwards (a ``BytesIO`` with a matching
``CONTENT_LENGTH``). A body over the cap is never buffered: a declared ``CONTENT_LENGTH`` over it
is refused before reading, a chunked one (``wsgi.input_terminated``) after ``cap + 1`` bytes. A
body with neither is not read at all: nothing says where it ends (werkzeug reads it as empty).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from http import HTTPStatus
from io import BytesIO
from typing import Any, Final, Literal, NamedTuple, Protocol

from failopen import web
from failopen.engine.guard import Decision

from ._asgi_body import SNIPPET_CACHE, body_may_carry_token, declared_length, etag_listed

__all__ = [
    "BODY_ENDED_EARLY", "BODY_TOO_LARGE", "DISCONNECTED", "FORBIDDEN", "NOT_FOUND", "TOO_LARGE",
    "UNAUTHORIZED", "Environ", "Response", "StartResponse", "WSGIApp", "body_may_carry_token",
    "etag_listed", "json_response", "method_not_allowed", "raw_response", "read_body",
    "rejection", "replay", "request_path", "snippet_responses",
]

Environ = dict[str, Any]


class StartResponse(Protocol):
    """PEP 3333's ``start_response``."""

    def __call__(self, status: str, headers: list[tuple[str, str]],
                 exc_info: Any = None, /) -> Callable[[bytes], object]: ...


WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

TOO_LARGE: Final = "too_large"
DISCONNECTED: Final = "disconnected"


class Response(NamedTuple):
    """A complete answer: status line, headers (Content-Length included), body."""

    status: str
    headers: list[tuple[str, str]]
    body: bytes

    def send(self, start_response: StartResponse, *, head: bool = False) -> list[bytes]:
        """Start the response and return its body (none for HEAD)."""
        # A copy: outer middleware may edit the list in place, and prebuilt answers are shared.
        start_response(self.status, list(self.headers))
        return [b""] if head else [self.body]


def _status(code: int) -> str:
    return f"{code} {HTTPStatus(code).phrase}"


def raw_response(code: int, headers: Iterable[tuple[str, str]], body: bytes) -> Response:
    """A Response with Content-Length added."""
    return Response(_status(code), [*headers, ("Content-Length", str(len(body)))], body)


def json_response(code: int, payload: Any, headers: Iterable[tuple[str, str]] = ()) -> Response:
    """JSON, never cached: every answer failopen writes itself is about the current moment."""
    base = [("Content-Type", "application/json"), ("Cache-Control", "no-store"), *headers]
    return raw_response(code, base, json.dumps(payload).encode())


def request_path(environ: Environ, key: str) -> str:
    """``SCRIPT_NAME`` or ``PATH_INFO`` as the app routes on it: the server's latin-1 text read
    back as UTF-8 (werkzeug's and Django's reading), undecodable bytes replaced."""
    value = environ.get(key) or ""
    if type(value) is str and value.isascii():  # the usual path: the same text either way
        return value
    try:
        return str(value).encode("latin-1").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a server that already decoded it: take it as it is
        return str(value)


def read_body(
    environ: Environ, limit: int
) -> bytes | None | Literal["too_large", "disconnected"]:
    """The whole body (at most ``limit`` bytes), TOO_LARGE, DISCONNECTED (it ended before its
    declared length), or None when nothing says where it ends (left unread)."""
    declared = declared_length(str(environ.get("CONTENT_LENGTH") or "").encode("latin-1"))
    if declared is not None and declared > limit:
        return TOO_LARGE
    stream = environ["wsgi.input"]
    if declared is None and not environ.get("wsgi.input_terminated"):
        return None  # reading on would wait for bytes that may never come
    want = declared if declared is not None else limit + 1
    buffer = bytearray()
    while len(buffer) < want:
        try:
            chunk = stream.read(min(want - len(buffer), 65536))
        except (OSError, ValueError):  # the client went away mid-body
            return DISCONNECTED
        if not chunk:
            break
        buffer += chunk
    if len(buffer) > limit:
        return TOO_LARGE  # refused: nobody reads the rest
    if declared is not None and len(buffer) < declared:
        return DISCONNECTED
    return bytes(buffer)


def replay(environ: Environ, body: bytes) -> None:
    """Give the app ``body`` as if nobody had read it."""
    environ["wsgi.input"] = BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    # A buffer ends where its bytes do: werkzeug then reads it whole, chunked or not.
    environ["wsgi.input_terminated"] = True


def method_not_allowed(allow: str) -> Response:
    """405 naming the methods the route takes."""
    return json_response(
        405, {"error": {"code": "method_not_allowed", "message": f"Use {allow}."}},
        [("Allow", allow)],
    )


BODY_TOO_LARGE = json_response(
    413, {"error": {"code": "body_too_large", "message": "The request body is too large."}},
    [("Connection", "close")],  # the rest of the body is never read
)
BODY_ENDED_EARLY = json_response(
    400, {"error": {"code": "bad_request", "message": "The request body ended early."}},
    [("Connection", "close")],
)
NOT_FOUND = raw_response(404, [("Content-Type", "text/plain; charset=utf-8")], b"Not Found")
UNAUTHORIZED = json_response(
    401, {"error": {"code": "unauthorized", "message": "Authentication required."}},
    [("WWW-Authenticate", "Bearer")],
)
FORBIDDEN = json_response(403, {"error": {"code": "forbidden", "message": "Not allowed."}})


_REJECTIONS: dict[tuple[int, str, int | None, bool], Response] = {}


def rejection(decision: Decision, *, as_json: bool) -> Response:
    """The guard's refusal as JSON or HTML (``failopen.web``), built once per kind."""
    # Under attack, refusals are the hot path; their bytes depend on these four only.
    key = (decision.status_code, decision.outcome, decision.retry_after, as_json)
    response = _REJECTIONS.get(key)
    if response is None:
        body = web.rejection_json(decision) if as_json else web.rejection_html(decision)
        response = raw_response(decision.status_code,
                                web.rejection_headers(decision, json_body=as_json), body)
        if len(_REJECTIONS) < 256:  # Retry-After hints vary: keep the cache bounded
            _REJECTIONS[key] = response
    return response


def snippet_responses(snippet: web.Snippet | None) -> tuple[Response, Response]:
    """The snippet's 200 and 304 answers (both 404 while there is no snippet)."""
    if snippet is None:
        return NOT_FOUND, NOT_FOUND
    headers = [("Content-Type", "text/javascript; charset=utf-8"), ("ETag", snippet.etag),
               ("Cache-Control", SNIPPET_CACHE)]
    # A 304 repeats the validator and the caching, without Content-Length.
    return raw_response(200, headers, snippet.body), Response(_status(304), headers[1:], b"")
