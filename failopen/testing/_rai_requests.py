"""What a request to the emulator asks for: its endpoint, its validated query, its page token.

Nothing here holds state: request parts go in, a :class:`~._rai_data.Query` comes out, or an
:class:`ApiError` carrying the spec's error code.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from urllib.parse import unquote

from failopen.testing._rai_data import Query, parse_rfc3339

__all__ = [
    "DEFAULT_PAGE_SIZE", "MAX_WINDOW", "ENDPOINTS", "PREFIX", "HTTP_STATUS", "ApiError", "route",
    "page_size", "fingerprint", "list_query", "cohort_sessions_query", "issue_page_token",
    "read_page_token",
]  # fmt: skip

DEFAULT_PAGE_SIZE = 100
"""Records per page when the request has no ``page_size`` (the spec does not give one)."""

MAX_WINDOW = timedelta(days=30)
"""Longest ``to - from`` the list endpoints accept."""

ENDPOINTS = ("authorize", "list_cohorts", "get_cohort", "list_cohort_sessions", "list_sessions")
"""Endpoint names used by ``forbidden_endpoints``, ``inject_error`` and the counters."""

PREFIX = "/api/rai/v1"
HTTP_STATUS = {
    "invalid_request": 400, "invalid_page_size": 400, "invalid_page_token": 400,
    "invalid_window": 400, "invalid_filter": 400, "missing_public_key": 400,
    "unauthorized": 401, "forbidden": 403, "forbidden_public_key": 403, "not_found": 404,
    "internal": 500,
}  # fmt: skip


class ApiError(Exception):
    """An answer in the spec's error envelope: ``code`` picks the HTTP status."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def route(method: str, path: str) -> tuple[str | None, str | None]:
    """``(endpoint, cohort_id)`` of a request; endpoint None when nothing answers it."""
    if not path.startswith(PREFIX + "/"):
        return None, None
    parts = path[len(PREFIX) + 1 :].split("/")
    if parts == ["authorize"]:
        return ("authorize" if method == "POST" else None), None
    if method != "GET":
        return None, None
    if parts == ["cohorts"]:
        return "list_cohorts", None
    if parts == ["sessions"]:
        return "list_sessions", None
    if len(parts) in (2, 3) and parts[0] == "cohorts" and parts[1]:
        if len(parts) == 2:
            return "get_cohort", unquote(parts[1])
        if parts[2] == "sessions":
            return "list_cohort_sessions", unquote(parts[1])
    return None, None


def page_size(query: dict[str, list[str]]) -> int:
    """The requested page size, or :data:`DEFAULT_PAGE_SIZE`."""
    values = query.get("page_size")
    if values is None:
        return DEFAULT_PAGE_SIZE
    if len(values) != 1 or not re.fullmatch(r"[0-9]{1,4}", values[0]):
        raise ApiError("invalid_page_size", "page_size must be one integer from 1 to 1000")
    size = int(values[0])
    if not 1 <= size <= 1000:
        raise ApiError("invalid_page_size", "page_size must be from 1 to 1000")
    return size


def fingerprint(parts: object) -> str:
    """A short fingerprint of what a query selects, to bind page tokens to it."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def cohort_sessions_query(query: dict[str, list[str]], index: int) -> Query:
    """The query of list cohort sessions (spec 4.5): only ``page_size`` is read."""
    size = page_size(query)
    digest = fingerprint(("list_cohort_sessions", index))
    return Query("list_cohort_sessions", None, -(1 << 62), 1 << 62, index, None, None, None,
                 size, digest)  # fmt: skip


def list_query(
    endpoint: str,
    q: dict[str, list[str]],
    key_of: Mapping[str, int],
    index_of: Callable[[str], int | None],
) -> Query:
    """The query of list cohorts or list sessions (spec 4.3, 4.6), validated in the spec's terms.

    ``key_of`` maps the caller's public keys to their indexes; ``index_of`` finds a cohort.
    """
    size = page_size(q)
    bounds = []
    for name in ("from", "to"):
        values = q.get(name, [])
        if len(values) != 1:
            raise ApiError("invalid_window", f"exactly one {name!r} is required")
        ms = parse_rfc3339(values[0])
        if ms is None:
            raise ApiError("invalid_window", f"{name!r} is not an RFC 3339 date-time")
        bounds.append(ms)
    from_ms, to_ms = bounds
    if to_ms <= from_ms:
        raise ApiError("invalid_window", "'to' must be after 'from'")
    if to_ms - from_ms > MAX_WINDOW // timedelta(milliseconds=1):
        raise ApiError("invalid_window", "the window is longer than 30 days")
    keys = {k for k in q.get("public_key", []) if k}
    if not keys:
        raise ApiError("missing_public_key", "at least one public_key is required")
    allowed = {"cohort_id", "anomaly_id", "telltale_id"}
    if endpoint == "list_cohorts":
        allowed.add("min_session_count")
    filters: dict[str, str] = {}
    for name in allowed:
        given = q.get(name)
        if given is None:
            continue
        if len(given) != 1 or not given[0]:
            raise ApiError("invalid_filter", f"{name!r} takes one non-empty value")
        filters[name] = given[0]
    numbers: dict[str, int | None] = {}
    for name in ("anomaly_id", "telltale_id", "min_session_count"):
        raw = filters.get(name)
        if raw is not None and not re.fullmatch(r"[0-9]{1,18}", raw):
            raise ApiError("invalid_filter", f"{name!r} must be a non-negative integer")
        numbers[name] = None if raw is None else int(raw)
    unowned = keys - key_of.keys()
    if unowned:
        raise ApiError("forbidden_public_key", "the caller does not own every public_key")
    cohort: int | None = None
    if "cohort_id" in filters:
        found = index_of(filters["cohort_id"])
        cohort = -1 if found is None else found
    digest = fingerprint((endpoint, from_ms, to_ms, sorted(keys), sorted(filters.items())))
    return Query(
        endpoint, frozenset(key_of[k] for k in keys), from_ms, to_ms, cohort,
        numbers["anomaly_id"], numbers["telltale_id"], numbers["min_session_count"], size,
        digest,
    )  # fmt: skip


def issue_page_token(secret: bytes, query: Query, position: tuple[int, int], now: float) -> str:
    """An opaque, signed token for the page of ``query`` that starts at ``position``."""
    payload = f"{query.kind}|{query.digest}|{position[0]}|{position[1]}|{now:.3f}"
    mac = hmac.new(secret, payload.encode(), hashlib.sha256).digest()[:12]
    return base64.urlsafe_b64encode(payload.encode() + b"|" + mac).decode().rstrip("=")


def read_page_token(
    secret: bytes, token: str, query: Query, now: float, ttl: float | None
) -> tuple[int, int]:
    """Where the page of ``token`` starts; ApiError unless genuine, fresh and for ``query``."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        payload, mac = raw[:-13], raw[-12:]
        expected = hmac.new(secret, payload, hashlib.sha256).digest()[:12]
        if not hmac.compare_digest(mac, expected):
            raise ValueError("bad signature")
        kind, digest, c, j, issued = payload.decode().split("|")
        position = (int(c), int(j))
        issued_at = float(issued)
    except ValueError:
        raise ApiError("invalid_page_token", "the page token is malformed") from None
    if kind != query.kind or digest != query.digest:
        raise ApiError("invalid_page_token", "the page token belongs to a different request")
    if ttl is not None and now - issued_at > ttl:
        raise ApiError("invalid_page_token", "the page token has expired")
    return position
