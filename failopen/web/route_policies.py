"""Which protected route a request counts under, and what that route does during an outage.

``FAILOPEN_OUTAGE_POLICY_ROUTES`` names routes as ``FAILOPEN_PROTECTED_PATHS`` spells them
(``/login=open,/signup=fallback``); Django names views as ``PROTECTED_VIEWS`` does. A request
path matches a protected path the way ``Config.protects_path`` says (a prefix, ``/signup`` for
``/signup/``, and every spelling a router may treat as the same). Where a path could count under
two routes, it gets the stricter policy: a spelling never loosens a route.

The route a request counts under is also the outage rate limit's key, so ``/login//`` and
``/login`` share one limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from failopen._internal.paths import ODD_CHARACTER, folded, request_paths, spellings
from failopen.engine.outage import strictest

__all__ = ["SOLUTION_FIELD", "SOLUTION_HEADER", "RoutePolicies", "asked_paths"]

#: Where a fallback route's solution travels: the form (or JSON) field the ALTCHA widget and
#: failopen's snippet send, or this header (for clients that post JSON of their own).
SOLUTION_FIELD = "altcha"
SOLUTION_HEADER = "X-Altcha"


def asked_paths(asked: str | None, mount: str = "") -> tuple[str, str] | None:
    """``(path, routed)`` of the request a form posting to ``asked`` makes: the flag endpoint's
    ``?path=``, a form's action as the browser reads it (percent-encoded, the mount prefix in
    front). ``path`` is decoded as the server decodes it; ``routed`` is ``path`` without
    ``mount`` (the flag request's own ``SCRIPT_NAME``, ``root_path`` or Django's script prefix),
    the path the app routes on. None when ``asked`` is no path (absent, or not from ``/``).
    """
    if not asked or not asked.startswith("/"):
        return None
    return request_paths(asked, mount)


class RoutePolicies:
    """The outage policy of each protected route (built once per configuration)."""

    def __init__(self, protected_paths: Iterable[str], *, default: str = "open",
                 routes: Mapping[str, str] | None = None) -> None:
        self.default = default
        self.routes = dict(routes or {})
        self._paths = tuple(protected_paths)
        # "/signup/" protects "/signup" too (Config._exact).
        self._exact = {p.rstrip("/"): p for p in self._paths if len(p) > 1 and p.endswith("/")}
        # Another case (or accent) of a route is that route (Config.protects_path).
        self._folded = tuple((folded(p), p) for p in self._paths)
        self._folded_exact = {folded(short): p for short, p in self._exact.items()}

    @classmethod
    def from_config(cls, config: object) -> RoutePolicies:
        """From a Config's protected paths, ``outage_policy`` and ``outage_policy_routes``."""
        return cls(getattr(config, "protected_paths", ()),
                   default=getattr(config, "outage_policy", "open"),
                   routes=dict(getattr(config, "outage_policy_routes", ())))

    def __repr__(self) -> str:
        return f"RoutePolicies(default={self.default!r}, routes={self.routes!r})"

    @property
    def all_open(self) -> bool:
        """True when every route is ``open`` (the default, and no route names another)."""
        return self.default == "open" and not self.routes

    def policy_of(self, route: str) -> str:
        """A configured route's policy (the default when it names none)."""
        return self.routes.get(route, self.default)

    def for_path(self, path: str, *others: str) -> tuple[str, str] | None:
        """``(route, policy)`` for a request path, or None when no protected path matches it.

        ``others``: the same request's other spellings an app may route on (the path without
        its root_path or SCRIPT_NAME): the routes of all of them count, so the stricter wins.
        """
        matched = self._matched(path)
        for other in others:
            if other != path:
                matched |= self._matched(other)
        if not matched:
            return None
        policy = strictest({self.policy_of(route) for route in matched})
        # The most specific of the routes that carry that policy names the rate limit's key.
        route = max((r for r in matched if self.policy_of(r) == policy), key=lambda r: (len(r), r))
        return route, policy

    def for_asked(self, asked: str | None, mount: str = "") -> tuple[str, str] | None:
        """``(route, policy)`` for the path the flag endpoint's ``?path=`` asks about (a form's
        action as the browser reads it: percent-encoded, the mount prefix in front), looked up
        as the guard judges a request there: decoded as the server decodes it, with and without
        ``mount`` (the flag request's own ``SCRIPT_NAME`` or ``root_path``). None when no
        protected path matches it, or the value is no path at all.
        """
        paths = asked_paths(asked, mount)
        return self.for_path(*paths) if paths is not None else None

    def for_views(self, names: Iterable[str], *, marked: str | None = None) -> str:
        """A Django view's policy: the strictest of its names' (``PROTECTED_VIEWS``) and of
        ``@protect(outage=...)`` (``marked``); the default when none names one."""
        named = {self.routes[name] for name in names if name in self.routes}
        if marked is not None:
            named.add(marked)
        return strictest(named) if named else self.default

    def _matched(self, path: str) -> set[str]:
        candidates = {path}
        if ODD_CHARACTER.search(path) is not None or "//" in path or "/." in path:
            candidates |= spellings(path)
        matched: set[str] = set()
        for candidate in candidates:
            matched.update(p for p in self._paths if candidate.startswith(p))
            exact = self._exact.get(candidate)
            if exact is not None:
                matched.add(exact)
            fold = folded(candidate)
            matched.update(p for f, p in self._folded if fold.startswith(f))
            exact = self._folded_exact.get(fold)
            if exact is not None:
                matched.add(exact)
        return matched
