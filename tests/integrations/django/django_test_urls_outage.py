"""URLconf of the outage-policy tests: a path-protected log-in, a named sign-up view whose policy
is set in OUTAGE_POLICY_ROUTES, a password reset marked ``@protect(outage="closed")``, and an
e-mail change marked ``@protect`` whose policy a test names by URL name."""

from __future__ import annotations

import django_test_urls
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from failopen.integrations.django import protect


def login(request: HttpRequest) -> HttpResponse:
    return django_test_urls._answer(request)


def signup(request: HttpRequest) -> HttpResponse:
    return django_test_urls._answer(request)


@protect(outage="closed")
def password_reset(request: HttpRequest) -> HttpResponse:
    return django_test_urls._answer(request)


@protect
def change_email(request: HttpRequest) -> HttpResponse:
    return django_test_urls._answer(request)


urlpatterns = [
    path("login/", login, name="login"),
    path("signup/", signup, name="signup"),
    path("accounts/signup/", signup),  # another route to the named view: the same policy
    path("reset/", password_reset, name="reset"),
    # Protected by its decorator alone; its policy comes from OUTAGE_POLICY_ROUTES by URL name.
    path("email/", change_email, name="change-email"),
    path("failopen/", include("failopen.integrations.django.urls")),
]
