"""URLconf of a CMS site under language prefixes (``/fr/join/``), as Wagtail's i18n set-up is."""

from __future__ import annotations

from django.conf.urls.i18n import i18n_patterns
from django.urls import include, path, re_path
from django_test_urls_cms import cms_urls

urlpatterns = [
    path("failopen/", include("failopen.integrations.django.urls")),
    *i18n_patterns(re_path(r"", include(cms_urls))),
]
