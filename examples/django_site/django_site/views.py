"""The example's views. FailOpenMiddleware has already decided when a protected view runs.

``login``, ``signup`` and ``password_reset`` are protected as views (``@protect``), not by their
paths: any other route to them (an alias, a language prefix, a script prefix) needs the
enforcement token too. Only POST is protected (``PROTECTED_METHODS``): GET shows the form.

During an outage a view follows ``FAILOPEN["OUTAGE_POLICY"]`` (``open`` unless set), except
``password_reset``: a bot's success there is the worst, so it is closed until the vendor is
back. With ``FAILOPEN_OUTAGE_POLICY=fallback`` (and ``FAILOPEN_FALLBACK_SECRET``) log-in and
sign-up ask for the self-hosted challenge instead of opening.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from failopen.integrations.django import protect


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The log-in form, with the CSRF token and failopen's script tag."""
    return render(request, "login.html")


@protect
@require_POST
def login(request: HttpRequest) -> HttpResponse:
    """Admitted by failopen: ``{"ok": true, "decision": {...}, "bypassed": bool}``.

    ``decision`` is ``request.failopen.to_dict()``: enforce, bypassed, outcome, reason, ...
    """
    return admitted(request)


@protect
@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    """GET: the sign-up form. POST: admitted by failopen, answered as ``login`` is."""
    if request.method == "GET":
        return render(request, "email_form.html", {"title": "Sign up"})
    return admitted(request)


@protect(outage="closed")
@require_http_methods(["GET", "POST"])
def password_reset(request: HttpRequest) -> HttpResponse:
    """GET: the password-reset form. POST: admitted by failopen, answered as ``login`` is."""
    if request.method == "GET":
        return render(request, "email_form.html", {"title": "Reset password"})
    return admitted(request)


def admitted(request: HttpRequest) -> JsonResponse:
    """What a protected view answers once failopen admitted the request."""
    # None only without FailOpenMiddleware (the benchmark's bare runs).
    decision = getattr(request, "failopen", None)
    return JsonResponse({"ok": True, "decision": decision and decision.to_dict(),
                         "bypassed": bool(decision and decision.bypassed)})
