"""URLconf of the i18n tests: the log-in view only under a language prefix (``/en/login/``)."""

from __future__ import annotations

import django_test_urls
from django.conf.urls.i18n import i18n_patterns
from django.urls import include, path

urlpatterns = [
    path("failopen/", include("failopen.integrations.django.urls")),
    *i18n_patterns(path("login/", django_test_urls.login)),
]
