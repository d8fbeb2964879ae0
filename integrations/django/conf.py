"""Settings, read lazily, and the one process-wide :class:`~failopen.FailOpen`.

``settings.FAILOPEN`` is read on first use, not at import, and dropped again when Django's
``setting_changed`` signal names it, so ``override_settings(FAILOPEN=...)`` works in tests. The
middleware asks :func:`loaded` per request: after the first call that is one global read.
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import difflib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from failopen.config import Config, closest_setting, setting_names
from failopen.engine.guard import Decision, fail_closed
from failopen.exceptions import ConfigError
from failopen.fallback.settings import policy_routes
from failopen.runtime import FailOpen
from failopen.web import RoutePolicies

from .._shared import METHODS
from .protection import ProtectedViews, marked_view_names
from .startup_line import announce_runtime

__all__ = [
    "DJANGO_KEYS",
    "Loaded",
    "as_written",
    "config",
    "config_factory",
    "known_keys_factory",
    "connect_signals",
    "loaded",
    "misplaced_settings",
    "problems",
    "reset",
    "runtime",
    "set_aside",
    "unavailable",
    "unknown_keys",
]

logger = logging.getLogger("failopen.django")

#: Keys of ``settings.FAILOPEN`` that only the Django adapter reads (not Config fields).
DJANGO_KEYS = frozenset({"REJECT_VIEW"})

_VARIABLE_PREFIX = "FAILOPEN_"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_PROTECTION_KEYS = ("PROTECTED_PATHS", "PROTECTED_VIEWS", "PROTECTED_METHODS")
# A runtime that failed to build is retried at most this often, not on every request.
_RETRY_BUILD = 1.0

RejectView = Callable[..., Any]


@dataclass(frozen=True)
class Loaded:
    """What the middleware needs per request, computed once per settings value."""

    config: Config | None
    is_protected: Callable[[str, str], bool]
    protects_method: Callable[[str], bool]
    views: ProtectedViews
    token_meta_key: str = ""
    reject_view: RejectView | None = None
    error: str | None = None
    #: What each protected path or view does while enforcement is off.
    policies: RoutePolicies = field(default_factory=lambda: RoutePolicies(()))
    #: The methods, as Django spells them, that neither a path nor a view is protected for
    #: (GET, when only POST is): a request with one skips every check. Worked out from the two
    #: tests above, never given.
    unguarded_methods: frozenset[str] = field(init=False, default=frozenset())

    def __post_init__(self) -> None:
        # ``is_protected`` at a listed path (protected by its own prefix) says whether the
        # method is; at "/" it answers the fallback that guards every method but the safe ones.
        paths = (*(self.config.protected_paths if self.config is not None else ()), "/")
        object.__setattr__(self, "unguarded_methods", frozenset(
            method for method in METHODS if not self.protects_method(method)
            and not any(self.is_protected(method, path) for path in paths)))


def method_test(methods: frozenset[str]) -> Callable[[str], bool]:
    """True for a protected method: any case counts, and HEAD wherever GET does (as
    ``Config.is_protected``: Django runs the GET view for HEAD)."""
    def protects(method: str) -> bool:
        if method in methods:
            return True
        method = method.upper()
        return method in methods or (method == "HEAD" and "GET" in methods)
    return protects


def raw_settings() -> dict[str, Any]:
    """``settings.FAILOPEN`` as a dict (empty when unset)."""
    value = getattr(settings, "FAILOPEN", None)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"FAILOPEN: expected a dict, got {type(value).__name__}")
    return dict(value)


def unknown_keys(raw: Mapping[str, Any]) -> str | None:
    """What is wrong with the keys of ``settings.FAILOPEN`` that failopen does not read, each
    with the key it probably meant (``'STATUS_ULR' (did you mean 'STATUS_URL'?)``); None when
    every key is one it reads."""
    known = {*setting_names(), *DJANGO_KEYS}
    found = []
    for key in raw:
        if isinstance(key, str) and key in known:
            continue
        if not isinstance(key, str):
            found.append(f"{key!r} (keys are strings)")
            continue
        wanted = key.upper().removeprefix("FAILOPEN_")
        close = difflib.get_close_matches(wanted, sorted(known), n=1, cutoff=0.75)
        meant = wanted if wanted in known else close[0] if close else None
        found.append(f"{key!r} (did you mean {meant!r}?)" if meant else repr(key))
    if not found:
        return None
    known_list = "" if all("did you mean" in f for f in found) else (
        f"; known: {', '.join(sorted(known))}")
    return f"settings.FAILOPEN: unknown failopen setting(s): {'; '.join(found)}{known_list}"


def config_factory(**overrides: Any) -> Config:
    """A Config from ``settings.FAILOPEN`` (then ``FAILOPEN_*`` variables); keywords win. An
    unknown key is an error (a typo must not silently drop a setting)."""
    raw = raw_settings()
    problem = unknown_keys(raw)
    if problem is not None:
        raise ConfigError(problem)
    return _built(raw, overrides)


def misplaced_settings() -> list[str]:
    """``settings.FAILOPEN_STATUS_URL`` and kin: failopen reads none of them; say where to go."""
    found: list[str] = []
    names = [n for n in dir(settings) if n.isupper()]
    known = setting_names()
    for name in names:
        if not name.startswith(_VARIABLE_PREFIX):
            continue
        key = name.removeprefix(_VARIABLE_PREFIX)
        meant = key if key in known else closest_setting(key)
        if meant is not None:  # anything else may be the site's own setting
            found.append(
                f"settings.{name} is not read by failopen; move it into the FAILOPEN dict as "
                f"FAILOPEN[{meant!r}] (or set the {_VARIABLE_PREFIX}{meant} environment variable)")
    if "FAILOPEN" not in names:
        close = difflib.get_close_matches("FAILOPEN", names, n=1, cutoff=0.8)
        if close and not close[0].startswith(_VARIABLE_PREFIX):
            found.append(f"settings.{close[0]} is not read by failopen; did you mean FAILOPEN?")
    return found


def known_keys_factory(**overrides: Any) -> Config:
    """:func:`config_factory` with the unknown keys set aside, so that ``failopen check`` can
    check every other setting too; :func:`set_aside` says what was."""
    return _built(raw_settings(), overrides)


def set_aside() -> list[str]:
    """What :func:`known_keys_factory` leaves out: the unknown keys of ``settings.FAILOPEN``,
    and settings written beside it (``settings.FAILOPEN_STATUS_URL``) that it never reads."""
    try:
        problem = unknown_keys(raw_settings())
    except ConfigError:  # not a dict: the factory says so
        problem = None
    return [*([] if problem is None else [problem]), *misplaced_settings()]


# ``failopen check`` asks a factory what it set aside (failopen.cli.preflight_settings).
known_keys_factory.set_aside = set_aside  # type: ignore[attr-defined]


def problems() -> list[str]:
    """Everything wrong with the settings, each saying what to change (up to ten bad values,
    as ``failopen check`` finds them, after the unknown keys); empty when they are usable."""
    from failopen.cli.preflight_settings import check_configuration  # start-up only

    return check_configuration(known_keys_factory, os.environ)[2]


def _built(raw: Mapping[str, Any], overrides: dict[str, Any]) -> Config:
    known = set(setting_names())
    core = {k: v for k, v in raw.items() if isinstance(k, str) and k in known}
    try:
        return Config.from_mapping(core, **_with_marked_views(core, overrides))
    except ConfigError as exc:
        message = as_written(str(exc), core)
        if "is not a protected route" in message:
            message += "; in Django, also the URL name of a view marked @protect"
        raise ConfigError(message) from None


# A variable's name, unless the text means the variable itself ("the environment variable
# FAILOPEN_<NAME>", "the FAILOPEN_<NAME> environment variable", "did you mean FAILOPEN_<NAME>"
# after one) or a top-level Django setting ("settings.FAILOPEN_<NAME>").
_VARIABLE = re.compile(r"(?<!settings\.)(?<!variable )(?<!did you mean )"
                       r"\bFAILOPEN_([A-Z][A-Z0-9_]*)\b(?! environment variable)")


def as_written(message: str, given: Mapping[str, Any] | None = None) -> str:
    """``message`` naming each setting as the user wrote it: ``FAILOPEN['POLL_INTERVAL']`` for
    a key of ``settings.FAILOPEN`` (``given``; None: the current settings), the variable's name
    for one read from the environment or left unset. The core names settings as variables; a
    Django site reads them here. A name the text means as a variable (an ignored variable, a
    top-level setting to move) stays as it is."""
    if given is None:
        try:
            given = raw_settings()
        except ConfigError:
            given = {}
    fields = set(setting_names())
    message = _VARIABLE.sub(lambda m: f"FAILOPEN['{m.group(1)}']"
                            if m.group(1) in given and m.group(1) in fields else m.group(0),
                            message)
    head, colon, rest = message.partition(": ")
    if colon and head in given:  # a value's type error names the key bare: "POLL_INTERVAL: ..."
        message = f"FAILOPEN['{head}']: {rest}"
    return message


def _with_marked_views(core: Mapping[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides``, plus PROTECTED_VIEWS naming the ``@protect`` views that
    OUTAGE_POLICY_ROUTES names by URL name: such a view is protected on every route already, and
    listing it is how its name reaches the policy lookup (and Config's check that every policy
    belongs to a protected route)."""
    routes = overrides.get("outage_policy_routes", core.get(
        "OUTAGE_POLICY_ROUTES", os.environ.get("FAILOPEN_OUTAGE_POLICY_ROUTES")))
    try:
        names = {route for route, _policy in policy_routes(routes or ())
                 if not route.startswith("/")}
    except ConfigError:
        return overrides  # Config says what is wrong with them
    marked = marked_view_names(names) if names else set()
    if not marked:
        return overrides
    listed = Config.from_mapping(core, **{**overrides, "outage_policy_routes": ()})
    views = (*listed.protected_views, *sorted(marked - set(listed.protected_views)))
    return {**overrides, "protected_views": views}


def reject_view_from(raw: Mapping[str, Any]) -> RejectView | None:
    """The ``REJECT_VIEW`` callable (a dotted path or the callable itself), or None."""
    value = raw.get("REJECT_VIEW")
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError as exc:
            raise ConfigError(f"FAILOPEN['REJECT_VIEW']: cannot import it ({exc})") from None
    if not callable(value):
        raise ConfigError("FAILOPEN['REJECT_VIEW']: expected a view, view(request, decision)")
    return value  # type: ignore[no-any-return]


def _load() -> Loaded:
    try:
        raw = raw_settings()
        cfg = config_factory()
        unread = misplaced_settings()
        if unread:  # a server refuses to start on them; under manage.py (runserver
            # --skip-checks, testserver) protected requests are refused, as for a broken setting
            raise ConfigError("; ".join(unread))
        header = cfg.token_header.upper().replace("-", "_")
        return Loaded(config=cfg, is_protected=cfg.is_protected,
                      protects_method=method_test(cfg.protected_methods),
                      views=ProtectedViews(cfg.protected_views),
                      token_meta_key=f"HTTP_{header}", reject_view=reject_view_from(raw),
                      policies=RoutePolicies.from_config(cfg))
    except Exception as exc:  # a broken setting must not break the site: see _fallback
        logger.error("failopen settings unusable; protected routes answer 503: %s", exc)
        return _fallback(str(exc))


def _fallback(error: str) -> Loaded:
    """Which requests to refuse while the settings are broken: the protected ones if readable."""
    try:
        raw = raw_settings()
    except ConfigError:
        raw = {}
    subset = {k: raw[k] for k in _PROTECTION_KEYS if k in raw}
    for key in _PROTECTION_KEYS:  # settings.FAILOPEN_PROTECTED_PATHS says what was meant
        if key not in subset and hasattr(settings, _VARIABLE_PREFIX + key):
            subset[key] = getattr(settings, _VARIABLE_PREFIX + key)
    environ = {k: v for k, v in os.environ.items()
               if k in {"FAILOPEN_" + key for key in _PROTECTION_KEYS}}
    try:
        if unknown_keys(raw) is not None:  # "PROTECTED_PATH": it may have meant to protect
            raise ConfigError("unknown keys")
        cfg = Config.from_mapping(subset, environ=environ)
        return Loaded(config=None, is_protected=cfg.is_protected,
                      protects_method=method_test(cfg.protected_methods),
                      views=ProtectedViews(cfg.protected_views), error=error)
    except ConfigError:
        # Not even the protected routes are known: fail closed on anything that writes.
        return Loaded(config=None, is_protected=lambda method, path: method not in _SAFE_METHODS,
                      protects_method=lambda method: method not in _SAFE_METHODS,
                      views=ProtectedViews(()), error=error)


_lock = threading.RLock()  # runtime() reads loaded() while holding it
_loaded: Loaded | None = None
_runtime: FailOpen | None = None
_runtime_error: tuple[float, str] | None = None


def loaded() -> Loaded:
    """The current settings, loaded on first use. Never raises."""
    current = _loaded
    if current is None:
        with _lock:
            current = _loaded if _loaded is not None else _store_loaded(_load())
    return current


def _store_loaded(value: Loaded) -> Loaded:
    global _loaded
    _loaded = value
    return value


def config() -> Config:
    """The current Config; ConfigError (message without secrets) when the settings are broken."""
    current = loaded()
    if current.config is None:
        raise ConfigError(current.error or "failopen settings unusable")
    return current.config


def runtime() -> FailOpen:
    """This process's FailOpen, built on first use (no thread, no I/O until a decision)."""
    global _runtime, _runtime_error
    current = _runtime
    if current is not None:
        return current
    with _lock:
        if _runtime is not None:
            return _runtime
        failed = _runtime_error
        if failed is not None and time.monotonic() - failed[0] < _RETRY_BUILD:
            raise ConfigError(failed[1])
        try:
            _runtime = FailOpen(config())
        except Exception as exc:
            _runtime_error = (time.monotonic(), f"failopen cannot start: {as_written(str(exc))}")
            logger.error("%s", _runtime_error[1])
            raise ConfigError(_runtime_error[1]) from None
        _runtime_error = None
        try:
            announce_runtime(_runtime)
        except Exception:  # a log line must never cost the request
            logger.exception("failopen: the start-up line failed")
        return _runtime


def reset() -> None:
    """Forget the settings and stop this process's runtime; the next use reads them again."""
    global _loaded, _runtime, _runtime_error
    with _lock:
        old, _loaded, _runtime, _runtime_error = _runtime, None, None, None
    if old is not None:
        old.stop()


def unavailable(retry_after: int = 5) -> Decision:
    """The decision for a protected request while failopen itself cannot decide: refuse, 503."""
    return fail_closed("failopen is misconfigured or could not start", retry_after=retry_after)


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "FAILOPEN":
        reset()


def connect_signals() -> None:
    """Re-read the settings whenever ``FAILOPEN`` changes (``override_settings``)."""
    setting_changed.connect(_on_setting_changed, dispatch_uid="failopen.django.conf")
