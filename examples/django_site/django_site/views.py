"""The example's two views. FailOpenMiddleware has already decided when ``login`` runs.

``login`` is protected as a view (``@protect``), not by its path: any other route to it (an
alias, a language prefix, a script prefix) needs the enforcement token too.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST
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
    # None only without FailOpenMiddleware (the benchmark's bare runs).
    decision = getattr(request, "failopen", None)
    return JsonResponse({"ok": True, "decision": decision and decision.to_dict(),
                         "bypassed": bool(decision and decision.bypassed)})
