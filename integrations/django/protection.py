"""Protect views, not spellings of paths: the ``protect`` mark and the PROTECTED_VIEWS names.

A path list protects what a site remembered to list; a view is reached through every route to
it: an alias, a language prefix (``i18n_patterns``), a translated route, a script prefix. The
middleware asks these functions about the view Django resolved (``process_view``), so every
route to a protected view is guarded by construction.

What counts as one view, as everywhere in failopen: a function, or the class behind an
``as_view()`` (every ``as_view()`` of a class makes a new function; the class is what is routed).
A class's mark is inherited by its subclasses: protection only ever spreads, never shrinks.
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import logging
import threading
import weakref
from collections.abc import Collection, Iterable, Iterator
from typing import Any, TypeVar

from django.urls import URLResolver, get_resolver
from django.urls.resolvers import RegexPattern

from failopen.engine.outage import strictest
from failopen.fallback.settings import OUTAGE_POLICIES
from failopen.providers.settings import check_action

from .allauth import ALLAUTH_VIEWS, allauth_urlpatterns

__all__ = [
    "MARK", "OUTAGE_MARK", "ProtectedViews", "any_outage_marks", "is_marked",
    "marked_view_names", "outage_of", "protect", "unmatched_message", "view_key",
]

logger = logging.getLogger("failopen.django")

#: The attribute ``protect`` sets. Decorators built with ``functools.wraps`` copy it outward,
#: and ``as_view()`` copies it from ``dispatch`` (``method_decorator(protect, name="dispatch")``).
MARK = "failopen_protected"
#: The attribute ``protect(outage=...)`` sets: the view's outage policy.
OUTAGE_MARK = "failopen_outage"
#: The attribute ``protect(action=...)`` sets: the action the view's tokens must carry.
ACTION_MARK = "failopen_action"

View = TypeVar("View")

# Plain functions found inside a protected wrapper: ``protect(never_cache(signup))`` protects
# ``signup`` on every other route too (bare, or wrapped by another decorator before protect
# ran), since a mark set on a wrapper never reaches the function inside. Only module-level
# functions: a method (``View.dispatch``, which ``method_decorator`` wraps in a partial) would
# protect every class-based view.
_inner_protected: weakref.WeakSet[Any] = weakref.WeakSet()
_inner_outage: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
# Whether any view was given an outage policy: until one is, a request judged by its path alone
# needs no URL resolution to learn its view's policy (there is none to learn).
_outage_marks = [False]
# Likewise for protect(action=...): until one is given, no request needs its view resolved for it.
_action_marks = [False]
_ALLAUTH_NAMES = frozenset(ALLAUTH_VIEWS)


def protect(view: Any = None, *, outage: str | None = None, action: str | None = None) -> Any:
    """Require an enforcement token for this view, on every route to it.

    Works on a function view (sync or async), a class-based view class, the result of
    ``as_view()`` (which protects its class), and as ``method_decorator(protect,
    name="dispatch")`` (or on one handler: ``@protect def post``, ``method_decorator(protect,
    name="post")``, which protects the whole view). The protected methods still apply.

    ``@protect(outage="closed")`` (or ``"fallback"``, ``"open"``) also sets what the view does
    while enforcement is off, over ``FAILOPEN["OUTAGE_POLICY"]``; where the view's URL name has a
    policy in ``OUTAGE_POLICY_ROUTES`` too, the stricter one applies.

    ``@protect(action="login")`` names the action the view's tokens must have been minted for
    (reCAPTCHA v3 and Enterprise, Turnstile's ``data-action``), over ``EXPECTED_ACTIONS``: a
    token for another action, or none, is refused.
    """
    if outage is not None and outage not in OUTAGE_POLICIES:
        raise ValueError(f"protect(outage={outage!r}): choose one of "
                         f"{', '.join(OUTAGE_POLICIES)}")
    if action is not None:
        check_action(action)
    if view is None:
        return functools.partial(protect, outage=outage, action=action)
    if not callable(view):
        raise TypeError(f"protect() takes a view, not {type(view).__name__}: {view!r}")
    setattr(view, MARK, True)
    if outage is not None:
        _outage_marks[0] = True
        setattr(view, OUTAGE_MARK, outage)
    if action is not None:
        _action_marks[0] = True
        setattr(view, ACTION_MARK, action)
    inner = _unwrapped(view)
    if inner is not view and inspect.isfunction(inner) and "." not in inner.__qualname__:
        _inner_protected.add(inner)
        if outage is not None:
            _inner_outage[inner] = outage
        if action is not None:
            setattr(inner, ACTION_MARK, action)
    view_class = getattr(view, "view_class", None)
    if view_class is not None:
        setattr(view_class, MARK, True)
        if outage is not None:
            setattr(view_class, OUTAGE_MARK, outage)
        if action is not None:
            setattr(view_class, ACTION_MARK, action)
    return view


def any_action_marks() -> bool:
    """True once ``protect(action=...)`` has marked any view."""
    return _action_marks[0]


def action_of(view: Any) -> str | None:
    """The action ``protect(action=...)`` gave the view (its class, a handler, the function
    inside its decorators); None when none did."""
    inner = _unwrapped(view)
    view_class = view if isinstance(view, type) else getattr(view, "view_class", None)
    handlers = ("dispatch", *getattr(view_class, "http_method_names", ())) \
        if view_class is not None else ()
    found = [getattr(view, ACTION_MARK, None), getattr(inner, ACTION_MARK, None),
             getattr(view_class, ACTION_MARK, None) if view_class is not None else None,
             *(getattr(klass.__dict__.get(name), ACTION_MARK, None)
               for klass in getattr(view_class, "__mro__", ()) for name in handlers)]
    return next((action for action in found if isinstance(action, str)), None)


def any_outage_marks() -> bool:
    """True once ``protect(outage=...)`` has marked any view."""
    return _outage_marks[0]


def outage_of(view: Any) -> str | None:
    """The outage policy ``protect(outage=...)`` gave the view (its class, a handler, the
    function inside its decorators), the strictest where several did; None when none did."""
    inner = _unwrapped(view)
    found = {getattr(view, OUTAGE_MARK, None), getattr(inner, OUTAGE_MARK, None)}
    if inspect.isfunction(inner):
        found.add(_inner_outage.get(inner))
    view_class = view if isinstance(view, type) else getattr(view, "view_class", None)
    if view_class is not None:
        found.add(getattr(view_class, OUTAGE_MARK, None))
        handlers = ("dispatch", *getattr(view_class, "http_method_names", ()))
        found.update(getattr(klass.__dict__.get(name), OUTAGE_MARK, None)
                     for klass in getattr(view_class, "__mro__", ()) for name in handlers)
    policies = {policy for policy in found if isinstance(policy, str)}
    return strictest(policies) if policies else None


def view_key(view: Any) -> Any:
    """What identifies a view: the class behind an ``as_view()``, else the callable itself."""
    return getattr(view, "view_class", None) or view


def _unwrapped(view: Any) -> Any:
    """``view`` with decorators peeled off (``functools.wraps`` leaves ``__wrapped__``)."""
    try:
        return inspect.unwrap(view)
    except Exception:  # a __wrapped__ cycle, or a proxy whose attributes raise: go by the object
        return view


def _identity(view: Any) -> Any:
    """:func:`view_key` without decorators: ``never_cache(login)`` on one route and bare
    ``login`` on another are one view, so naming one route's view protects the other
    (protection only spreads)."""
    return _unwrapped(view_key(view))


def is_marked(view: Any) -> bool:
    """True when ``protect`` was applied to the view, its class, or a ``dispatch`` or handler
    (``post``, ...) of its class or a base class (``view`` may be the class itself, as
    :func:`view_key` gives it)."""
    # The function inside any decorators counts too: ``protect(login)`` also covers a
    # ``csrf_exempt(login)`` made before it (functools.wraps copies attributes only once).
    inner = _unwrapped(view)
    if getattr(view, MARK, False) is True or getattr(inner, MARK, False) is True:
        return True
    if inspect.isfunction(inner) and inner in _inner_protected:
        return True
    view_class = view if isinstance(view, type) else getattr(view, "view_class", None)
    if view_class is None:
        return False
    # A subclass that overrides dispatch stays protected: protection only ever spreads. So does
    # a mark on a handler (``@protect`` on ``post``, or ``method_decorator(protect,
    # name="post")``, Django's documented way to decorate one handler): ignoring it left a view
    # that reads as protected open to every request.
    if getattr(view_class, MARK, False) is True:
        return True
    handlers = ("dispatch", *getattr(view_class, "http_method_names", ()))
    return any(getattr(klass.__dict__.get(name), MARK, False) is True
               for klass in getattr(view_class, "__mro__", ()) for name in handlers)


class ProtectedViews:
    """The views PROTECTED_VIEWS names, found once per URLconf by walking its patterns.

    A name is a URL name with its namespaces (``accounts:login``; instance or application
    namespace) or a dotted path (``accounts.views.login``, ``accounts.views.LoginView``). Every
    route to a named view is protected, including routes that carry no name.
    """

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)
        self._lock = threading.Lock()
        # Keyed by the resolver object: Django makes a new one when the URLconf changes
        # (override_settings(ROOT_URLCONF=...) clears its cache), so this never goes stale.
        self._keys: dict[Any, frozenset[Any]] = {}
        self._names: dict[Any, dict[Any, frozenset[str]]] = {}
        #: False until :meth:`report_unmatched` ran: one attribute read per request after that.
        self.reported = not self.names

    def __bool__(self) -> bool:
        return bool(self.names)

    def covers(self, view: Any, urlconf: Any = None) -> bool:
        """True when ``view`` is one PROTECTED_VIEWS names (in the request's URLconf)."""
        return bool(self.names) and _identity(view) in self.keys(urlconf)

    def keys(self, urlconf: Any = None) -> frozenset[Any]:
        """The named views of one URLconf (None: ROOT_URLCONF)."""
        resolver = get_resolver(urlconf)
        found = self._keys.get(resolver)
        if found is None:
            found = frozenset(key for key, names in walk(resolver) if names & self.names)
            with self._lock:
                if len(self._keys) > 16:  # one per URLconf in use; tests make many
                    self._keys.clear()
                self._keys[resolver] = found
        return found

    def names_of(self, view: Any, urlconf: Any = None) -> frozenset[str]:
        """The PROTECTED_VIEWS names that lead to ``view`` (its outage policy's keys)."""
        if not self.names:
            return frozenset()
        resolver = get_resolver(urlconf)
        by_view = self._names.get(resolver)
        if by_view is None:
            collected: dict[Any, set[str]] = {}
            for found, names in walk(resolver):
                if names & self.names:
                    collected.setdefault(_identity(found), set()).update(names & self.names)
            by_view = {key: frozenset(names) for key, names in collected.items()}
            with self._lock:
                if len(self._names) > 16:
                    self._names.clear()
                self._names[resolver] = by_view
        return by_view.get(_identity(view), frozenset())

    def guards(self, key: Any, urlconf: Any = None) -> bool:
        """True when the view with this :func:`view_key` is marked or named."""
        return is_marked(key) or (bool(self.names) and _identity(key) in self.keys(urlconf))

    def routed(self, urlconf: Any = None) -> frozenset[str]:
        """The listed names that some route of the URLconf carries."""
        seen: set[str] = set()
        for _key, names in walk(get_resolver(urlconf)):
            seen |= names & self.names
        return frozenset(seen)

    def unmatched(self, urlconf: Any = None) -> list[tuple[str, str | None]]:
        """The listed names that no route of the URLconf carries (a typo protects nothing),
        each with the name it probably meant (or None).

        Names of :data:`~.allauth.ALLAUTH_VIEWS` are the exception: the list holds every
        allauth entry point, and an install routes only those its settings enable. One counts
        only when allauth does route its view here, under a name the list does not reach (its
        URLs included under another namespace, or renamed), and that view is unprotected.
        """
        seen: set[str] = set()
        routes: dict[Any, set[str]] = {}
        for key, names in walk(get_resolver(urlconf)):
            seen |= names
            routes.setdefault(key, set()).update(names)
        missing = self.names - seen
        optional = missing & _ALLAUTH_NAMES
        if not optional:
            return [(name, closest_name(name, seen)) for name in sorted(missing)]
        offered = _allauth_views(optional)
        found = []
        for name in sorted(missing):
            if name not in optional:
                found.append((name, closest_name(name, seen)))
            elif offered.get(name) in routes and not self.guards(offered[name], urlconf):
                found.append((name, _closest(name, routes[offered[name]])))
        return found

    def report_unmatched(self) -> None:
        """Log a WARNING for each name ROOT_URLCONF does not carry; once, and never raises.

        The system checks (failopen.W009) never run under gunicorn or uvicorn: the middleware
        calls this on the first request of the process, when the URLconf is in use anyway.
        """
        with self._lock:
            if self.reported:
                return
            self.reported = True
        try:
            unmatched = self.unmatched()
        except Exception:  # the URLconf does not load: Django answers the request with that
            logger.warning("failopen cannot check FAILOPEN['PROTECTED_VIEWS'] against the "
                           "URLconf", exc_info=True)
            return
        for name, meant in unmatched:
            logger.warning("failopen: %s", unmatched_message(name, meant))


def unmatched_message(name: str, meant: str | None) -> str:
    """What to say about a PROTECTED_VIEWS entry that no route carries."""
    message = (f"FAILOPEN['PROTECTED_VIEWS'] entry {name!r} names no view in the URLconf, "
               "so it protects nothing")
    return message if meant is None else f"{message}; did you mean {meant!r}?"


def closest_name(name: str, names: Collection[str]) -> str | None:
    """The route name or dotted path ``name`` probably meant, or None.

    The same URL name under another namespace (or none) first: ``allauth:account_login`` is
    ``account_login`` (django-allauth's URLconf has no namespace); else the closest spelling.
    """
    wanted = name.rpartition(":")[2]
    same = [n for n in names if n != name and n.rpartition(":")[2] == wanted]
    if same:
        return min(same, key=lambda n: (n.count(":"), n))
    close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.75)
    return close[0] if close else None


def _allauth_views(names: Collection[str]) -> dict[str, Any]:
    """``{name: view key}`` for those of ``names`` that allauth's own URLconfs route in this
    install (see :func:`.allauth.allauth_urlpatterns`)."""
    wanted, found = set(names), {}
    try:
        for key, route_names in walk(URLResolver(RegexPattern(r"^/"), allauth_urlpatterns())):
            for name in route_names & wanted:
                found[name] = key
    except Exception:  # allauth's URLconf is broken: the site's own errors say so
        return {}
    return found


def _closest(name: str, names: Collection[str]) -> str | None:
    """Of ``names`` (the names of one view's routes), the URL name most like ``name``; the
    view's dotted path when its routes have no URL name."""
    url_names = sorted(n for n in names if "." not in n) or sorted(names)
    close = difflib.get_close_matches(name, url_names, n=1, cutoff=0.0)
    return close[0] if close else None


def marked_view_names(names: Iterable[str]) -> set[str]:
    """Those of ``names`` (URL names, dotted paths) that lead to a view marked ``@protect``;
    none when the URLconf cannot be read (its own error shows elsewhere)."""
    wanted, found = set(names), set[str]()
    try:
        for view, route_names in walk(get_resolver()):
            if route_names & wanted and is_marked(view):
                found |= route_names & wanted
    except Exception:
        return set()
    return found


def walk(resolver: Any) -> Iterator[tuple[Any, frozenset[str]]]:
    """``(view key, names)`` for every route under ``resolver``: its namespaced URL names
    (instance and application namespaces) and its dotted path."""
    yield from _walk(resolver, (), ())


def _walk(resolver: Any, spaces: tuple[str, ...],
          apps: tuple[str, ...]) -> Iterator[tuple[Any, frozenset[str]]]:
    for child in resolver.url_patterns:
        if isinstance(child, URLResolver):
            yield from _walk(child, (*spaces, child.namespace) if child.namespace else spaces,
                             (*apps, child.app_name) if child.app_name else apps)
            continue
        names = set()
        # A pattern class of its own may have no dotted path: it still has its URL name.
        with contextlib.suppress(Exception):
            names.add(child.lookup_str)
        if child.name:
            names.add(":".join((*spaces, child.name)))
            names.add(":".join((*apps, child.name)))
        yield _identity(child.callback), frozenset(names)
