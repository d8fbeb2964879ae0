"""Turning settings into Config field values, and checking each field on its own.

A setting arrives as an environment string or as a Python value from Django's ``FAILOPEN`` dict;
:func:`field_values` gathers them in their order of precedence and refuses an unknown key with the
closest known one, :func:`coerce` turns each into the field's type, and :func:`check_field` refuses
a value with a message that names the variable and says what to change. The defaults derived from
the poll interval and the store password taken out of the store URL are here too. Checks that
relate two fields live in ``Config.__post_init__`` (:mod:`failopen.config`), apart from what the
evidence setting needs (:func:`check_evidence`), kept beside the evidence check itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, overload

from failopen._internal.defaults import DefaultText
from failopen._internal.durations import parse_duration
from failopen._internal.methods import method_problem
from failopen.exceptions import ConfigError
from failopen.fallback.settings import DEFAULT_OUTAGE_RATE, OUTAGE_POLICIES
from failopen.providers.urls import check_url
from failopen.secret import Secret, as_secret
from failopen.stores import check_store_url, mask_url, split_password
from failopen.stores.redis import REDIS_SCHEMES

__all__ = [
    "DEFAULT_MAX_STALE_BYPASS", "DEFAULT_RATE", "ENV_PREFIX", "KNOWN_IMPAIRED", "SecretSetting",
    "check_bypass_on", "check_evidence", "check_field", "check_timing", "coerce",
    "default_backoff_max", "env_name", "field_values",
    "store_password_apart", "vendor_url",
]

ENV_PREFIX = "FAILOPEN_"
#: Global statuses the status page can report that mean "the platform does not work as it should".
KNOWN_IMPAIRED = frozenset({"degraded_performance", "partial_outage", "major_outage"})


def env_name(field_name: str) -> str:
    """The variable that sets a Config field: ``poll_interval`` -> ``FAILOPEN_POLL_INTERVAL``."""
    return ENV_PREFIX + field_name.upper()


_FLOATS = {"poll_interval", "poll_jitter", "status_timeout", "stale_after", "backoff_max",
           "max_stale_bypass", "verify_timeout", "confirm_ttl", "store_refresh", "fleet_lease",
           "probe_interval", "fallback_ttl", "min_score"}
# Seconds, also written 500ms, 30s, 5m, 1h or 1d (every float but two fractions).
_DURATIONS = _FLOATS - {"poll_jitter", "min_score"}
# Numbers whose None means "derived from the poll interval".
_DERIVED = {"stale_after", "backoff_max", "max_stale_bypass", "probe_interval"}
_INTS = {"status_max_bytes", "open_after", "close_after", "retry_after", "max_body_bytes",
         "audit_max_bytes", "audit_backups", "probe_open_after", "fallback_cost",
         "outage_rate_max_clients"}
_BOOLS = {"indicator_fallback", "require_verified", "override_endpoint", "protected_by_fields"}
_STR_SETS = {"bypass_on", "protected_methods", "evidence"}
_STR_TUPLES = {"protected_paths", "protected_views"}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

#: Default of FAILOPEN_MAX_STALE_BYPASS, seconds.
DEFAULT_MAX_STALE_BYPASS = 900.0


#: Default of FAILOPEN_OUTAGE_RATE.
DEFAULT_RATE: str = DefaultText(DEFAULT_OUTAGE_RATE)


def default_backoff_max(poll_interval: float) -> float:
    """The default ``backoff_max``: ten intervals, at most five minutes.

    Proportional, so a site polling every 5 s does not wait 300 s between tries of a failing page.
    """
    return min(10 * poll_interval, 300.0)


def field_values(
    names: set[str],
    settings: Mapping[str, Any],
    environ: Mapping[str, str],
    overrides: Mapping[str, Any],
    *,
    closest: Callable[[str], str | None],
) -> dict[str, Any]:
    """The values of the fields ``names`` that keyword ``overrides``, then ``settings`` (keys in
    upper case), then ``FAILOPEN_*`` variables give; ConfigError for an unknown key, suggesting
    what ``closest`` finds."""
    problems = [_unknown_key(key, names, closest) for key in settings
                if not isinstance(key, str) or key.lower() not in names or key != key.upper()]
    if problems:
        known = "" if all("did you mean" in p for p in problems) else (
            f"; known: {', '.join(sorted(n.upper() for n in names))}")
        raise ConfigError(f"unknown failopen setting(s): {'; '.join(sorted(problems))}{known}")
    unknown_kw = sorted(k for k in overrides if k not in names)
    if unknown_kw:
        raise ConfigError(f"unknown Config field(s): {', '.join(unknown_kw)}")
    values: dict[str, Any] = {}
    for name in names:
        if name in overrides:
            values[name] = overrides[name]
        elif name.upper() in settings:
            values[name] = coerce(name, settings[name.upper()], source="setting")
        elif env_name(name) in environ and environ[env_name(name)].strip() != "":
            values[name] = coerce(name, environ[env_name(name)], source="env")
    return values


def _unknown_key(key: Any, names: set[str], closest: Callable[[str], str | None]) -> str:
    """How to fix one key of a settings mapping: ``'status_url' (did you mean 'STATUS_URL'?)``."""
    if not isinstance(key, str):
        return f"{key!r} (keys are strings)"
    if key.lower() in names:
        return f"{key!r} (did you mean {key.upper()!r}?)"
    close = closest(key)
    return f"{key!r} (did you mean {close!r}?)" if close else repr(key)


def _split(value: Any) -> list[str]:
    items: Iterable[Any] = value.split(",") if isinstance(value, str) else value
    return [str(item).strip() for item in items if str(item).strip()]


def coerce(name: str, value: Any, *, source: str) -> Any:
    where = env_name(name) if source == "env" else name.upper()
    if name in _DURATIONS and isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError as exc:  # says what is wrong: not a duration, negative, zero
            raise ConfigError(f"{where}: {exc}") from None
    try:
        if name in _FLOATS:
            return float(value)
        if name in _INTS:
            if isinstance(value, str):
                return int(value.strip())
            return value
        if name in _BOOLS:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError("expected true or false")
        if name in _STR_SETS:
            items = _split(value)
            if name == "protected_methods":
                return frozenset(i.upper() for i in items)
            return frozenset(i.lower() for i in items) if name == "evidence" else frozenset(items)
        if name in _STR_TUPLES:
            return tuple(_split(value))
        if name in ("vendor", "fallback_vendor") and isinstance(value, str):
            return value.strip().lower()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {value!r} is not valid ({exc})") from None
    return value


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{env_name(name)}: expected a number, got {value!r}")
    if value <= 0:
        raise ConfigError(f"{env_name(name)}: must be greater than 0, got {value!r}")


def check_field(name: str, value: Any) -> None:
    checks: dict[str, Callable[[Any], None]] = {
        "poll_jitter": lambda v: _fraction(name, v),
        "min_score": lambda v: _score(name, v),
        "mode": lambda v: _choice(name, v, ("enforce", "shadow")),
        "audit": lambda v: _choice(name, v, ("each", "summary")),
        "metrics": lambda v: _metrics(name, v),
        "store": lambda v: _store(name, v),
        "redis_prefix": lambda v: _prefix(name, v),
        "protected_paths": lambda v: _paths(name, v),
        "protected_views": lambda v: _views(name, v),
        "token_field": lambda v: _nonempty(name, v),
        "token_header": lambda v: _nonempty(name, v),
        "bypass_on": lambda v: _nonempty_set(name, v),
        "protected_methods": lambda v: _nonempty_set(name, v, method_problem(v)),
        "audit_max_bytes": lambda v: _whole(name, v, 4096, 1 << 40),
        "audit_backups": lambda v: _whole(name, v, 1, 1000),
        "evidence": lambda v: _evidence(name, v),
        # One failed probe is one slow answer, not a streak: the rule needs at least two.
        "probe_open_after": lambda v: _whole(name, v, 2, 1000),
        "outage_policy": lambda v: _choice(name, v, OUTAGE_POLICIES),
        # Below 1,000 a solve costs a bot nothing; above 10**9 a browser never finishes.
        "fallback_cost": lambda v: _whole(name, v, 1000, 10**9),
        "outage_rate_max_clients": lambda v: _whole(name, v, 100, 10**7),  # 10**7: 3-5 GB
    }
    if name in checks:
        checks[name](value)
    elif name in _FLOATS or name in _INTS:
        if name in _DERIVED and value is None:
            return
        _positive(name, value)
        if name in _INTS and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigError(f"{env_name(name)}: expected a whole number, got {value!r}")
    elif name in _BOOLS and not isinstance(value, bool):
        raise ConfigError(f"{env_name(name)}: expected true or false, got {value!r}")


def _whole(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{env_name(name)}: expected a whole number from {low} to {high}, "
                          f"got {value!r}")


def _fraction(name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ConfigError(f"{env_name(name)}: expected a fraction from 0 to below 1, got {value!r}")


def _score(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"{env_name(name)}: expected a score from 0.0 to 1.0 (tokens scoring "
                          f"below it are refused), got {value!r}")


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{env_name(name)}: expected one of {', '.join(choices)}, got {value!r}")


def _metrics(name: str, value: Any) -> None:
    _choice(name, value, ("auto", "on", "off"))
    from failopen.observe.metrics import available

    if value == "on" and not available():
        raise ConfigError(f"{env_name(name)}: 'on' needs prometheus_client: pip install "
                          "\"failopen[prometheus]\" (or set it to auto: metrics whenever "
                          "prometheus_client is installed)")


def _nonempty(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{env_name(name)}: must not be empty")


def _nonempty_set(name: str, value: Any, problem: str | None = None) -> None:
    if not isinstance(value, frozenset) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{env_name(name)}: expected a non-empty set of names, got {value!r}")
    if problem is not None:
        raise ConfigError(f"{env_name(name)}: {problem}")


# Outage evidence (issue 13): the status page, and the verify probe beside it when opted in;
# the probe alone for a vendor with no status page a machine can read.
EVIDENCE_CHOICES = (frozenset({"status"}), frozenset({"status", "probe"}), frozenset({"probe"}))


def _evidence(name: str, value: Any) -> None:
    if value not in EVIDENCE_CHOICES:
        shown = ",".join(sorted(value)) if isinstance(value, frozenset) else repr(value)
        raise ConfigError(
            f"{env_name(name)}: expected status, status,probe or probe, got {shown!r} (probe "
            "alone is for a vendor with no status page a machine can read)"
        )


def check_evidence(evidence: frozenset[str], *, status_url: str | None,
                   verify_url: str | None) -> None:
    """ConfigError when the verify probe is evidence without the URLs it needs, or a status
    page is configured that the evidence leaves out."""
    if "probe" not in evidence:
        return
    if "status" not in evidence:
        if status_url is not None:
            raise ConfigError(
                "FAILOPEN_EVIDENCE: probe leaves the status page out, yet FAILOPEN_STATUS_URL is "
                "set; use status,probe to weigh both, or unset FAILOPEN_STATUS_URL")
        if verify_url is None:
            raise ConfigError(
                "FAILOPEN_EVIDENCE: probe needs FAILOPEN_VERIFY_URL (the probe is a verify "
                "call), or FAILOPEN_PRIVATE_KEY for a vendor that presets its URL")
        return
    if status_url is None:
        raise ConfigError(
            "FAILOPEN_EVIDENCE: status,probe needs FAILOPEN_STATUS_URL: the verify probe adds "
            "to the status page's evidence, it never replaces it"
        )
    if verify_url is None:
        raise ConfigError(
            "FAILOPEN_EVIDENCE: status,probe needs FAILOPEN_VERIFY_URL (the probe is a verify "
            "call); set it, or use FAILOPEN_EVIDENCE=status"
        )


def check_timing(config: Any) -> None:
    """ConfigError when the poll, stale, bypass and lease durations contradict each other
    (``config`` is the Config being built: its fields and derived seconds)."""
    if config.stale_after is not None and config.stale_after < config.poll_interval:
        raise ConfigError(
            f"FAILOPEN_STALE_AFTER: {config.stale_after:g}s is shorter than "
            f"FAILOPEN_POLL_INTERVAL ({config.poll_interval:g}s); every state would look stale")
    stale = config.stale_after_seconds
    if config.max_stale_bypass is not None and config.max_stale_bypass < stale:
        raise ConfigError(
            f"FAILOPEN_MAX_STALE_BYPASS: {config.max_stale_bypass:g}s is shorter than the "
            f"stale limit ({stale:g}s, FAILOPEN_STALE_AFTER, default 3 x "
            "FAILOPEN_POLL_INTERVAL): a bypass would end before its reading is even marked "
            f"stale; set it to at least {stale:g} or poll more often")
    if config.fleet_lease < 3 * config.store_refresh:
        raise ConfigError(
            f"FAILOPEN_FLEET_LEASE: {config.fleet_lease:g}s is shorter than 3 x "
            f"FAILOPEN_STORE_REFRESH ({config.store_refresh:g}s): the leader renews its lease at "
            "a third of it, between two refreshes; raise it or refresh more often")


def check_bypass_on(bypass_on: frozenset[str], *, indicator_fallback: bool) -> None:
    """ConfigError for a FAILOPEN_BYPASS_ON entry that is no impaired status, or an
    ``indicator:`` one that can never match."""
    unknown = bypass_on - KNOWN_IMPAIRED
    if any(v.startswith("indicator:") for v in unknown) and not indicator_fallback:
        raise ConfigError(
            "FAILOPEN_BYPASS_ON: indicator:<value> entries only ever match with "
            "FAILOPEN_INDICATOR_FALLBACK=true; enable it or remove them")
    if unknown and not all(v.startswith("indicator:") for v in unknown):
        raise ConfigError(
            f"FAILOPEN_BYPASS_ON: {', '.join(sorted(unknown))} is not an impaired status; "
            f"use any of {', '.join(sorted(KNOWN_IMPAIRED))} (or indicator:<value> with "
            "FAILOPEN_INDICATOR_FALLBACK)")


def _paths(name: str, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(p, str) for p in value):
        raise ConfigError(f"{env_name(name)}: expected comma-separated path prefixes")
    bad = [p for p in value if not p.startswith("/")]
    if bad:
        raise ConfigError(f"{env_name(name)}: path prefixes must start with '/': {bad!r}")


def _views(name: str, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{env_name(name)}: expected comma-separated view names")
    bad = [v for v in value if "/" in v or v != v.strip() or " " in v]
    if bad:
        raise ConfigError(
            f"{env_name(name)}: {bad!r} is not a view name; list URL names such as "
            "accounts:login or dotted paths such as accounts.views.LoginView (paths go in "
            "FAILOPEN_PROTECTED_PATHS)"
        )


def vendor_url(value: str) -> str:
    """The base the snippet appends the vendor's script path to (the spec's vendor:
    ``/v2/<key>/api.js``), without its trailing slash."""
    # The browser loads a script from it: the same rules as the server's own vendor calls.
    url = check_url(value, setting=env_name("vendor_url"))
    if "?" in url or "#" in url:
        raise ConfigError(
            "FAILOPEN_VENDOR_URL: expected a base URL without query or fragment, like "
            "https://client.vendor.example (the snippet appends the vendor's script path)"
        )
    return url.rstrip("/")


def _prefix(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value or len(value) > 100 or not value.isprintable() \
            or " " in value:
        raise ConfigError(
            f"{env_name(name)}: expected up to 100 printable characters without spaces, such as "
            f"'failopen:' or 'mysite:failopen:', got {value!r}"
        )


def _store(name: str, value: Any) -> None:
    # At construction, so a store this version cannot open (a typo, redis-py missing) stops
    # start-up, instead of failing every protected request; the message never shows a password.
    check_store_url(value)



def store_password_apart(store: str, given: Secret | None) -> tuple[str, str | None]:
    """``store`` without a password, and the password it carried (None: it carried none).

    ConfigError when ``given`` (FAILOPEN_STORE_PASSWORD) is another password, or is given for a
    store that takes none.
    """
    stripped, password = split_password(store)
    if password is not None:
        if given is not None and given.reveal() != password:
            raise ConfigError(
                f"FAILOPEN_STORE: {mask_url(store)} carries a password and "
                "FAILOPEN_STORE_PASSWORD gives another one; give it once, in "
                "FAILOPEN_STORE_PASSWORD")
        return stripped, password
    if given is not None and store.partition("://")[0].lower() not in REDIS_SCHEMES:
        raise ConfigError(
            f"FAILOPEN_STORE_PASSWORD: only a Redis store takes a password, and "
            f"FAILOPEN_STORE is {mask_url(store)}; remove it or use redis://host:port/db")
    return store, None

class SecretSetting:
    """A Config field that holds a :class:`Secret` (a ``str`` given is wrapped; blank: None)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: Any) -> None: ...

    @overload
    def __get__(self, instance: object, owner: Any) -> Secret | None: ...

    def __get__(self, instance: object | None, owner: Any) -> Secret | None:
        if instance is None:
            return None  # the field's default, as dataclasses read it
        value: Secret | None = instance.__dict__.get(self.name)
        return value

    def __set__(self, instance: object, value: str | Secret | None) -> None:
        try:
            instance.__dict__[self.name] = as_secret(value)
        except TypeError:
            # Never echo the value: it is meant to be a credential.
            raise ConfigError(f"{env_name(self.name)}: expected a string, got "
                              f"{type(value).__name__}") from None
