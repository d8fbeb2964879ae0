"""URLconf without the failopen URLs: the log-in view alone."""

from __future__ import annotations

import django_test_urls
from django.urls import path

urlpatterns = [path("login/", django_test_urls.login)]
