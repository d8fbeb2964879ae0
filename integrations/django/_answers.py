"""What the middleware answers when it refuses: failopen's own page, a site's, or 413."""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase

from failopen.engine.guard import Decision
from failopen.web import prefers_json, rejection_headers, rejection_html, rejection_json

__all__ = ["body_too_large", "finish_custom", "rejection"]


def rejection(request: HttpRequest, decision: Decision) -> HttpResponse:
    """failopen's own rejection: JSON for API clients, else a small HTML page."""
    as_json = prefers_json(request.META.get("HTTP_ACCEPT"), request.META.get("CONTENT_TYPE"))
    response = HttpResponse(rejection_json(decision) if as_json else rejection_html(decision),
                            status=decision.status_code)
    for name, value in rejection_headers(decision, json_body=as_json):
        response[name] = value
    return response


def finish_custom(response: Any, decision: Decision) -> HttpResponseBase:
    """A site's REJECT_VIEW page is never cached, and a 503 still says when to retry.

    Rendered here: an unrendered TemplateResponse returned from a middleware is never rendered
    by Django and fails in the server, outside our fallback. Raises on anything else than a
    response, which the caller answers with the default page.
    """
    if not isinstance(response, HttpResponseBase):
        raise TypeError(f"REJECT_VIEW returned {type(response).__name__}, not a response")
    render = getattr(response, "render", None)
    if render is not None and not getattr(response, "is_rendered", True):
        render()
    # Forced, as ASGI and WSGI force it (web.sealed_page_headers): a cached refusal would be
    # served to everyone after it, and a re-rendered log-in page holds a CSRF token.
    for name in ("CDN-Cache-Control", "Surrogate-Control"):
        if response.has_header(name):
            del response[name]
    response["Cache-Control"] = "no-store"
    if decision.retry_after is not None and not response.has_header("Retry-After"):
        response["Retry-After"] = str(decision.retry_after)
    return response


def body_too_large() -> HttpResponse:
    """413, in the words of the ASGI adapter."""
    payload = {"error": {"code": "body_too_large", "message": "The request body is too large."}}
    response = HttpResponse(json.dumps(payload), status=413, content_type="application/json")
    response["Cache-Control"] = "no-store"
    return response
