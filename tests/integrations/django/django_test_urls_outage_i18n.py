"""URLconf of the outage-policy i18n tests: the same views as ``django_test_urls_outage``, only
under a language prefix (``/fr/signup/``), as ``i18n_patterns`` serves them."""

from __future__ import annotations

import django_test_urls_outage as outage
from django.conf.urls.i18n import i18n_patterns
from django.urls import include, path

urlpatterns = [
    path("failopen/", include("failopen.integrations.django.urls")),
    *i18n_patterns(
        path("login/", outage.login, name="login"),
        path("signup/", outage.signup, name="signup"),
        path("reset/", outage.password_reset, name="reset"),
    ),
]
