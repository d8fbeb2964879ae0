"""What the sync and async clients share, free of I/O: answers, errors, settings, retries.

The twins in ``_client.py`` and ``_async_client.py`` only move bytes and wait; what to send is
decided in ``_arguments.py`` and ``_pager.py``, what an answer means and whether and how long to
wait before retrying is decided here, once.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from failopen._internal.terminal import printable
from failopen.providers.exchange import parse_retry_after
from failopen.rai._arguments import API_PREFIX, check_base_url
from failopen.rai._bounded import ACCEPT_ENCODING
from failopen.rai._failures import after_attempts, cut_short
from failopen.rai.exceptions import (
    BadRequest,
    Forbidden,
    InvalidResponse,
    NotFound,
    RaiError,
    RaiTransportError,
    RaiValidationError,
    ServerError,
    Unauthorized,
)
from failopen.rai.models import Cohort, Page

#: Pages in one window (at most 30 days; one cohort for its sessions): 100 million records at
#: the spec's largest page_size of 1,000. ``max_pages`` of the clients, ``--max-pages``.
DEFAULT_MAX_PAGES = 100_000

__all__ = [
    "BaseClient", "error_from_response", "decode_page", "parse_cohort", "decode_object",
    "DEFAULT_MAX_PAGES", "check_max_in_flight",
]  # fmt: skip

logger = logging.getLogger("failopen.rai")

_ERROR_SNIPPET = 160


def _decode_json(content: bytes) -> Any:
    """Decode a response body. The one place to swap in a faster decoder (measure first).

    ValueError for anything that is not JSON, nesting deeper than the decoder goes included (a
    hostile service's ``[[[[...``): a malformed answer, never a crash of the command.
    """
    try:
        return json.loads(content)
    except RecursionError:
        raise ValueError("nested too deeply") from None


# --- answers ----------------------------------------------------------------------------------

_STATUS_ERRORS: dict[int, type[RaiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
}


def error_class(status_code: int) -> type[RaiError]:
    """The exception class for an HTTP error status."""
    if status_code >= 500:
        return ServerError
    return _STATUS_ERRORS.get(status_code, RaiError)


def _snippet(content: bytes, redact: Callable[[str], str]) -> str:
    # Redact the whole text before cutting it: a secret cut in half would no longer match.
    text = " ".join(redact(content.decode("utf-8", "replace")).split())
    return text[:_ERROR_SNIPPET] + ("..." if len(text) > _ERROR_SNIPPET else "")


def error_from_response(
    status_code: int,
    headers: Mapping[str, str],
    content: bytes,
    redact: Callable[[str], str],
) -> RaiError:
    """The typed error for an HTTP error answer, enveloped (spec 2.4) or not."""
    cls = error_class(status_code)
    header_request_id = headers.get("x-request-id") or None
    retry_after = parse_retry_after(headers.get("retry-after"))
    try:
        body = _decode_json(content) if content else None
    except ValueError:
        body = None
    envelope = body.get("error") if isinstance(body, dict) else None
    if isinstance(envelope, dict) and isinstance(envelope.get("code"), str):
        message = envelope.get("message")
        request_id = envelope.get("request_id")
        return cls(
            redact(message if isinstance(message, str) and message else "(no message)"),
            status_code=status_code,
            code=envelope["code"],
            request_id=request_id if isinstance(request_id, str) else header_request_id,
            retry_after=retry_after,
        )
    reason = httpx.codes.get_reason_phrase(status_code) or "error"
    kind = headers.get("content-type", "no content type").split(";")[0].strip()
    detail = f": {_snippet(content, redact)}" if content else ""
    return cls(
        f"{reason}, without an error envelope ({kind}, {len(content)} bytes){detail}",
        status_code=status_code,
        request_id=header_request_id,
        retry_after=retry_after,
    )


def decode_object(content: bytes, what: str) -> dict[str, Any]:
    """A JSON object from a 2xx body; InvalidResponse, or RaiTransportError (retried) when the
    body ends before its JSON does (``check_whole`` cannot tell a cut just after an inner ``}``).
    """
    try:
        body = _decode_json(content)
    except ValueError as exc:
        if cut_short(exc):
            raise RaiTransportError(
                f"{what}: the answer (HTTP 2xx) was cut off after {len(content)} bytes",
                code="incomplete_answer") from None  # fmt: skip
        raise InvalidResponse(f"{what}: the body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise InvalidResponse(f"{what}: expected a JSON object, got {type(body).__name__}")
    return body


_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


_WS_CHARS = frozenset(" \t\n\r")


def _skip(text: str, i: int) -> int:
    """The index of the first character at or after ``i`` that is not JSON whitespace."""
    n = len(text)
    while i < n and text[i] in " \t\n\r":
        i += 1
    return i


def _scan_answer(
    text: str, key: str, keep: tuple[str, ...] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The answer object, and the JSON text of each element of its ``key`` array.

    The same C scanner as ``json.loads``, called per value so the span of each record is known:
    an export then writes the record's own text instead of encoding it again (half its CPU).
    With ``keep``, a record object is cut down to those fields as soon as it is decoded: its
    text is the output, so a page in memory is its lines plus a few fields per record, not a
    thousand full dicts (about 0.8 MB instead of 3.6 MB for 1,000 sessions).
    ValueError (or StopIteration) on anything that is not one JSON object.
    """
    ws = _skip
    i = ws(text, 0)
    if text[i : i + 1] != "{":
        raise ValueError("not an object")
    i = ws(text, i + 1)
    body: dict[str, Any] = {}
    lines: list[str] = []
    while text[i : i + 1] != "}":
        if text[i : i + 1] != '"':
            raise ValueError("expected a member name")
        name, i = _SCAN(text, i)
        i = ws(text, i)
        if text[i : i + 1] != ":":
            raise ValueError("expected ':'")
        i = ws(text, i + 1)
        if name == key and text[i : i + 1] == "[":
            items: list[Any] = []
            lines = []
            add_item, add_line, scan = items.append, lines.append, _SCAN
            i = ws(text, i + 1)
            if text[i : i + 1] != "]":
                while True:  # the hot loop: one pass per record, whitespace checked only if any
                    value, end = scan(text, i)
                    if keep is not None and type(value) is dict:
                        value = {name: value[name] for name in keep if name in value}
                    add_item(value)
                    add_line(text[i:end])
                    c = text[end : end + 1]
                    if c in _WS_CHARS:
                        end = ws(text, end)
                        c = text[end : end + 1]
                    if c == "]":
                        i = end
                        break
                    if c != ",":
                        raise ValueError("expected ',' or ']'")
                    i = end + 1
                    if text[i : i + 1] in _WS_CHARS:
                        i = ws(text, i)
                    if text[i : i + 1] == "]":
                        raise ValueError("trailing comma")
            body[name] = items
            i += 1
        else:
            body[name], i = _SCAN(text, i)
        i = ws(text, i)
        if text[i : i + 1] == ",":
            i = ws(text, i + 1)
            if text[i : i + 1] == "}":
                raise ValueError("trailing comma")
        elif text[i : i + 1] != "}":
            raise ValueError("expected ',' or '}'")
    if ws(text, i + 1) != len(text):
        raise ValueError("extra data after the object")
    return body, lines


def _decode_answer(
    content: bytes, key: str, what: str, keep: tuple[str, ...] | None
) -> tuple[dict[str, Any], list[str] | None]:
    try:
        text = content.decode("utf-8")
        # A raw line break can only be whitespace between tokens: such a record's text is no
        # line, so its records are kept whole (they will be encoded again).
        breaks = "\n" in text or "\r" in text
        body, lines = _scan_answer(text, key, None if breaks else keep)
    except (ValueError, StopIteration, RecursionError):  # not compact UTF-8 JSON: the plain way
        return decode_object(content, what), None
    return body, (None if breaks else lines)


def decode_page(
    content: bytes, key: str, keep: tuple[str, ...] | None = None
) -> Page[dict[str, Any]]:
    """A list endpoint's answer (spec 4.1) as a Page of records exactly as decoded.

    Only the envelope is checked (the array, each record an object, the cursor a string): this
    runs before the next page is requested, so building models is left for later. With
    ``keep``, records whose text is in ``lines`` hold only the fields named in ``keep`` (for a
    JSONL writer, which copies the lines); a page without lines always has whole records.
    """
    what = f"list of {key}"
    body, lines = _decode_answer(content, key, what, keep)
    records = body.get(key)
    if not isinstance(records, list):
        raise InvalidResponse(f"{what}: the answer has no {key!r} array")
    for record in records:
        if not isinstance(record, dict):
            kind = key.removesuffix("s")
            raise InvalidResponse(
                f"{what}: a {kind} record must be a JSON object, not {type(record).__name__}"
            )
    token = body.get("next_page_token")
    if token is not None and not isinstance(token, str):
        raise InvalidResponse(f"{what}: next_page_token is not a string")
    version = body.get("schema_version")
    return Page(
        items=records,
        next_page_token=token or None,
        schema_version=version if isinstance(version, str) else None,
        lines=lines if lines is not None and len(lines) == len(records) else None,
    )


def parse_cohort(content: bytes) -> Cohort:
    """The answer of get cohort (spec 4.4)."""
    return Cohort.from_dict(decode_object(content, "cohort"))


# --- the shared client ------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _user_agent() -> str:
    try:
        from importlib.metadata import version

        return f"failopen/{version('failopen')}"
    except Exception:  # not installed (running from a checkout)
        return "failopen"


def check_max_in_flight(value: int | None) -> None:
    """``max_in_flight`` of the clients: None (no cap) or an int of at least 1."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise RaiValidationError(f"max_in_flight must be an int >= 1, not {value!r}")


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise RaiValidationError(f"{name} must be a positive number, not {value!r}")
    return float(value)


class BaseClient:
    """Settings, validation and retry policy shared by :class:`Client` and :class:`AsyncClient`."""

    def __init__(
        self,
        base_url: str,
        client_id: str,
        client_secret: str,
        *,
        timeout: float,
        max_attempts: int,
        backoff_base: float,
        backoff_max: float,
        prefetch: bool,
        max_pages: int = DEFAULT_MAX_PAGES,
    ) -> None:
        self.base_url = check_base_url(base_url)
        if not isinstance(client_id, str) or not client_id:
            raise RaiValidationError("client_id must be a non-empty string")
        if not isinstance(client_secret, str) or not client_secret:
            raise RaiValidationError("client_secret must be a non-empty string")
        self.client_id = client_id
        self.timeout = _positive("timeout", timeout)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise RaiValidationError(f"max_attempts must be an int >= 1, not {max_attempts!r}")
        self.max_attempts = max_attempts
        self.backoff_base = _positive("backoff_base", backoff_base)
        self.backoff_max = _positive("backoff_max", backoff_max)
        self.prefetch = bool(prefetch)
        if isinstance(max_pages, bool) or not isinstance(max_pages, int) or max_pages < 1:
            raise RaiValidationError(f"max_pages must be an int >= 1, not {max_pages!r}")
        #: The most pages a list call takes in one window (see ``_pager.py``'s bounds).
        self.max_pages = max_pages
        self.user_agent = _user_agent()
        self._rng = random.Random()
        # Shared by every thread using this client: a retry's backoff holds back all requests
        # (parallel windows slow down together instead of hammering a struggling service).
        self._resume_at = 0.0
        self._pause_lock = threading.Lock()
        self._timed_out: set[str] = set()  # hosts a connection timed out to, warned of once

    def headers(self) -> dict[str, str]:
        """The headers of every request: JSON, in an encoding ``_bounded.py`` decodes."""
        return {"Accept": "application/json", "Accept-Encoding": ACCEPT_ENCODING,
                "User-Agent": self.user_agent}  # fmt: skip

    def pause(self, delay: float) -> float:
        """Hold back every request of this client for ``delay`` seconds from now; until when."""
        with self._pause_lock:
            self._resume_at = max(self._resume_at, time.monotonic() + delay)
            return self._resume_at

    def paused_for(self) -> float:
        """Seconds until requests may be sent again (0 when not held back)."""
        return max(0.0, self._resume_at - time.monotonic())

    @property
    def authorize_url(self) -> httpx.URL:
        """Where tokens come from (spec 4.2)."""
        path = self.base_url.path.rstrip("/") + f"{API_PREFIX}/authorize"
        return self.base_url.copy_with(path=path)

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(base_url={str(self.base_url)!r}, client_id={self.client_id!r})"

    def backoff(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(backoff_max, backoff_base * 2**(attempt - 1))]."""
        ceiling = min(self.backoff_max, self.backoff_base * 2.0 ** min(attempt - 1, 64))
        return self._rng.uniform(0.0, ceiling)

    def retry_cut_off(self, attempt: int, error: RaiTransportError, what: str) -> None:
        """An answer found cut off once decoded (just after an inner ``}``: ``decode_object``)
        is asked for again as a failed request is retried: the client's next request waits for
        :meth:`retry_delay`; ``error`` is raised once the attempts are spent."""
        delay = self.retry_delay(attempt, error, what)
        if delay is None:
            raise after_attempts(error, attempt)
        self.pause(delay)

    def retry_delay(self, attempt: int, error: RaiError, what: str) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``, or None to raise ``error`` now.

        Only server errors, 429 (too many requests) and transport failures are retried. A
        Retry-After within ``backoff_max`` is a floor on the wait; a longer one ends the retries at
        once rather than retrying earlier than asked or blocking for an unbounded time.
        """
        if not isinstance(error, (ServerError, RaiTransportError)) and error.status_code != 429:
            return None
        if attempt >= self.max_attempts:
            return None
        delay = self.backoff(attempt)
        asked = error.retry_after
        if asked is not None:
            if asked > self.backoff_max:
                logger.warning(
                    "%s failed (%s); not retrying: Retry-After %.0fs exceeds backoff_max %.0fs",
                    what, printable(str(error)), asked, self.backoff_max,
                )
                return None
            delay = max(delay, asked)
        # A dead host fails each attempt of each window and key alike: one line at the end
        # (the error, with its attempts) says it all; other failures are worth a line each.
        log = logger.debug if getattr(error, "unreachable", False) else logger.warning
        note = ""
        host = getattr(error, "connect_timeout", None)
        if host is not None:
            # A host that drops connections costs the whole timeout per attempt: the first time
            # says so at once, while the run waits; the rest would only repeat it.
            with self._pause_lock:
                first = host not in self._timed_out
                self._timed_out.add(host)
            log = logger.warning if first else logger.debug
            note = "; later connect time-outs to this host are logged at DEBUG" if first else ""
        log(
            "%s failed (%s); attempt %d of %d, retrying in %.2fs%s",
            what, printable(str(error)), attempt, self.max_attempts, delay, note,
        )
        return delay
