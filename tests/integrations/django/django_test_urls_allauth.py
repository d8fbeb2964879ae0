"""URLconf of the django-allauth tests: allauth's pages and headless API as its documentation
includes them, and failopen's URLs."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [
    path("accounts/", include("allauth.urls")),
    path("_allauth/", include("allauth.headless.urls")),
    path("failopen/", include("failopen.integrations.django.urls")),
]
