"""When an answer is no answer: a request that failed on the way, or a 2xx answer cut off.

Both are :class:`RaiTransportError`, which ``BaseClient.retry_delay`` retries; split from
``_base.py`` (its answers and retry policy) to keep each module one screenful of ideas.
"""

from __future__ import annotations

import json

import httpx

from failopen.rai.exceptions import RaiError, RaiTransportError

__all__ = ["check_whole", "cut_short", "transport_error", "after_attempts"]

_BLANK = b" \t\r\n"


def check_whole(content: bytes, what: str) -> None:
    """RaiTransportError (retried like one) for a 2xx answer cut off: empty, or a JSON object
    that does not end with ``}``, as a proxy or a dropped connection with complete framing
    leaves it. O(1) for a whole answer, so the paging ahead is not slowed by a second decode;
    a body cut just after an inner ``}`` is caught later, when it is decoded (InvalidResponse,
    not retried), and a body that is no JSON object at all is left to the decoder to name.
    """
    end = len(content)
    while end and content[end - 1] in _BLANK:
        end -= 1
    start = 0
    while start < end and content[start] in _BLANK:
        start += 1
    if end == 0 or (content[start] == 0x7B and content[end - 1] != 0x7D):  # "{", "}"
        state = "empty" if end == 0 else f"cut off after {len(content)} bytes"
        raise RaiTransportError(f"{what}: the answer (HTTP 2xx) was {state}",
                                code="incomplete_answer")  # fmt: skip


def cut_short(exc: ValueError) -> bool:
    """Whether the JSON decoder stopped because the text ended: a body cut off. No whole JSON
    text is a prefix of another, so a body cut just after an inner ``}`` (which ``check_whole``
    lets pass) never decodes, and fails at its end, or in a string left open there."""
    if not isinstance(exc, json.JSONDecodeError):
        return False
    return exc.pos >= len(exc.doc.rstrip(" \t\r\n")) or exc.msg.startswith("Unterminated string")


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_port(exc: Exception) -> str | None:
    """``host:port`` the failed request went to; never the URL's user info or path."""
    try:
        url = exc.request.url  # type: ignore[attr-defined]  # httpx.RequestError
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError when no request is set
        return None
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = url.port or _DEFAULT_PORTS.get(url.scheme)
    return f"{host}:{port}" if port else host


def transport_error(exc: Exception) -> RaiTransportError:
    """A RaiTransportError for an httpx request failure, naming the host and port it failed on
    (a wrong base URL shows at once); httpx's text carries no headers, the base URL no user
    info (``check_base_url``)."""
    where = _host_port(exc)
    detail = str(exc) or "no detail"
    kind = type(exc).__name__
    error = RaiTransportError(f"{kind} ({where}): {detail}" if where else f"{kind}: {detail}")
    error.unreachable = isinstance(exc, httpx.ConnectError)  # refused, DNS, unreachable
    if isinstance(exc, httpx.ConnectTimeout):  # nothing answered: dropped by a firewall
        error.connect_timeout = where or "the service"
    return error


def after_attempts(error: RaiError, attempts: int) -> RaiError:
    """``error``, its message saying how many attempts failed when it was retried."""
    if attempts > 1 and isinstance(error, RaiTransportError):
        error.message += f" (after {attempts} attempts)"
        error.args = (error.message,)
    return error
