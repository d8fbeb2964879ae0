"""FailOpenMiddleware refuses to wrap a Django application, wherever it sits in the stack.

Around Django's ASGI handler the middleware sees paths, not the views Django resolves them to:
``FORCE_SCRIPT_NAME``, ``i18n_patterns`` (``/en/login/``) and a second URL for the same view all
reach a protected view under a path it was never told about. Django's own middleware decides
from the resolved view, so the ASGI one points there instead of guarding half the routes.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from _asgi_kit import Recorder
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from failopen.integrations.asgi import FailOpenMiddleware
from starlette.applications import Starlette
from starlette.middleware.gzip import GZipMiddleware
from starlette.routing import Mount

from failopen import Config
from failopen.exceptions import ConfigError

DJANGO_MIDDLEWARE = "failopen.integrations.django.middleware.FailOpenMiddleware"


def django_handler() -> ASGIHandler:
    """A real ASGIHandler; its __init__ (which loads settings) is not needed to recognise it."""
    return ASGIHandler.__new__(ASGIHandler)


class _Wrapper:
    """Any ASGI middleware that keeps the app it wraps in ``.app``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


class _ProtocolRouter:
    """What Channels' ProtocolTypeRouter keeps: one app per scope type."""

    def __init__(self, mapping: dict[str, Any]) -> None:
        self.application_mapping = mapping

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.application_mapping[scope["type"]](scope, receive, send)


class _Subclass(ASGIHandler):  # type: ignore[misc]
    """A project's own handler class."""


def _build(app: Any) -> FailOpenMiddleware:
    return FailOpenMiddleware(app, config=Config(status_url="https://status.test"))


@pytest.mark.parametrize("wrap", [
    lambda h: h,
    lambda h: _Wrapper(h),
    lambda h: _Wrapper(_Wrapper(GZipMiddleware(h))),
    lambda h: Starlette(routes=[Mount("/", app=h)]),
    lambda h: functools.partial(h),
    lambda h: _Subclass.__new__(_Subclass),
    lambda h: _Wrapper(WSGIHandler.__new__(WSGIHandler)),  # behind a WSGI-to-ASGI adapter
    lambda h: _ProtocolRouter({"http": h}),
], ids=["direct", "wrapped", "nested", "mounted", "partial", "subclass", "wsgi", "channels"])
def test_wrapping_a_django_application_is_refused_with_the_django_middleware_named(
    wrap: Any,
) -> None:
    with pytest.raises(ConfigError) as caught:
        _build(wrap(django_handler()))
    message = str(caught.value)
    assert DJANGO_MIDDLEWARE in message
    assert "MIDDLEWARE" in message
    for why in ("FORCE_SCRIPT_NAME", "i18n_patterns"):
        assert why in message


def test_other_apps_and_cycles_are_accepted() -> None:
    looped = _Wrapper(None)
    looped.app = looped  # a cycle must not hang the search
    for app in (Recorder(), _Wrapper(Recorder()), looped, Starlette()):
        assert _build(app).app is app
