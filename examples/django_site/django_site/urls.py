"""``/`` the log-in form, ``/login/``, ``/signup/`` and ``/password-reset/`` the protected views,
``/failopen/`` the flag and challenge endpoints."""

from __future__ import annotations

from django.urls import include, path

from django_site import views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.login, name="login"),
    path("signup/", views.signup, name="signup"),
    path("password-reset/", views.password_reset, name="password-reset"),
    path("failopen/", include("failopen.integrations.django.urls")),
]
