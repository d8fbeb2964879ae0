"""``/`` the form, ``/login/`` the protected view, ``/failopen/`` the flag endpoint."""

from __future__ import annotations

from django.urls import include, path

from django_site import views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.login, name="login"),
    path("failopen/", include("failopen.integrations.django.urls")),
]
