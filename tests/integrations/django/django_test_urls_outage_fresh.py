"""URLconf imported by one test only: its ``@protect(outage="closed")`` view is marked when the
first request makes Django import it, as in a fresh worker that has served nothing yet."""

from __future__ import annotations

import django_test_urls
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from failopen.integrations.django import protect


@protect(outage="closed")
def password_change(request: HttpRequest) -> HttpResponse:
    return django_test_urls._answer(request)


urlpatterns = [
    path("password/", password_change),
    path("failopen/", include("failopen.integrations.django.urls")),
]
