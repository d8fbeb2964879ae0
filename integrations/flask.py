"""``failopen_script()`` for Flask's Jinja templates: the browser snippet's script tag, as
``{% failopen_script %}`` is in Django.

    from failopen.integrations.flask import init_app
    from failopen.integrations.wsgi import FailOpenMiddleware

    app.wsgi_app = FailOpenMiddleware(app.wsgi_app)
    init_app(app)            # finds the middleware in app.wsgi_app (or: init_app(app, middleware))

    <head>{{ failopen_script() }}</head>     {# or failopen_script(form="#login", retries=5) #}

The tag names the middleware's routes (``<prefix>/failopen.js``, ``<prefix>/flag``) under the
request's ``SCRIPT_NAME`` (an app mounted under a prefix), the settings' public key, token field
and vendor, and the snippet's tuning options given as keywords (``form``, ``action``,
``ready_timeout_ms``, ``retries``, ``retry_delay_ms``). A CSP nonce comes from ``nonce=``, else
from ``request.csp_nonce`` (flask-talisman sets it). ``only_protected=True`` renders nothing on
a page whose own path is not protected (a layout shared by protected and unprotected pages).
The markup is :func:`failopen.web.snippet_tag`'s, which Django's tag renders too. A mistyped
option is logged and the snippet's defaults apply: a page never fails for the tag.

``init_app`` also puts the middleware's FailOpen in ``app.extensions["failopen"]`` (unless
something is there already), where the WTForms field looks for it.
"""

from __future__ import annotations

import logging
from typing import Any

from markupsafe import Markup

from failopen import web

from .wsgi import FailOpenMiddleware

__all__ = ["failopen_script", "init_app"]

logger = logging.getLogger("failopen.flask")

# How deep init_app looks through wrappers (ProxyFix, a dispatcher) for the middleware.
_MAX_WRAPPERS = 8


def init_app(app: Any, middleware: FailOpenMiddleware | None = None) -> None:
    """Register ``failopen_script()`` in ``app``'s Jinja globals, for ``middleware`` (default:
    the FailOpenMiddleware in ``app.wsgi_app``, through wrappers that keep it as ``.app``).
    TypeError at start-up when there is none: a page without the snippet cannot send its form
    while the vendor is down."""
    found = middleware if middleware is not None else _find(app.wsgi_app)
    if not isinstance(found, FailOpenMiddleware):
        raise TypeError(
            "failopen.integrations.flask.init_app: no FailOpenMiddleware in app.wsgi_app; wrap "
            "the app first (app.wsgi_app = FailOpenMiddleware(app.wsgi_app)) or pass "
            "init_app(app, middleware)")
    app.extensions.setdefault("failopen", found.runtime)

    def script(**options: Any) -> Markup:
        return failopen_script(found, **options)

    app.jinja_env.globals["failopen_script"] = script


def failopen_script(middleware: FailOpenMiddleware, **options: Any) -> Markup:
    """The script tag for ``middleware``'s routes and settings (``init_app`` binds it)."""
    request = _request()
    nonce = options.pop("nonce", None) or getattr(request, "csp_nonce", None)
    root = str(getattr(request, "script_root", "") or "")
    if options.pop("only_protected", False) and request is not None:
        path = str(request.path)
        if not (middleware.config.protects_path(path)
                or middleware.config.protects_path(root + path)):
            return Markup("")
    base = root + middleware.prefix
    config = middleware.config
    try:
        attributes = web.snippet_attributes(config, flag_url=base + "/flag", **options)
    except (TypeError, ValueError) as exc:
        # A template typo: the snippet's own defaults are better than no snippet at all.
        logger.error("failopen_script: %s; the snippet's defaults apply", exc)
        attributes = web.snippet_attributes(config, flag_url=base + "/flag")
    if nonce:
        attributes["nonce"] = str(nonce)
    return Markup(web.snippet_tag(base + "/failopen.js", attributes))


def _find(app: Any) -> FailOpenMiddleware | None:
    for _ in range(_MAX_WRAPPERS):
        if isinstance(app, FailOpenMiddleware):
            return app
        app = getattr(app, "app", None)
    return None


def _request() -> Any:
    """Flask's request when there is one (a template rendered outside one has none)."""
    try:
        from flask import has_request_context, request
    except ImportError:  # pragma: no cover - init_app is only called with a Flask app
        return None
    return request if has_request_context() else None
