"""URLconf of a site that uses allauth's pages only: its headless API is not routed."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [
    path("accounts/", include("allauth.urls")),
    path("failopen/", include("failopen.integrations.django.urls")),
]
