"""Raw ASGI plumbing for the middleware: capped body reads, replay, headers, prebuilt answers.

Every answer's content comes from ``failopen.web``; this module only turns it into ASGI messages.
A protected route may carry its token inside the body. Reading that body consumes the server's
``receive``; :class:`Replay` hands the app the very same bytes afterwards (as one
``http.request`` message), then passes later calls (``http.disconnect``) through. A body over
the cap is never buffered: a declared ``Content-Length`` over it is refused before reading, a
chunked one as soon as it grows past it.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, Final, Literal, NamedTuple

from failopen import web
from failopen.engine.guard import Decision

__all__ = [
    "ASGIApp", "BODY_TOO_LARGE", "DISCONNECTED", "FORBIDDEN", "Message", "NOT_FOUND", "Receive",
    "Replay", "Response", "SNIPPET_CACHE", "Scope", "Send", "TOO_LARGE", "UNAUTHORIZED",
    "body_may_carry_token", "declared_length", "encode_headers", "etag_listed", "header",
    "joined_header", "json_response", "method_not_allowed", "raw_response", "read_body",
    "rejection", "snippet_responses", "wants_json",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOO_LARGE: Final = "too_large"
DISCONNECTED: Final = "disconnected"

# The media types web.token_from_body reads; any other body cannot carry the token, so it is
# never read (an upload of another type streams to the app as it would without failopen).
_TOKEN_MEDIA = frozenset({
    "application/x-www-form-urlencoded", "multipart/form-data", "application/json",
})


class Response(NamedTuple):
    """A complete answer: status, headers (content-length included), body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    async def send(self, send: Send, *, head: bool = False) -> None:
        """Send it as ``http.response.start`` + one ``http.response.body`` (no body for HEAD)."""
        # A copy: outer middleware may edit the list in place (Starlette's MutableHeaders does),
        # and prebuilt responses are shared by every request.
        await send({"type": "http.response.start", "status": self.status,
                    "headers": list(self.headers)})
        await send({"type": "http.response.body", "body": b"" if head else self.body})


def encode_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """ASGI headers: lower-case latin-1 names, latin-1 values."""
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]


def raw_response(status: int, headers: Iterable[tuple[str, str]], body: bytes) -> Response:
    """A Response with Content-Length added."""
    encoded = encode_headers(headers)
    encoded.append((b"content-length", str(len(body)).encode()))
    return Response(status, encoded, body)


def json_response(
    status: int, payload: Any, headers: Iterable[tuple[str, str]] = ()
) -> Response:
    """JSON, never cached: every answer failopen writes itself is about the current moment."""
    base = [("Content-Type", "application/json"), ("Cache-Control", "no-store"), *headers]
    return raw_response(status, base, json.dumps(payload).encode())


def body_may_carry_token(content_type: str | None) -> bool:
    """True for the urlencoded, multipart and JSON bodies a token can be read from."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media in _TOKEN_MEDIA or media.endswith("+json")


def declared_length(value: bytes | None) -> int | None:
    """The Content-Length as a number; None when absent or unreadable (the cap still holds)."""
    if value is None or not value.strip().isdigit():
        return None
    digits = value.strip()
    # int() refuses over 4300 digits, and no cap is near 19 digits: larger is simply too large.
    return int(digits) if len(digits) <= 18 else 10**18


async def read_body(
    receive: Receive, limit: int, *, declared: int | None = None
) -> tuple[bytes, list[Message]] | Literal["too_large", "disconnected"]:
    """The whole body and the one message that replays it, or TOO_LARGE / DISCONNECTED.

    At most ``limit`` bytes are ever held: a larger ``declared`` length is refused unread.
    """
    if declared is not None and declared > limit:
        return TOO_LARGE
    buffer = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return DISCONNECTED  # the client left mid-body: nobody is waiting for an answer
        buffer += message.get("body", b"")
        if len(buffer) > limit:
            return TOO_LARGE
        if not message.get("more_body", False):
            break
    body = bytes(buffer)
    # Replayed as one message with the same bytes: keeping a slow client's every tiny chunk as
    # its own message would hold a ~200-byte dict per byte, far past the cap.
    return body, [{"type": "http.request", "body": body, "more_body": False}]


class Replay:
    """A ``receive`` that first returns the messages already read, then the server's own."""

    __slots__ = ("_messages", "_receive")

    def __init__(self, messages: Iterable[Message], receive: Receive) -> None:
        self._messages = deque(messages)
        self._receive = receive

    async def __call__(self) -> Message:
        """The next message, replayed or live."""
        if self._messages:
            return self._messages.popleft()
        return await self._receive()


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lower-case bytes), decoded as latin-1."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def joined_header(scope: Scope, name: bytes) -> str | None:
    """Every value of header ``name``, joined with "," in order (None when absent)."""
    values = [bytes(value).decode("latin-1") for key, value in scope.get("headers", ())
              if key == name]
    return ",".join(values) if values else None


def etag_listed(if_none_match: str, etag: str) -> bool:
    """True when If-None-Match names ``etag`` or ``*`` (weak comparison, RFC 9110 13.1.2)."""
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in tags or etag in tags


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


def wants_json(scope: Scope) -> bool:
    """Whether a refusal of this request is JSON or the HTML page, as the other adapters decide
    (``web.prefers_json``)."""
    # Every Accept header, joined as WSGI servers and Django join repeated headers.
    return web.prefers_json(joined_header(scope, b"accept"), header(scope, b"content-type"))


# The snippet URL carries no version, so a day of caching revalidated by ETag rather than
# "immutable": a new release must reach browsers without anyone clearing a cache.
SNIPPET_CACHE = "public, max-age=86400"


def snippet_responses(snippet: web.Snippet | None) -> tuple[Response, Response]:
    """The snippet's 200 and 304 answers (both 404 while there is no snippet)."""
    if snippet is None:
        return NOT_FOUND, NOT_FOUND
    headers = [("Content-Type", "text/javascript; charset=utf-8"), ("ETag", snippet.etag),
               ("Cache-Control", SNIPPET_CACHE)]
    # A 304 repeats the validator and the caching, without Content-Length: that would have to
    # describe the 200's body.
    return (raw_response(200, headers, snippet.body),
            Response(304, encode_headers(headers[1:]), b""))
