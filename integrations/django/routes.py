"""Which URLs a protected path reaches, read from the URLconf (for the system checks).

Routes are read as written (``users/<int:pk>/``, ``^api/v(?P<v>[0-9]+)/``) up to their first
converter or regex syntax: a guess that errs towards warning less for W001 (a prefix that
matches no URL) and more for W008 (a protected view routed where no protected path reaches).
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.urls import Resolver404, URLResolver, get_resolver
from django.utils import translation

from failopen.config import Config

from .protection import view_key

__all__ = ["catch_all_paths", "prefix_is_routed", "unguarded_aliases"]

# Where a route stops being literal text: a converter, or regex syntax.
_SYNTAX = re.compile(r"[<(\[\\.*+?{|$]")
# A regex route's leading flags: (?i) routes /LOGIN/ as /login/, which a protected path covers.
_FLAGS = re.compile(r"\(\?[aiLmsux]+\)")


def _languages() -> list[str]:
    return [code for code, _ in settings.LANGUAGES] if settings.USE_I18N else []


def prefix_is_routed(prefix: str) -> bool:
    """True when some URL of the project starts with the prefix (a prefix protects those).

    The prefix resolves, or an ``include()`` or a route with converters or a regex begins with
    it (``/users/`` for ``users/<int:pk>/``; routes read as written, so this only ever warns
    less). Under ``i18n_patterns`` a prefix counts when it routes after a language prefix: the
    middleware protects ``/fr/login/`` when ``/login/`` is listed, so ``/login/`` is the one to
    list.
    """
    try:
        resolver = get_resolver()
        if _reaches(resolver, prefix):
            return True
        for code in _languages():
            # i18n_patterns match the active language's prefix only, as LocaleMiddleware sets it.
            with translation.override(code):
                if _reaches(resolver, f"/{code}{prefix}"):
                    return True
    except Exception:  # a broken URLconf has checks of its own
        return True
    return False


def _reaches(resolver: URLResolver, path: str) -> bool:
    try:
        resolver.resolve(path)
    except Resolver404:
        return _starts_below(resolver, path)
    return True


def _starts_below(resolver: URLResolver, path: str) -> bool:
    """True when a URL under ``resolver`` starts with ``path``."""
    match = resolver.pattern.match(path)
    if not match:
        return _route_text(resolver.pattern).startswith(path)
    rest: str = match[0]
    return rest == "" or any(
        _starts_below(child, rest) if isinstance(child, URLResolver)
        else _route_text(child.pattern).startswith(rest)
        for child in resolver.url_patterns)


def _route_text(pattern: Any) -> str:
    """A pattern as written (``users/<int:pk>/``, ``^users/$``), without the leading anchor."""
    text = str(pattern)
    flags = _FLAGS.match(text)
    return text[flags.end() if flags else 0:].removeprefix("^")


def unguarded_aliases(
    config: Config, guarded: Callable[[Any], bool] = lambda view: False
) -> list[tuple[str, str]]:
    """``(protected path, route)`` for each other route to a protected path's view that the
    middleware does not guard: an alias, a translated URL, a case-insensitive regex. Views
    that ``guarded`` says are protected as views (every route to them is) are left out, and so
    are catch-all views (:func:`catch_all_paths`: every page would be an "alias")."""
    found: dict[str, tuple[str, str]] = {}
    try:
        resolver = get_resolver()
        for code in [translation.get_language(), *_languages()]:
            with translation.override(code):  # translated routes and language prefixes
                views = {view: path for view, path
                         in _protected_views(resolver, config, code).items()
                         if not guarded(view) and not _catch_all(resolver, view, path, code)}
                for route, view in _routes_of(resolver, views.keys(), ""):
                    if route not in found and not _covered(config, route):
                        found[route] = (views[view], route)
    except Exception:  # a broken URLconf has checks of its own
        return []
    return list(found.values())


def catch_all_paths(
    config: Config, guarded: Callable[[Any], bool] = lambda view: False
) -> list[tuple[str, str]]:
    """``(protected path, view's dotted path)`` for each protected path whose view also serves
    a made-up path beside it: a catch-all, such as a CMS's page view (Wagtail's
    ``re_path(r"", include(wagtail_urls))``) or a ``<path:...>`` route. Protecting that view
    would protect every page it serves; which other URLs reach the same page is the CMS's
    business, which the URLconf cannot show."""
    found: dict[str, str] = {}
    try:
        resolver = get_resolver()
        for code in [translation.get_language(), *_languages()]:
            with translation.override(code):
                for path in config.protected_paths:
                    view = _view_at(resolver, path, code)
                    if path not in found and view is not None and not guarded(view) \
                            and _catch_all(resolver, view, path, code):
                        found[path] = _dotted(view)
    except Exception:  # a broken URLconf has checks of its own
        return []
    return list(found.items())


def _view_at(resolver: URLResolver, path: str, code: str | None) -> Any:
    for spelling in (path, f"/{code}{path}") if code else (path,):
        try:
            return view_key(resolver.resolve(spelling).func)
        except Resolver404:
            continue
    return None


def _catch_all(resolver: URLResolver, view: Any, path: str, code: str | None) -> bool:
    """True when ``view`` also answers a made-up path at the root or beside ``path``
    (``/failopen-probe-<random>/``, ``/cms/failopen-probe-<random>/x/``): no site routes that
    on purpose, so the view takes paths it has never been told about (one segment, as
    ``<slug:slug>/`` does, or several, as ``<path:...>`` and Wagtail's pattern do)."""
    name = f"failopen-probe-{secrets.token_hex(4)}"
    parts = [part for part in path.split("/") if part]
    for depth, probe in itertools.product(range(len(parts)), (f"{name}/", f"{name}/x/", name)):
        made_up = "/" + "".join(f"{part}/" for part in parts[:depth]) + probe
        for spelling in (made_up, f"/{code}{made_up}") if code else (made_up,):
            try:
                if view_key(resolver.resolve(spelling).func) is view:
                    return True
            except Resolver404:
                continue
    return False


def _dotted(view: Any) -> str:
    module = getattr(view, "__module__", None)
    name = getattr(view, "__qualname__", None) or type(view).__qualname__
    return f"{module}.{name}" if module else name


def _protected_views(resolver: URLResolver, config: Config, code: str | None) -> dict[Any, str]:
    views: dict[Any, str] = {}
    for path in config.protected_paths:
        for spelling in (path, f"/{code}{path}") if code else (path,):
            try:
                views.setdefault(view_key(resolver.resolve(spelling).func), path)
            except Resolver404:
                continue
    return views


def _routes_of(resolver: URLResolver, views: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """``("/route/", view)`` for each pattern routing to one of ``views``, read literally."""
    for child in resolver.url_patterns:
        text = prefix + _literal(child.pattern)
        if isinstance(child, URLResolver):
            yield from _routes_of(child, views, text)
        elif view_key(child.callback) in views:
            yield "/" + text, view_key(child.callback)


def _literal(pattern: Any) -> str:
    """The fixed start of a pattern: up to its first converter or regex syntax."""
    return _SYNTAX.split(_route_text(pattern), maxsplit=1)[0]


def _covered(config: Config, route: str) -> bool:
    """True when the middleware guards ``route`` (what ``middleware._is_protected`` checks)."""
    if config.protects_path(route):
        return True
    end = route.find("/", 1)
    return (end != -1 and config.protects_path(route[end:])
            and translation.get_language_from_path(route) is not None)
