"""Security review of issue #9 A3 (ASGI side): Django behind a plain function is still Django."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler
from failopen.integrations.asgi import FailOpenMiddleware

from failopen import Config
from failopen.exceptions import ConfigError

_django_app = ASGIHandler.__new__(ASGIHandler)


async def module_application(scope: Any, receive: Any, send: Any) -> None:
    """The asgi.py of a project that serves websockets itself and HTTP through Django."""
    if scope["type"] == "http":
        await _django_app(scope, receive, send)


def _closure_application() -> Any:
    django_app = ASGIHandler.__new__(ASGIHandler)

    async def application(scope: Any, receive: Any, send: Any) -> None:
        await django_app(scope, receive, send)

    return application


@pytest.mark.parametrize("app", [module_application, _closure_application(),
                                 _django_app.__call__], ids=["global", "closure", "method"])
def test_a_django_handler_behind_a_function_is_refused(app: Any) -> None:
    """FORCE_SCRIPT_NAME and i18n_patterns reach protected views past the ASGI middleware
    whether Django sits in ``.app`` or in a function's closure or module: refuse both."""
    with pytest.raises(ConfigError, match="Django"):
        FailOpenMiddleware(app, config=Config(status_url="https://status.test"))


class _Touchy:
    """A lazy proxy (like django.conf.settings) that raises on any attribute."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("settings are not configured")


_touchy = _Touchy()


async def starlette_like_endpoint(scope: Any, receive: Any, send: Any) -> None:
    _touchy.anything  # noqa: B018


def test_a_function_naming_a_touchy_global_still_builds() -> None:
    FailOpenMiddleware(starlette_like_endpoint, config=Config(status_url="https://status.test"))
