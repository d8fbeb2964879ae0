"""How :class:`~failopen.testing.FakeStatusPage` misbehaves: its faults, as replies.

Apart from the page so that every shape of page (the spec's, Cloudflare's, hCaptcha's) fails the
same way; the page hands over the document it would have served and the id of the component that
decides, and gets back the reply of the fault.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from failopen.testing._server import Reply

__all__ = [
    "DRIP_SECONDS_PER_BYTE", "FAULTS", "HOLD_SECONDS", "HUGE_BYTES", "STATUS_FAULTS",
    "UNKNOWN_STATUS", "fault_reply", "fault_applies",
]

FAULTS = frozenset(
    {
        "500", "503", "429", "timeout", "slow_drip", "reset", "truncated", "malformed",
        "not_json", "empty", "huge", "missing_global", "unknown_status", "wrong_shape",
    }
)
#: What the ``unknown_status`` fault reports: plausible-looking, but not a spec 3.2 value.
UNKNOWN_STATUS = "service_disruption"
DRIP_SECONDS_PER_BYTE = 0.05
HOLD_SECONDS = 3600.0
HUGE_BYTES = 50 * 1024 * 1024
#: The faults that answer an HTTP error status (and take ``retry_after``).
STATUS_FAULTS = frozenset({"500", "503", "429"})

_COMPONENTS_ONLY = frozenset({"missing_global", "unknown_status"})
_REASONS = {
    "500": "Internal Server Error",
    "503": "Service Unavailable",
    "429": "Too Many Requests",
}
_HTML = (
    b"<!doctype html><html><head><title>We'll be right back</title></head>"
    b"<body><h1>We'll be right back</h1><p>The status page is being updated.</p></body></html>"
)


def fault_applies(fault: str | None, endpoint: str | None, kind: str) -> bool:
    """Whether ``fault``, limited to ``endpoint`` (or None), changes the ``kind`` document."""
    if fault is None or endpoint not in (None, kind):
        return False
    return kind == "components" or fault not in _COMPONENTS_ONLY


def _huge(document: dict[str, Any]) -> Iterator[bytes]:
    """About HUGE_BYTES of a components document that looks valid all along."""
    head = json.dumps({"page": document["page"]})[:-1].encode() + b', "components": ['
    component = json.dumps(document["components"][0]).encode()
    chunk = b"".join([b", " + component] * max(1, 65536 // (len(component) + 2)))
    yield head + component
    sent = len(head) + len(component)
    while sent < HUGE_BYTES:
        yield chunk
        sent += len(chunk)
    yield b"]}"


def _huge_status() -> Iterator[bytes]:
    """About HUGE_BYTES of a status document whose page name never ends."""
    yield b'{"status": {"indicator": "none"}, "page": {"name": "'
    chunk = b"x" * 65536
    for _ in range(HUGE_BYTES // len(chunk)):
        yield chunk
    yield b'"}}'


def fault_reply(
    fault: str, kind: str, document: dict[str, Any], retry_after: float | None, global_id: str
) -> Reply:
    """The reply of ``fault`` to a request for the ``kind`` document (``components``/``status``).

    ``document`` is the one the page would have served, built for this request alone (it may be
    reshaped in place); ``global_id`` names the component ``missing_global`` and
    ``unknown_status`` act on.
    """
    json_type = [("Content-Type", "application/json")]
    if fault in STATUS_FAULTS:
        headers = [("Content-Type", "text/plain")]
        if retry_after is not None:
            headers.append(("Retry-After", str(math.ceil(retry_after))))
        return Reply(int(fault), f"{_REASONS[fault]}\n".encode(), headers)
    if fault == "timeout":
        return Reply.json(document, delay=HOLD_SECONDS)
    if fault == "slow_drip":
        return Reply.json(document, drip=DRIP_SECONDS_PER_BYTE)
    if fault == "reset":
        return Reply(reset=True)
    if fault == "truncated":
        return Reply.json(document, truncate=True)
    if fault == "malformed":
        text = json.dumps(document).encode()
        return Reply(200, text[: len(text) // 2], json_type)
    if fault == "not_json":
        return Reply(200, _HTML, [("Content-Type", "text/html; charset=utf-8")])
    if fault == "empty":
        return Reply(200, b"", json_type)
    if fault == "huge":
        if kind == "status":
            return Reply(200, _huge_status(), json_type)
        return Reply(200, _huge(document), json_type)
    shaped = document
    if fault == "missing_global":
        shaped["components"] = [c for c in shaped["components"] if c["id"] != global_id]
        for group in shaped["components"]:  # as a real page drops it from its group's list
            if "components" in group:
                group["components"] = [i for i in group["components"] if i != global_id]
    elif fault == "unknown_status":
        for component in shaped["components"]:
            if component["id"] == global_id:
                component["status"] = UNKNOWN_STATUS
    elif kind == "components":  # wrong_shape
        shaped["components"] = {c["id"]: c for c in shaped["components"]}
    else:
        shaped["status"] = shaped["status"]["indicator"]
    return Reply.json(shaped)
