"""System checks (``manage.py check``): a misconfiguration shows at start-up, not on a request.

=================  ===============================================================================
``failopen.E001``  the settings do not make a valid Config (the message says which and why)
``failopen.E002``  no status URL: failopen can never see an outage, so it never fails open
``failopen.E003``  the status URL is plain http to a host that is not loopback
``failopen.E004``  protected paths or views without the verify settings (VERIFY_URL,
                   PRIVATE_KEY)
``failopen.E005``  REJECT_VIEW cannot be imported or is not callable
``failopen.E006``  a view marked ``@protect(outage="fallback")`` without FALLBACK_SECRET (nor a
                   FALLBACK_VENDOR): no challenge can be issued, so it refuses every request
                   during an outage
``failopen.W001``  a protected path that no URL pattern matches (a typo protects nothing)
``failopen.W002``  override endpoint enabled with the memory: store (only one worker sees it)
``failopen.W003``  FailOpenMiddleware is not in MIDDLEWARE (nothing is protected)
``failopen.W004``  override endpoint enabled, but nobody can authenticate to it
``failopen.W005``  no protected paths or views: the middleware checks nothing (not with
                   PROTECTED_BY_FIELDS: form fields protect)
``failopen.W006``  the failopen URLs are not in the URLconf (no flag endpoint, no script tag)
``failopen.W007``  a protected path covers failopen's own endpoints (an override would need a
                   token from the vendor that is down)
``failopen.W008``  a protected path's view is also routed where no protected path reaches
                   (an alias, a translated URL, a case-insensitive regex): a way around; protect
                   the view instead (``protect`` or PROTECTED_VIEWS)
``failopen.W009``  a PROTECTED_VIEWS name that no route carries (a typo protects nothing); the
                   middleware logs it too, on the first request of each server process. A name
                   of ALLAUTH_VIEWS only when allauth routes its view unprotected, under a name
                   the list misses: the others are features the install does not use
``failopen.W010``  the Redis password sits in FAILOPEN['STORE'] (or FAILOPEN_STORE), which
                   Django's debug page and error e-mails show: use STORE_PASSWORD
``failopen.W011``  the static files finders cannot find the snippet (failopen/failopen.js) or
                   its solver: ``{% failopen_script %}`` would link a 404
``failopen.W012``  a protected path is served by a catch-all view (a CMS's page view, such as
                   Wagtail's ``serve``; a ``<path:...>`` route): protecting the view would
                   protect every page, so keep the path; the hint says when silencing is safe
                   (W008 stays quiet about such a view: every page would be its "alias")
=================  ===============================================================================
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.urls import NoReverseMatch, get_resolver, reverse

from failopen.config import Config
from failopen.exceptions import ConfigError
from failopen.web.snippet import adapter_file

from . import conf, routes
from .protection import ProtectedViews, is_marked, outage_of, unmatched_message, walk
from .startup import exposed_store_passwords

__all__ = ["check_settings", "register"]

_MIDDLEWARE = "failopen.integrations.django.middleware.FailOpenMiddleware"
_WHERE = "set FAILOPEN['{key}'] or the FAILOPEN_{key} environment variable"
# ConfigError messages that have a check of their own, by the start of the message.
# Either spelling: the message names a setting as the user wrote it (dict key or variable).
_SPECIFIC = (
    ("FAILOPEN_STATUS_URL: plain http", "failopen.E003"),
    ("FAILOPEN['STATUS_URL']: plain http", "failopen.E003"),
    ("FAILOPEN_PRIVATE_KEY: required", "failopen.E004"),
    ("FAILOPEN['PRIVATE_KEY']: required", "failopen.E004"),
)


def register() -> None:
    """Register the checks (called from ``AppConfig.ready``)."""
    checks.register(check_settings, "failopen")


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Every failopen check; each message names the setting to change."""
    try:
        raw = conf.raw_settings()
        config = conf.config_factory()
    except ConfigError as exc:
        # Every problem, one message each: an unknown key hides none of the bad values.
        return [_invalid(message) for message in conf.problems() or [str(exc)]]
    errors = [_invalid(message) for message in conf.misplaced_settings()]
    try:
        conf.reject_view_from(raw)
    except ConfigError as exc:
        errors.append(checks.Error(str(exc), id="failopen.E005",
                                   hint="Use the dotted path of a view(request, decision)."))
    errors += [checks.Warning(line, id="failopen.W010",
                              hint="FAILOPEN['STORE'] = 'redis://host:6379/0' and "
                                   "FAILOPEN['STORE_PASSWORD'] = os.environ['REDIS_PASSWORD']")
               for line in exposed_store_passwords(raw)]
    return errors + _check_config(config)


def _invalid(message: str) -> checks.CheckMessage:
    check_id = next((i for start, i in _SPECIFIC if message.startswith(start)), "failopen.E001")
    return checks.Error(f"failopen settings are invalid: {message}", id=check_id,
                        hint="Fix the setting named above.")


def _check_config(config: Config) -> list[checks.CheckMessage]:
    found: list[checks.CheckMessage] = []
    named = ProtectedViews(config.protected_views)
    marked = _marked_views()
    if config.sees_no_outage:
        found.append(checks.Error(
            "failopen has no status URL: it cannot see an outage, so it never fails open.",
            hint=_WHERE.format(key="STATUS_URL") if config.provider.publishes_status else
            f"{config.provider.title} publishes no status page: set FAILOPEN['EVIDENCE'] = "
            "'probe' (the verify probe alone; see the vendor's page in the manual)",
            id="failopen.E002"))
    protects = config.protected_paths or config.protected_views or marked
    if protects and config.verify_url is None:
        found.append(checks.Error(
            "failopen protects routes (PROTECTED_PATHS, PROTECTED_VIEWS or @protect) but "
            "VERIFY_URL is not set: no token can be verified.",
            hint=_WHERE.format(key="VERIFY_URL") + " (and PRIVATE_KEY)", id="failopen.E004"))
    if not protects and not config.protected_by_fields:
        found.append(checks.Warning(
            "no protected paths or views: the middleware protects nothing.",
            hint="Decorate the log-in and sign-up views with "
                 "@failopen.integrations.django.protect, or list them in "
                 "FAILOPEN['PROTECTED_VIEWS'] (or their paths in PROTECTED_PATHS); where only "
                 "form fields protect, FAILOPEN['PROTECTED_BY_FIELDS'] = True.",
            id="failopen.W005"))
    for name, meant in _unmatched(named):
        found.append(checks.Warning(
            unmatched_message(name, meant),
            hint="List URL names with their namespace (accounts:login) or dotted paths of "
                 "views (accounts.views.LoginView).", id="failopen.W009"))
    for path in config.protected_paths:
        if not routes.prefix_is_routed(path):
            found.append(checks.Warning(
                f"protected path {path!r} matches no URL pattern.",
                hint="Check FAILOPEN['PROTECTED_PATHS'] against urls.py (prefixes, with the "
                     "trailing slash if the URL has one).", id="failopen.W001"))
    if config.override_endpoint:
        found += _check_override(config)
    found += _check_own_urls(config)
    found += _check_aliases(config) + _check_catch_alls(config)
    # A second vendor (FALLBACK_VENDOR) answers fallback routes without the secret.
    if config.fallback_secret is None and config.fallback_vendor is None \
            and _marked_fallback_views():
        found.append(checks.Error(
            'a view is marked @protect(outage="fallback") but FALLBACK_SECRET is not set: '
            "no challenge can be issued, so the view refuses every request during an outage.",
            hint=_WHERE.format(key="FALLBACK_SECRET") + " (at least 32 characters; "
                 'pip install "failopen[fallback]")', id="failopen.E006"))
    if _MIDDLEWARE not in getattr(settings, "MIDDLEWARE", ()):
        found.append(checks.Warning(
            "FailOpenMiddleware is not in MIDDLEWARE: no request is checked.",
            hint=f"Add {_MIDDLEWARE!r} to MIDDLEWARE.", id="failopen.W003"))
    return found + _check_snippet_files(config)


def _check_snippet_files(config: Config) -> list[checks.CheckMessage]:
    """W011: {% failopen_script %} would link a file the static finders cannot find (so
    ``collectstatic`` would not collect it, and the page would get a 404 in production): the
    snippet, its solver, and the adapters of the configured vendor and of the second vendor."""
    if not apps.is_installed("django.contrib.staticfiles"):
        return []  # static files served some other way: nothing here can tell
    from django.contrib.staticfiles import finders

    missing = []
    adapters = {adapter_file(vendor) or "" for vendor in (config.vendor, config.fallback_vendor)
                if vendor is not None} - {""}
    for name in ("failopen/failopen.js", "failopen/failopen-solver.js",
                 *(f"failopen/{adapter}" for adapter in sorted(adapters))):
        try:
            if not finders.find(name):
                missing.append(name)
        except Exception:  # a broken finder setting has Django's own checks
            return []
    if not missing:
        return []
    return [checks.Warning(
        f"the static files finders cannot find {', '.join(missing)}: the script tag would "
        "link a file that collectstatic does not collect (a 404 for the snippet).",
        hint="Add 'failopen.integrations.django' to INSTALLED_APPS (found by "
             "AppDirectoriesFinder, Django's default), or add "
             "'failopen.integrations.django.finders.SnippetFinder' to STATICFILES_FINDERS.",
        id="failopen.W011")]


def _check_override(config: Config) -> list[checks.CheckMessage]:
    from django.apps import apps

    found: list[checks.CheckMessage] = []
    if config.store.startswith("memory:"):
        found.append(checks.Warning(
            "the override endpoint writes to the memory: store, which only the worker that "
            "answered sees.",
            hint=_WHERE.format(key="STORE") + " to a store every worker reads: "
                 "file:///path/on/a/shared/disk.",
            id="failopen.W002"))
    # Staff sign in through request.user, which AuthenticationMiddleware (or a subclass) sets.
    sessions = apps.is_installed("django.contrib.auth") and any(
        m.endswith("AuthenticationMiddleware") for m in getattr(settings, "MIDDLEWARE", ()))
    if config.admin_token is None and not sessions:
        found.append(checks.Warning(
            "the override endpoint is enabled but nobody can authenticate to it (no ADMIN_TOKEN, "
            "and no staff sign-in: django.contrib.auth with AuthenticationMiddleware).",
            hint=_WHERE.format(key="ADMIN_TOKEN"), id="failopen.W004"))
    return found


def _check_own_urls(config: Config) -> list[checks.CheckMessage]:
    try:
        flag_url = reverse("failopen:flag")
        override_url = reverse("failopen:override")
    except NoReverseMatch:
        return [checks.Warning(
            "the failopen URLs are not in the URLconf: browsers cannot read the flag, and "
            "{% failopen_script %} renders nothing.",
            hint='Add path("failopen/", include("failopen.integrations.django.urls")) to '
                 "urls.py.", id="failopen.W006")]
    except Exception:  # a broken URLconf has checks of its own
        return []
    covered = [url for url, method, used in ((flag_url, "GET", True),
                                              (override_url, "POST", config.override_endpoint))
               if used and config.is_protected(method, url)]
    if not covered:
        return []
    return [checks.Warning(
        f"FAILOPEN['PROTECTED_PATHS'] covers failopen's own {', '.join(covered)}: it would "
        "need an enforcement token, which is what an outage takes away.",
        hint="Narrow PROTECTED_PATHS to the views that need a token (the log-in and sign-up "
             "URLs).", id="failopen.W007")]


def _check_aliases(config: Config) -> list[checks.CheckMessage]:
    named = ProtectedViews(config.protected_views)
    try:
        aliases = routes.unguarded_aliases(config, guarded=named.guards)
    except Exception:  # a broken URLconf has checks of its own
        return []
    return [checks.Warning(
        f"the view of protected path {path!r} is also routed at {route!r}, which no protected "
        "path covers: requests there reach it unchecked.",
        hint="Protect the view instead of its paths: decorate it with "
             "@failopen.integrations.django.protect or list it in FAILOPEN['PROTECTED_VIEWS'] "
             "(every route to it is then guarded); or add that route's prefix to "
             "PROTECTED_PATHS.",
        id="failopen.W008") for path, route in aliases]


def _check_catch_alls(config: Config) -> list[checks.CheckMessage]:
    named = ProtectedViews(config.protected_views)
    try:
        found = routes.catch_all_paths(config, guarded=named.guards)
    except Exception:  # a broken URLconf has checks of its own
        return []
    return [checks.Warning(
        f"protected path {path!r} is served by a catch-all view ({view}), which answers every "
        "path under it: the URLconf cannot show whether another URL reaches the same page.",
        hint="Keep the path in FAILOPEN['PROTECTED_PATHS']; protecting the view instead would "
             "protect every page it serves. Silence this warning (SILENCED_SYSTEM_CHECKS = "
             "['failopen.W012']) once you know the page has no other URL: no alias of the page, "
             "no other site or locale serving it (another case of its slug, which MySQL "
             "finds too, is covered); else list those URLs in PROTECTED_PATHS too.",
        id="failopen.W012") for path, view in found]


def _marked_views() -> bool:
    """True when some route of the URLconf leads to a view marked with ``protect``."""
    try:
        return any(is_marked(view) for view, _ in walk(get_resolver()))
    except Exception:  # a broken URLconf has checks of its own
        return False


def _marked_fallback_views() -> bool:
    """True when some route of the URLconf leads to a view marked ``protect(outage="fallback")``."""
    try:
        return any(outage_of(view) == "fallback" for view, _ in walk(get_resolver()))
    except Exception:  # a broken URLconf has checks of its own
        return False


def _unmatched(named: ProtectedViews) -> list[tuple[str, str | None]]:
    try:
        return named.unmatched() if named else []
    except Exception:  # a broken URLconf has checks of its own
        return []
