"""URLconf of the flag's ``?path=`` tests under a script prefix: the outage-policy routes, and a
sign-up whose path is not ASCII (``/inscrição/``, which a browser's form action encodes)."""

from __future__ import annotations

import django_test_urls
import django_test_urls_outage
from django.http import HttpRequest, HttpResponse
from django.urls import path


def inscricao(request: HttpRequest) -> HttpResponse:
    return django_test_urls._answer(request)


def inscricao_view(request: HttpRequest) -> HttpResponse:
    return django_test_urls._answer(request)


urlpatterns = [
    *django_test_urls_outage.urlpatterns,
    path("inscrição/", inscricao, name="inscricao"),
    # Protected by its URL name alone (PROTECTED_VIEWS), not by a listed path.
    path("cadastro/inscrição/", inscricao_view, name="cadastro"),
]
