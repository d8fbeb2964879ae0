"""The vendors' fakes on the wire: reading bodies, writing timestamps, failing like a CDN."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qsl

from failopen.testing._server import FakeRequest, Reply

__all__ = [
    "HTML_PAGE", "html_reply", "iso_millis", "iso_seconds", "json_fields", "form_fields",
    "json_or_form_fields", "retry_after_headers",
]

HTML_PAGE = b"<html><body><h1>Service temporarily unavailable</h1></body></html>"


def iso_seconds(moment: float) -> str:
    """``2027-01-15T08:00:00Z``: the ``challenge_ts`` of reCAPTCHA and hCaptcha."""
    stamp = datetime.fromtimestamp(moment, tz=timezone.utc)
    return stamp.isoformat(timespec="seconds").replace("+00:00", "Z")


def iso_millis(moment: float) -> str:
    """``2027-01-15T08:00:00.000Z``: Turnstile's ``challenge_ts`` and Google Cloud's times."""
    stamp = datetime.fromtimestamp(moment, tz=timezone.utc)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def form_fields(request: FakeRequest) -> dict[str, str] | None:
    """The urlencoded body's fields (the first of a repeated name), None if it is not text."""
    try:
        text = request.body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    fields: dict[str, str] = {}
    for name, value in parse_qsl(text, keep_blank_values=True):
        fields.setdefault(name, value)
    return fields


def json_fields(request: FakeRequest) -> dict[str, Any] | None:
    """The body as a JSON object, None if it is not one."""
    try:
        data = request.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def json_or_form_fields(request: FakeRequest) -> dict[str, Any] | None:
    """JSON when the request says so, urlencoded otherwise: how Turnstile and Friendly Captcha
    read a body. None when the body cannot be read as the type it claims (or is empty)."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type == "application/json":
        return json_fields(request)
    if not request.body.strip():
        return None
    return form_fields(request)


def retry_after_headers(retry_after: float | None) -> list[tuple[str, str]]:
    """``Retry-After`` in whole seconds, rounded up, or nothing."""
    if retry_after is None:
        return []
    return [("Retry-After", str(max(0, math.ceil(retry_after))))]


def html_reply(status: int, headers: list[tuple[str, str]] | None = None) -> Reply:
    """The HTML page a vendor's front end (its CDN) serves when the API behind it is down."""
    return Reply(status=status, body=HTML_PAGE,
                 headers=[("Content-Type", "text/html"), *(headers or [])])

