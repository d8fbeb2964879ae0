"""URLconf where the protected log-in view is reachable under other routes too."""

from __future__ import annotations

import django_test_urls
from django.urls import include, path, re_path

urlpatterns = [
    path("login/", django_test_urls.login),
    path("signin/", django_test_urls.login),  # an alias nobody listed
    re_path(r"(?i)^auth/login/$", django_test_urls.login),  # /AUTH/LOGIN/ too
    path("users/<int:pk>/login/", django_test_urls.login),  # covered by "/users/"
    path("failopen/", include("failopen.integrations.django.urls")),
]
