"""``manage.py failopen check``'s own line, ``django_views``: the protected views as the
middleware will find them in the URLconf, which the settings alone cannot say.

* views marked ``@protect`` (with their ``outage=`` policy), found by walking the URLconf;
* ``PROTECTED_VIEWS``: how many names some route carries, how many are entry points this install
  does not route (allauth's, of features it leaves off), and the names that no route carries
  (a typo protects nothing; failopen.W009);
* ``PROTECTED_PATHS`` that no URL pattern matches (failopen.W001);
* ``FailOpenMiddleware`` missing from ``MIDDLEWARE`` (failopen.W003): nothing is checked;
* a view marked ``@protect(outage="fallback")`` without ``FALLBACK_SECRET`` (failopen.E006): it
  refuses every request during an outage, so it is a problem, as its system check is an error;
* nothing protected (no ``@protect`` view, ``PROTECTED_VIEWS`` or ``PROTECTED_PATHS``): a
  problem (issue 31, item 12), unless ``PROTECTED_BY_FIELDS`` says form fields protect.

One walk of the URLconf, no request, no database. ``manage.py check --deploy`` still has the
rest of failopen's system checks (aliases, the override endpoint, the snippet's URLs).
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import contextlib
import os
from typing import Any

from django.conf import settings
from django.urls import get_resolver

from failopen.cli.preflight import Check, Status
from failopen.cli.preflight_settings import nothing_protected
from failopen.config import Config
from failopen.exceptions import ConfigError
from failopen.secret import Secret
from failopen.stores import split_password

from . import conf, routes
from .protection import ProtectedViews, is_marked, outage_of, walk

__all__ = ["DJANGO_VIEWS", "DjangoViews"]

_MIDDLEWARE = "failopen.integrations.django.middleware.FailOpenMiddleware"
_SECRET_KEYS = ("PRIVATE_KEY", "ADMIN_TOKEN", "STORE_PASSWORD", "FALLBACK_SECRET")
_MAX_SHOWN = 12


def _name(names: frozenset[str]) -> str:
    """The name a reader knows a view by: its URL name, else its dotted path."""
    return min(names, key=lambda n: ("." in n, len(n), n)) if names else "an unnamed view"


def _listed(items: list[str]) -> str:
    more = len(items) - _MAX_SHOWN
    return ", ".join(items[:_MAX_SHOWN]) + (f" and {more} more" if more > 0 else "")


class DjangoViews:
    """The ``django_views`` line of ``manage.py failopen check``."""

    #: This line, not the settings' one, says whether anything is protected: it sees @protect.
    judges_protection = True

    def __call__(self, config: Config | None) -> list[Check]:
        """Walk the URLconf: the marked views, and the settings' views and paths found there."""
        try:
            found = list(walk(get_resolver()))
        except Exception as exc:  # the URLconf's own error is Django's to show
            return [Check("django_views", "problem",
                          f"the URLconf cannot be loaded ({type(exc).__name__}): run manage.py "
                          "check", {"loaded": False})]
        marked: dict[Any, set[str]] = {}
        for view, names in found:
            if is_marked(view):
                marked.setdefault(view, set()).update(names)
        shown = sorted(f"{_name(frozenset(n))} ({outage_of(v) or 'default policy'})"
                       for v, n in marked.items())
        named = ProtectedViews(config.protected_views if config is not None else ())
        unmatched = named.unmatched() if named else []
        routed = named.routed() if named else frozenset()
        # Neither routed nor a typo: allauth entry points of features this install leaves off.
        absent = sorted(named.names - routed - {name for name, _ in unmatched})
        paths = config.protected_paths if config is not None else ()
        unrouted = [p for p in paths if not routes.prefix_is_routed(p)]
        middleware = _MIDDLEWARE in getattr(settings, "MIDDLEWARE", ())
        facts = {"loaded": True, "middleware": middleware,
                 "marked": [{"view": _name(frozenset(n)), "outage": outage_of(v)}
                            for v, n in sorted(marked.items(), key=lambda i: _name(
                                frozenset(i[1])))],
                 "named": sorted(named.names), "routed": sorted(routed),
                 "not_on_this_install": absent,
                 "unmatched": [{"name": n, "did_you_mean": m} for n, m in unmatched],
                 "unrouted_paths": unrouted}
        parts = [f"@protect marks {len(marked)} view{'' if len(marked) == 1 else 's'}"
                 + (f": {_listed(shown)}" if shown else "")]
        if named:
            counts = [f"{len(routed)} routed", f"{len(absent)} not on this install" if absent
                      else "", f"{len(unmatched)} naming no view" if unmatched else ""]
            parts.append("PROTECTED_VIEWS: " + ", ".join(c for c in counts if c))
        problems, warnings = [], []
        if config is not None and config.fallback_secret is None and any(
                outage_of(v) == "fallback" for v in marked):
            problems.append('a view is marked @protect(outage="fallback") but FALLBACK_SECRET '
                            "is not set: it refuses every request during an outage")
        for name, meant in unmatched:
            warnings.append(f"PROTECTED_VIEWS entry {name!r} names no view in the URLconf"
                            + (f" (did you mean {meant!r}?)" if meant else ""))
        for path in unrouted:
            warnings.append(f"protected path {path!r} matches no URL pattern")
        if not middleware:
            warnings.append(f"{_MIDDLEWARE} is not in MIDDLEWARE: no request is checked")
        if not marked and not named and not paths and not (
                config is not None and config.protected_by_fields):
            problems.append(nothing_protected(
                os.environ, fix="Decorate the log-in and sign-up views with @protect, or name "
                'them in FAILOPEN["PROTECTED_VIEWS"] (or their paths in '
                'FAILOPEN["PROTECTED_PATHS"])', fields='FAILOPEN["PROTECTED_BY_FIELDS"] = True'))
        status: Status = "problem" if problems else "warning" if warnings else "ok"
        return [Check("django_views", status, "; ".join(parts + problems + warnings), facts)]

    def secrets(self) -> list[str]:
        """The secret values of ``settings.FAILOPEN`` (kept out of the output even when the
        settings are too broken to build a Config)."""
        try:
            raw = conf.raw_settings()
        except ConfigError:
            return []
        values = [raw.get(key) for key in _SECRET_KEYS]
        store = raw.get("STORE")
        if isinstance(store, str):
            with contextlib.suppress(ConfigError):  # Config names that error
                values.append(split_password(store)[1])
        return [v.reveal() if isinstance(v, Secret) else v for v in values
                if isinstance(v, (str, Secret))]


#: What the management command passes to ``failopen check``.
DJANGO_VIEWS = DjangoViews()
