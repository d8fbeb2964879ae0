"""Arguments of the session-intelligence client, checked before any request is sent."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import TypeAlias
from urllib.parse import quote

import httpx

from failopen.exceptions import ConfigError
from failopen.providers.urls import check_url
from failopen.rai.exceptions import RaiValidationError

__all__ = ["API_PREFIX", "MAX_WINDOW", "MAX_PAGE_SIZE", "Instant", "Params"]

Instant: TypeAlias = "datetime | str"
Params: TypeAlias = "list[tuple[str, str]]"

API_PREFIX = "/api/rai/v1"
MAX_WINDOW = timedelta(days=30)
MAX_PAGE_SIZE = 1000

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII,  # RFC 3339 digits are ASCII; \d alone also matches "٢٠٢٤"
)


def parse_rfc3339(value: str, *, name: str = "timestamp") -> datetime:
    """Parse an RFC 3339 timestamp (offset required) to an aware datetime.

    Written out because ``datetime.fromisoformat`` on Python 3.10 rejects ``Z`` and fractions
    other than 3 or 6 digits. Digits past microseconds are dropped.
    """
    match = _RFC3339.fullmatch(value.strip())
    if match is None:
        raise RaiValidationError(
            f"{name}: {value!r} is not an RFC 3339 timestamp with an offset, "
            "e.g. 2024-05-01T00:00:00Z"
        )
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    try:
        if zulu:
            tz = timezone.utc
        else:
            # RFC 3339 offsets are at most 23:59: "+24:00" fits the pattern, and timezone()
            # refuses it with a ValueError that would have escaped as a traceback.
            if int(off_h) > 23 or int(off_m) > 59:
                raise ValueError(f"offset {sign}{off_h}:{off_m} is out of range")
            offset = timedelta(hours=int(off_h), minutes=int(off_m))
            tz = timezone(-offset if sign == "-" else offset)
        return datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second),
            int((fraction or "0")[:6].ljust(6, "0")), tzinfo=tz,
        )
    except ValueError as exc:
        raise RaiValidationError(f"{name}: {value!r} is not a valid time ({exc})") from None


def format_rfc3339(moment: datetime) -> str:
    """Format an aware datetime as RFC 3339 in UTC with a ``Z`` suffix."""
    return moment.astimezone(timezone.utc).replace(tzinfo=None).isoformat() + "Z"


def to_instant(value: Instant, *, name: str) -> datetime:
    """An aware datetime from a datetime or an RFC 3339 string; naive datetimes are refused."""
    if isinstance(value, str):
        return parse_rfc3339(value, name=name)
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise RaiValidationError(
                f"{name}: naive datetime {value.isoformat()!r}; pass a timezone-aware datetime, "
                "e.g. datetime(..., tzinfo=timezone.utc)"
            )
        return value
    raise RaiValidationError(
        f"{name}: expected a timezone-aware datetime or an RFC 3339 string, "
        f"not {type(value).__name__}"
    )


def check_window(
    start: Instant, end: Instant, *, names: tuple[str, str] = ("start", "end")
) -> tuple[datetime, datetime]:
    """Both ends as aware datetimes, with start strictly before end; ``names`` label errors."""
    start_name, end_name = names
    first, last = to_instant(start, name=start_name), to_instant(end, name=end_name)
    if first >= last:
        raise RaiValidationError(
            f"{start_name} ({format_rfc3339(first)}) must be before "
            f"{end_name} ({format_rfc3339(last)})"
        )
    return first, last


def split_window(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """Consecutive windows of at most ``MAX_WINDOW``; each one starts where the previous ends."""
    windows = []
    while end - start > MAX_WINDOW:
        windows.append((start, start + MAX_WINDOW))
        start += MAX_WINDOW
    windows.append((start, end))
    return windows


def check_public_keys(public_keys: Sequence[str], *, name: str = "public_keys") -> list[str]:
    """A non-empty list of non-empty keys. A bare string is refused, not split into letters."""
    if isinstance(public_keys, (str, bytes)):
        raise RaiValidationError(
            f"{name} must be a sequence of keys, not a single string; "
            f"pass [{public_keys!r}] for one key"
        )
    try:
        keys = list(public_keys)
    except TypeError:
        raise RaiValidationError(
            f"{name} must be a sequence of strings, not {type(public_keys).__name__}"
        ) from None
    if not keys:
        raise RaiValidationError(f"{name} must name at least one public key")
    for key in keys:
        if not isinstance(key, str) or not key.strip():
            raise RaiValidationError(f"{name}: {key!r} is not a non-empty string")
    return keys


def check_page_size(page_size: int | None, *, name: str = "page_size") -> None:
    """page_size is None (the service's default) or an int in 1..1000 (spec 8)."""
    if page_size is None:
        return
    if not isinstance(page_size, int) or isinstance(page_size, bool):
        raise RaiValidationError(f"{name} must be an int, not {type(page_size).__name__}")
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise RaiValidationError(f"{name} must be between 1 and {MAX_PAGE_SIZE}, not {page_size}")


def check_int(name: str, value: int | None, *, minimum: int | None = None) -> None:
    """``value`` is None (not given) or an int, at least ``minimum`` when one is set."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise RaiValidationError(f"{name} must be an int, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise RaiValidationError(f"{name} must be at least {minimum}, not {value}")


def check_id(name: str, value: str | None) -> None:
    """``value`` is None (not given) or a string that is not blank."""
    if value is None:
        return
    if not isinstance(value, str) or not value.strip():
        raise RaiValidationError(f"{name} must be a non-empty string, not {value!r}")


def check_cohort_id(cohort_id: str, *, name: str = "cohort_id") -> None:
    """A cohort id that can name a path segment: not blank, not ``.`` or ``..``."""
    check_id(name, cohort_id)
    if cohort_id in (".", ".."):
        raise RaiValidationError(f"{name} {cohort_id!r} is not a valid id")


def cohort_path(cohort_id: str, suffix: str = "") -> str:
    """The path of one cohort; the id is percent-encoded so it can never change the path."""
    check_cohort_id(cohort_id)
    return f"{API_PREFIX}/cohorts/{quote(cohort_id, safe='')}{suffix}"


def check_base_url(base_url: str) -> httpx.URL:
    """An absolute http(s) URL (https unless loopback), without credentials, query or fragment."""
    if not isinstance(base_url, str):
        raise RaiValidationError(f"base_url must be a string, not {type(base_url).__name__}")
    try:
        url = httpx.URL(check_url(base_url, setting="base_url"))
    except ConfigError as exc:
        raise RaiValidationError(str(exc)) from None
    if url.query or url.fragment:
        raise RaiValidationError(f"base_url: {base_url!r} must not carry a query or fragment")
    return url
