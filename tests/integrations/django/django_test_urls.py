"""URLconf of the Django tests: protected log-in views (sync and async), open views, failopen."""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import markcoroutinefunction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import include, path


def _answer(request: HttpRequest) -> JsonResponse:
    decision = request.failopen  # type: ignore[attr-defined]
    return JsonResponse({"ok": True, "failopen": None if decision is None else decision.to_dict(),
                         "form": request.POST.get("username")})


def login(request: HttpRequest) -> HttpResponse:
    return _answer(request)


async def alogin(request: HttpRequest) -> HttpResponse:
    return _answer(request)


def login_json(request: HttpRequest) -> HttpResponse:
    """Reads the JSON body after the middleware did: the body must still be there."""
    body = json.loads(request.body)
    decision = request.failopen  # type: ignore[attr-defined]
    return JsonResponse({"ok": True, "user": body.get("username"),
                         "outcome": decision.outcome})


def login_raw(request: HttpRequest) -> HttpResponse:
    """Reads the raw body, which Django refuses once a multipart form has been parsed."""
    decision = request.failopen  # type: ignore[attr-defined]
    return JsonResponse({"bytes": len(request.body), "outcome": decision.outcome})


def open_view(request: HttpRequest) -> HttpResponse:
    return _answer(request)


async def aopen_view(request: HttpRequest) -> HttpResponse:
    return _answer(request)


def page(request: HttpRequest) -> HttpResponse:
    return render(request, "page.html")


def site_reject(request: HttpRequest, decision: object) -> HttpResponse:
    """A site's own rejection page (REJECT_VIEW)."""
    return HttpResponse(f"site says no: {request.failopen.outcome}",  # type: ignore[attr-defined]
                        status=getattr(decision, "status_code", 500))


async def asite_reject(request: HttpRequest, decision: object) -> HttpResponse:
    return site_reject(request, decision)


def cached_reject(request: HttpRequest, decision: object) -> HttpResponse:
    """A REJECT_VIEW that asks caches to keep its page (a site-wide cache header, say)."""
    response = site_reject(request, decision)
    response["Cache-Control"] = "public, max-age=600"
    response["CDN-Cache-Control"] = "max-age=600"
    return response


def broken_reject(request: HttpRequest, decision: object) -> HttpResponse:
    raise RuntimeError("the site's rejection page is broken")


urlpatterns = [
    path("login/", login),
    path("login/async/", alogin),
    path("login/json/", login_json),
    path("login/raw/", login_raw),
    path("open/", open_view),
    path("open/async/", aopen_view),
    path("page/", page),
    path("failopen/", include("failopen.integrations.django.urls")),
]


class SyncOnlyMiddleware:
    """A middleware Django must adapt under ASGI: proves the adaptation log is captured."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)  # type: ignore[no-any-return]


class AsyncOnlyMiddleware:
    """A middleware Django must adapt under WSGI: proves the adaptation log is captured."""

    sync_capable = False
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        return await self.get_response(request)  # type: ignore[no-any-return]
