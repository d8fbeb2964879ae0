"""URLconf of the action tests: a log-in marked ``@protect(action="login")``, a sign-up marked
``@protect(action="signup")`` also listed in PROTECTED_PATHS (judged by its path first), and a
password reset whose action comes from EXPECTED_ACTIONS by URL name."""

from __future__ import annotations

import django_test_urls
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from failopen.integrations.django import protect


@protect(action="login")
def login(request: HttpRequest) -> HttpResponse:
    return django_test_urls._answer(request)


@protect(action="signup")
def signup(request: HttpRequest) -> HttpResponse:
    return django_test_urls._answer(request)


@protect
def reset(request: HttpRequest) -> HttpResponse:
    return django_test_urls._answer(request)


urlpatterns = [
    path("login/", login, name="login"),
    path("signup/", signup, name="signup"),
    path("reset/", reset, name="reset"),
    path("failopen/", include("failopen.integrations.django.urls")),
]
