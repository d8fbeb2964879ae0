"""URLconf that includes allauth's headless API under a namespace of its own (``api``), so
the names of ALLAUTH_VIEWS (``headless:...``) miss it: failopen.W009 must say so."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [
    path("accounts/", include("allauth.urls")),
    path("api/", include("allauth.headless.urls", namespace="api")),
    path("failopen/", include("failopen.integrations.django.urls")),
]
