"""URLconf of the body tests: views protected by ``protect`` or by name that read their body.

Shaped like django-allauth's headless log-in and sign-up: JSON in, the CSRF token in the
X-CSRFToken header, the view parsing ``request.body`` itself after the guard let it through.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import RawPostDataException
from django.urls import include, path
from django.views import View
from failopen.integrations.django import protect


def _answer(request: HttpRequest) -> JsonResponse:
    """What the view read of the body, and what the guard decided."""
    if request.content_type == "application/json":
        user = json.loads(request.body).get("username")  # the body is still there
    else:
        user = request.POST.get("username")
    decision = request.failopen  # type: ignore[attr-defined]
    return JsonResponse({"user": user, "files": sorted(request.FILES),
                         "outcome": None if decision is None else decision.outcome})


@protect
def signup(request: HttpRequest) -> HttpResponse:
    return _answer(request)


@protect
async def asignup(request: HttpRequest) -> HttpResponse:
    return _answer(request)


class HeadlessLogin(View):
    """Protected by its URL name, ``account_login`` (FAILOPEN['PROTECTED_VIEWS'])."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return _answer(request)

    def put(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return _answer(request)


def reject_with_body(request: HttpRequest, decision: Any) -> HttpResponse:
    """A REJECT_VIEW that looks at the raw body (to log it, say): what Django would give it."""
    try:
        size: int | str = len(request.body)
    except RawPostDataException:
        size = "unreadable"
    return JsonResponse({"body": size}, status=decision.status_code)


def unprotected(request: HttpRequest) -> HttpResponse:
    return _answer(request)


urlpatterns = [
    path("signup/", signup, name="account_signup"),
    path("signup/async/", asignup),
    path("auth/login/", HeadlessLogin.as_view(), name="account_login"),
    path("login/json/", unprotected),  # protected by its path (PROTECTED_PATHS: /login/)
    path("open/", unprotected, name="open"),
    path("failopen/", include("failopen.integrations.django.urls")),
]
