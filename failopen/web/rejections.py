"""Refusals (403, or 429 and 503 with ``Retry-After``), as JSON or a small HTML page for a browser.

Messages are fixed per outcome: the detailed reason (which verify failure, whether an outage was
confirmed) goes to the log, never to a client probing for a way in. A site's own refusal page
(the adapters' ``reject=``) keeps its body and status; :func:`sealed_page_headers` gives it the
headers every refusal carries."""

from __future__ import annotations

import json
from collections.abc import Iterable
from html import escape
from typing import Any

from failopen.engine.decision import public_outcome
from failopen.engine.guard import Decision
from failopen.web.body_tokens import media_type

__all__ = [
    "prefers_json", "rejection_headers", "rejection_html", "rejection_json", "rejection_payload",
    "sealed_page_headers",
]

_PUBLIC_MESSAGES = {
    "missing_token": "This request needs an enforcement token.",
    "invalid_token": "The enforcement token was not accepted.",
    "rate_limited": "The request cannot be verified right now; retry shortly.",
    "cannot_verify": "The request cannot be verified right now; retry shortly.",
    "internal_error": "The request cannot be verified right now; retry shortly.",
    "outage_closed": "This action is briefly unavailable. Please try again in a few minutes.",
    "outage_rate_limited": "Too many attempts; please wait a minute and try again.",
    "fallback_required": "This request needs a solved challenge.",
    "fallback_invalid": "The challenge solution was not accepted; please try again.",
    "fallback_unavailable": "The request cannot be verified right now; retry shortly.",
}
_TITLES = {403: "Request refused", 429: "Too many attempts", 503: "Please retry shortly"}


def rejection_payload(decision: Decision) -> dict[str, Any]:
    """``{"error": {"code": <outcome>, "message": <fixed public text>}}``."""
    code = public_outcome(decision.outcome)
    message = _PUBLIC_MESSAGES.get(code, _PUBLIC_MESSAGES["cannot_verify"])
    return {"error": {"code": code, "message": message}}


def rejection_json(decision: Decision) -> bytes:
    """The JSON rejection body, encoded."""
    return json.dumps(rejection_payload(decision)).encode()


def rejection_html(decision: Decision) -> bytes:
    """A small HTML page for browsers that did not ask for JSON."""
    message = escape(rejection_payload(decision)["error"]["message"])
    title = "Briefly unavailable" if decision.outcome == "outage_closed" \
        else _TITLES.get(decision.status_code, "Please retry shortly")
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"</head><body><h1>{title}</h1><p>{message}</p></body></html>"
    ).encode()


def rejection_headers(decision: Decision, *, json_body: bool) -> list[tuple[str, str]]:
    """Content type, ``Cache-Control: no-store``, and ``Retry-After`` on a 429 or 503."""
    headers = [
        ("Content-Type", "application/json" if json_body else "text/html; charset=utf-8"),
        ("Cache-Control", "no-store"),
    ]
    if decision.retry_after is not None:
        headers.append(("Retry-After", str(decision.retry_after)))
    return headers


def prefers_json(accept: str | None, content_type: str | None = None) -> bool:
    """JSON for API clients: Accept names JSON, or a JSON request that did not ask for HTML."""
    accept = (accept or "").lower()
    if "json" in accept:
        return True
    if "text/html" in accept:
        return False
    media = media_type(content_type)
    return media == "application/json" or media.endswith("+json")


# Every header by which a response says how caches may keep it: a shared cache (a CDN) obeys its
# own one (RFC 9213 CDN-Cache-Control, Surrogate-Control) over Cache-Control.
_CACHING = frozenset({"cache-control", "cdn-cache-control", "surrogate-control"})


def sealed_page_headers(
    headers: Iterable[tuple[str, str]], decision: Decision
) -> list[tuple[str, str]]:
    """A site's refusal page's headers: ``Cache-Control: no-store`` over whatever caching it
    asked for, and the decision's ``Retry-After`` when it set none."""
    # Forced, not just added: a refusal cached by a CDN (a protected GET, a 503 in an outage)
    # would be served to everyone after it, and a re-rendered log-in page holds a CSRF token.
    sealed = [(name, value) for name, value in headers if name.lower() not in _CACHING]
    sealed.append(("Cache-Control", "no-store"))
    if decision.retry_after is not None and not any(
            name.lower() == "retry-after" for name, _ in sealed):
        sealed.append(("Retry-After", str(decision.retry_after)))
    return sealed
