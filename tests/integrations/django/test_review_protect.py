"""Security review of issue #9 A3: ``protect`` where a reader of Django's docs would put it.

This module is also the URLconf of its tests (``ROOT_URLCONF="test_review_protect"``).
"""

# mypy: disable-error-code="misc, untyped-decorator"

from __future__ import annotations

from typing import Any

import django_test_urls
import pytest
from django.http import HttpRequest, HttpResponse
from django.test import override_settings
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from failopen.integrations.django import protect

answer = django_test_urls._answer


class MethodMarkedView(View):
    """``protect`` on the handler itself: it only sets an attribute, so it decorates a method."""

    @protect
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return answer(request)


@method_decorator(protect, name="post")
class PostDecoratedView(View):
    """Django's documented way to decorate one handler of a class-based view."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return answer(request)


def login(request: HttpRequest) -> HttpResponse:
    return answer(request)


def signup(request: HttpRequest) -> HttpResponse:
    return answer(request)


def register(request: HttpRequest) -> HttpResponse:
    return answer(request)


urlpatterns = [
    path("method-marked/", MethodMarkedView.as_view()),
    path("post-decorated/", PostDecoratedView.as_view()),
    # The named route wraps the view in urls.py; an older alias routes the bare function.
    path("login/", never_cache(login), name="login"),
    path("api/login/", login),
    path("old/login/", csrf_exempt(login)),
    # protect applied in urls.py to one wrapped route; others reach the same function.
    path("old/signup/", csrf_exempt(signup)),
    path("signup/", protect(never_cache(signup))),
    path("api/signup/", signup),
    # protect applied in urls.py to the function, after another route wrapped it.
    path("old/register/", csrf_exempt(register)),
    path("register/", protect(register)),
]


@pytest.mark.parametrize("url", ["/method-marked/", "/post-decorated/"])
def test_protect_on_a_handler_method_protects_the_view(use_failopen: Any, url: str) -> None:
    """A handler marked with ``protect`` (directly or with method_decorator) must be guarded,
    not silently left open: the view looks protected in review, and it admitted every POST."""
    from django.test import Client

    use_failopen(PROTECTED_PATHS=[])
    with override_settings(ROOT_URLCONF="test_review_protect"):
        response = Client().post(url, headers={"accept": "application/json"})
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "missing_token"


@pytest.mark.parametrize("url", ["/login/", "/api/login/", "/old/login/"])
def test_a_named_view_is_protected_on_routes_that_wrap_it_differently(
    use_failopen: Any, url: str
) -> None:
    """PROTECTED_VIEWS=["login"] names a route whose view is wrapped in urls.py (never_cache);
    another route reaches the same function bare or wrapped otherwise. "Every route to a named
    view is protected" must hold for them too: the view is the function, not its wrapper."""
    from django.test import Client

    use_failopen(PROTECTED_PATHS=[], PROTECTED_VIEWS=["login"])
    with override_settings(ROOT_URLCONF="test_review_protect"):
        response = Client().post(url, headers={"accept": "application/json"})
    assert response.status_code == 403, response.content


@pytest.mark.parametrize("url", ["/register/", "/old/register/"])
def test_protect_on_a_function_covers_a_wrapper_made_before(use_failopen: Any, url: str) -> None:
    """``protect(register)`` in urls.py, after ``csrf_exempt(register)`` copied the function's
    attributes for another route: that route reaches the protected view too."""
    from django.test import Client

    use_failopen(PROTECTED_PATHS=[])
    with override_settings(ROOT_URLCONF="test_review_protect"):
        response = Client().post(url, headers={"accept": "application/json"})
    assert response.status_code == 403, response.content


@pytest.mark.parametrize("url", [
    "/signup/",
    "/api/signup/",
    "/old/signup/",
])
def test_protect_on_a_wrapped_view_protects_the_function_on_every_route(
    use_failopen: Any, url: str
) -> None:
    """``protect(never_cache(signup))`` in urls.py: the other routes to ``signup`` (bare, or
    wrapped by csrf_exempt before protect ran) are routes to the same view."""
    from django.test import Client

    use_failopen(PROTECTED_PATHS=[])
    with override_settings(ROOT_URLCONF="test_review_protect"):
        response = Client().post(url, headers={"accept": "application/json"})
    assert response.status_code == 403, response.content
