"""``path("failopen/", include("failopen.integrations.django.urls"))``: flag, challenge,
override and the fallback solver."""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

from django.urls import path

from . import views

__all__ = ["app_name", "urlpatterns"]

app_name = "failopen"

urlpatterns = [
    path("flag", views.flag, name="flag"),
    path("challenge", views.challenge, name="challenge"),
    path("override", views.override, name="override"),
    path("failopen-solver.js", views.solver, name="solver"),
]
