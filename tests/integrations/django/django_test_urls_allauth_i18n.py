"""URLconf of the django-allauth tests under ``i18n_patterns``: ``/fr/accounts/login/``."""

from __future__ import annotations

from django.conf.urls.i18n import i18n_patterns
from django.urls import include, path

urlpatterns = [
    path("failopen/", include("failopen.integrations.django.urls")),
    *i18n_patterns(path("accounts/", include("allauth.urls")),
                   path("_allauth/", include("allauth.headless.urls"))),
]
