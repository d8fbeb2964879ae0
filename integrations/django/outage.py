"""Which protected route a Django request counts under, and what it does during an outage.

One answer for the middleware (a request it judges by its path or by its view) and for the flag
endpoint's ``?path=`` (what the snippet asks before a form is sent), so the browser is told the
policy the server will apply. A route can be claimed twice: by a path (``PROTECTED_PATHS``, under
any language prefix) and by its view (a URL name in ``OUTAGE_POLICY_ROUTES`` or
``@protect(outage=...)``). The stricter policy wins: listing a path must never loosen the policy
its view was given, and the other way round.
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

from typing import Any

from django.urls import get_resolver
from django.utils import translation

from failopen.fallback.settings import OUTAGE_POLICIES

from . import conf
from .protection import action_of, any_outage_marks, is_marked, outage_of

__all__ = ["policy_of_path", "route_policy", "view_of"]


def route_policy(settings: conf.Loaded, path: str, view: Any,
                 urlconf: Any = None) -> tuple[str, str]:
    """``(route, policy)`` of a protected request: the route is the outage rate limit's key (a
    path as PROTECTED_PATHS spells it, else the view's URL name); ``view`` is None when the
    request was judged by its path before Django resolved it."""
    policies = settings.policies
    found = _path_route(settings, path)
    candidates: list[tuple[str, str]] = [found] if found is not None else []
    # Judged by its path before Django resolved it (or as a big form to a protected view): the
    # view may still hold a stricter policy, so look it up whenever one could.
    if view is None and (found is None or _views_may_name_policies(settings, urlconf)):
        view = view_of(path, urlconf)
    if view is not None:
        names = settings.views.names_of(view, urlconf)
        marked = outage_of(view)
        named = marked is not None or any(name in policies.routes for name in names)
        # A view without a policy of its own adds nothing to a path's: the path's counts.
        if named or found is None:
            route = min(names) if names else getattr(view, "__qualname__", "") or path
            candidates.append((route, policies.for_views(names, marked=marked)))
    if not candidates:
        return path, policies.default
    return max(candidates, key=lambda c: OUTAGE_POLICIES.index(c[1])
               if c[1] in OUTAGE_POLICIES else len(OUTAGE_POLICIES))


def policy_of_path(path: str | None) -> str | None:
    """The outage policy of the route ``path`` resolves to (the flag endpoint's ``?path=``);
    None when nothing protects it."""
    found = route_of_path(path)
    return found[1] if found is not None else None


def route_of_path(path: str | None) -> tuple[str, str, str | None] | None:
    """``(route, policy, action)`` of the protected route ``path`` resolves to (the flag
    endpoint's ``?path=`` as the request's ``path_info``: decoded, the script prefix off;
    ``action`` is ``@protect(action=...)``'s, else None); None when nothing protects it."""
    if not path or not path.startswith("/"):
        return None
    settings = conf.loaded()
    methods = settings.config.protected_methods if settings.config is not None else ()
    method = "POST" if "POST" in methods else next(iter(sorted(methods)), "POST")
    view = view_of(path, None)
    protected_view = view is not None and (is_marked(view) or settings.views.covers(view))
    end = path.find("/", 1)
    # What the middleware's own test says: the path itself, or the path under a language prefix.
    protected_path = settings.is_protected(method, path) or (
        end != -1 and settings.is_protected(method, path[end:]) and _names_language(path))
    if not protected_path and not protected_view:
        return None
    route, policy = route_policy(settings, path, view)
    return route, policy, action_of(view) if view is not None else None


def _path_route(settings: conf.Loaded, path: str) -> tuple[str, str] | None:
    """``(route, policy)`` of the protected path ``path`` falls under, also under a language
    prefix (``/fr/login/`` for ``/login/``, as the middleware protects it); None when none."""
    found = settings.policies.for_path(path)
    end = path.find("/", 1)
    if found is None and end != -1 and _names_language(path):
        found = settings.policies.for_path(path[end:])
    return found


def _views_may_name_policies(settings: conf.Loaded, urlconf: Any) -> bool:
    # A view can only tighten a path's policy when some view was given one: by URL name in
    # OUTAGE_POLICY_ROUTES (a route that is not a path) or by protect(outage=...).
    if any(not route.startswith("/") for route in settings.policies.routes):
        return True
    try:
        # protect() marks a view when its module is imported: make sure the URLconf (and every
        # view it includes) is, or a worker's first request would miss the marks (a cached
        # attribute once loaded).
        get_resolver(urlconf).url_patterns  # noqa: B018
    except Exception:  # a broken URLconf: resolving the view will fail too, Django answers
        return True
    return any_outage_marks()


def view_of(path: str, urlconf: Any) -> Any:
    """The view ``path`` routes to, under the language its prefix names (i18n_patterns match
    the active language's prefix only); None when it routes nowhere."""
    try:
        language = translation.get_language_from_path(path)
        if language is None:
            return get_resolver(urlconf).resolve(path).func
        with translation.override(language):
            return get_resolver(urlconf).resolve(path).func
    except Exception:  # Resolver404, or a broken URLconf: only the path can tell
        return None


def _names_language(path: str) -> bool:
    try:
        return translation.get_language_from_path(path) is not None
    except Exception:  # LANGUAGES unusable: the path may be a language's view, so count it
        return True
