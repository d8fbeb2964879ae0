"""URLconf of the view-protection tests: views protected by ``protect`` or by name, and aliases.

Every protected view is also routed somewhere no protected path would cover (an alias, a
language prefix, a namespace): the view is what is protected, not the spelling of its path.
"""

from __future__ import annotations

from typing import Any

import django_test_urls
from django.conf.urls.i18n import i18n_patterns
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.utils.decorators import method_decorator
from django.views import View
from failopen.integrations.django import protect

answer = django_test_urls._answer


@protect
def signin(request: HttpRequest) -> HttpResponse:
    return answer(request)


@protect
async def asignin(request: HttpRequest) -> HttpResponse:
    return answer(request)


@protect
class LoginView(View):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return answer(request)


@method_decorator(protect, name="dispatch")
class DispatchLoginView(View):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return answer(request)


class SubDispatchLoginView(DispatchLoginView):
    """Overrides the protected dispatch: still the protected view."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return super().dispatch(request, *args, **kwargs)


class AsyncLoginView(View):
    async def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return answer(request)


class PlainView(View):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return answer(request)


def named(request: HttpRequest) -> HttpResponse:
    """Protected through PROTECTED_VIEWS by its URL name, ``accounts:login``."""
    return answer(request)


def dotted(request: HttpRequest) -> HttpResponse:
    """Protected through PROTECTED_VIEWS by its dotted path."""
    return answer(request)


accounts = ([path("login/", named, name="login")], "accounts")

urlpatterns = [
    path("signin/", signin),
    path("alias/", signin),  # the same view, a route nobody listed anywhere
    path("asignin/", asignin),
    path("cbv/", LoginView.as_view()),
    path("cbv/again/", LoginView.as_view()),  # another as_view(): the class is protected
    path("cbv-dispatch/", DispatchLoginView.as_view()),
    path("cbv-sub/", SubDispatchLoginView.as_view()),
    path("cbv-async/", protect(AsyncLoginView.as_view())),
    path("plain/", PlainView.as_view()),
    path("accounts/", include(accounts)),
    path("other-login/", named),  # no name here: the view is the one named accounts:login
    path("dotted/", dotted),
    path("open/", django_test_urls.open_view),
    path("failopen/", include("failopen.integrations.django.urls")),
    *i18n_patterns(path("login/", signin), prefix_default_language=False),
]
