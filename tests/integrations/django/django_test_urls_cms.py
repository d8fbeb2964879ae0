"""URLconf of a site whose pages a CMS serves: Wagtail's own patterns, written out.

Wagtail's ``wagtail.urls`` routes every page through one view, ``serve``, with
``re_path(r"^((?:[\\w\\-]+/)*)$", serve, name="wagtail_serve")``, included at the root with
``re_path(r"", include(wagtail_urls))``; the log-in page (a CMS form page) is one of its pages.
A ``<path:...>`` route under a prefix is the other common catch-all. The log-in view of the
other tests is routed beside them, with an alias nobody listed.
"""

from __future__ import annotations

import django_test_urls
from django.http import HttpRequest, HttpResponse
from django.urls import include, path, re_path


def serve(request: HttpRequest, path: str) -> HttpResponse:
    """A CMS page, whatever its path (named as Wagtail names its view)."""
    return HttpResponse(f"page {path}")


def document(request: HttpRequest, path: str) -> HttpResponse:
    return HttpResponse(f"document {path}")


cms_urls = [re_path(r"^((?:[\w\-]+/)*)$", serve, name="wagtail_serve")]

urlpatterns = [
    path("login/", django_test_urls.login),
    path("signin/", django_test_urls.login),  # an alias nobody listed: W008 still says so
    path("docs/<path:path>", document),
    path("blog/<slug:path>/", document),  # one segment: a catch-all of its own kind
    path("failopen/", include("failopen.integrations.django.urls")),
    re_path(r"", include(cms_urls)),  # last, as Wagtail's manual puts it
]
