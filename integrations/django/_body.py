"""The token inside a request body, read once and bounded; nothing spooled to disk for it.

``request.POST`` would do, but parsing a multipart form writes every file part over
FILE_UPLOAD_MAX_MEMORY_SIZE to a temporary file, for a request that is about to be refused.
Instead: a body that may carry the token (a form, multipart or JSON) and declares at most
FAILOPEN_MAX_BODY_BYTES is read into memory (never more than that) and searched with the same
linear finder as the ASGI adapter. ``request.body`` keeps the bytes, so the view afterwards
parses ``request.POST`` / ``request.FILES`` from them as if nobody had looked. A larger body is
refused (413): unread when it says its length, after ``cap + 1`` bytes when it does not.

Whatever read ``request.POST`` before the guard (CsrfViewMiddleware, ahead of a view-protected
request) changes only where a form's token is found: a JSON body, or a PUT's, is not parsed by
Django there, and is still read and searched here, under the same bound.
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

from io import BytesIO
from tempfile import SpooledTemporaryFile
from typing import Final

from django.http import HttpRequest

from failopen.config import Config
from failopen.web import token_from_body

__all__ = ["TOO_LARGE", "TooLarge", "declared_length", "may_carry_token",
           "token_from_request_body"]

# The media types failopen.web.token_from_body reads: no other body can carry the token.
_TOKEN_MEDIA = frozenset({
    "application/x-www-form-urlencoded", "multipart/form-data", "application/json",
})
_FORMS = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})


class TooLarge:
    """The body is over FAILOPEN_MAX_BODY_BYTES: refuse it (413) without reading it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "TOO_LARGE"


TOO_LARGE: Final = TooLarge()


def media_type(request: HttpRequest) -> str:
    """The body's media type, lower case, without parameters."""
    value = request.META.get("CONTENT_TYPE") or ""
    return str(value).split(";", 1)[0].strip().lower()


def may_carry_token(request: HttpRequest, *, forms_only: bool = False) -> bool:
    """True when the body's media type is one the token can travel in (or, ``forms_only``,
    one that Django's own middleware parses into ``request.POST``)."""
    media = media_type(request)
    if forms_only:
        return media in _FORMS
    return media in _TOKEN_MEDIA or media.endswith("+json")


def declared_length(request: HttpRequest) -> int:
    """CONTENT_LENGTH as Django reads it: missing or unreadable is 0 (Django reads nothing)."""
    try:
        return max(0, int(request.META.get("CONTENT_LENGTH") or 0))
    except (TypeError, ValueError):
        return 0


def token_from_request_body(request: HttpRequest, config: Config, *,
                            field: str | None = None) -> str | None | TooLarge:
    """The token from the body's field (``field``, default the token field), TOO_LARGE, or
    None. Never raises."""
    field = field if field is not None else config.token_field
    try:
        if not may_carry_token(request):
            return None  # refused without a token; the body is the view's business
        if declared_length(request) > config.max_body_bytes:
            return TOO_LARGE
        if hasattr(request, "_post"):
            # Something read request.POST first: CsrfViewMiddleware's process_view does, for
            # every POST, before ours. A form's field is there already (any file part is on
            # disk by now). But Django parses only a POSTed form: for JSON, or any PUT, it
            # leaves an empty QueryDict and the body unread, so the body is searched next.
            value = request.POST.get(field)
            if isinstance(value, str):
                return value
        body = _bounded_body(request, config.max_body_bytes)
        if isinstance(body, TooLarge):
            return body
        return token_from_body(request.META.get("CONTENT_TYPE"), body, field)
    except Exception:
        # Client gone, malformed, unreadable: the body carries no token.
        return None


def _bounded_body(request: HttpRequest, limit: int) -> bytes | TooLarge:
    """``request.body``, but never more than ``limit`` bytes read into memory.

    Under WSGI Django reads at most CONTENT_LENGTH bytes; under ASGI the stream is the whole
    body Django received, which a chunked request (no Content-Length) sends unbounded. So read
    ``limit + 1`` bytes and keep them where ``HttpRequest.body`` keeps its own (``_body``, and a
    fresh stream): ``request.body``, ``request.POST`` and ``request.FILES`` work for the view.
    """
    if hasattr(request, "_body"):
        body: bytes = request.body
        return body if len(body) <= limit else TOO_LARGE
    if getattr(request, "_read_started", False):
        # Someone read the stream without keeping it (a multipart form parsed from it): there
        # is nothing left to search, and ``request.body`` must go on saying so to the view.
        return b""
    data: bytes = request.read(limit + 1)
    if len(data) > limit:
        return TOO_LARGE  # refused: nobody reads the rest
    consumed = request._stream
    request._body = data
    request._stream = BytesIO(data)
    if isinstance(consumed, SpooledTemporaryFile):
        # Django's ASGI body file, read to its end: Django 4.2 never closes it (5.0 does, and a
        # second close is harmless), and left to the garbage collector it warns.
        consumed.close()
    return data
