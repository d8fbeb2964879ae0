"""``failopen check``'s lines about the settings themselves: is the configuration valid, and what
would protected routes do while enforcement is off (the outage policies)?

Neither makes network I/O. The fallback secret is reported as set or not, never shown; the
extras are looked up with ``find_spec`` (nothing imported).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from importlib.util import find_spec
from typing import Any

from failopen._variables import unknown_variables
from failopen.cli.preflight import Check, Status
from failopen.cli.preflight_store import several_workers
from failopen.config import Config
from failopen.exceptions import ConfigError
from failopen.stores.urls import REDIS_SCHEMES

__all__ = ["check_configuration", "check_outage_policies", "nothing_protected"]

_EXTRAS = ("altcha", "limits")
_MAX_ERRORS = 10
# unknown_variables()'s sentence for a name close to a protection setting.
_NEAR_MISS = re.compile(r"variable (\S+) is ignored; did you mean (FAILOPEN_PROTECTED_\w+)\?")
# A variable's name, or a Django settings key as Django's errors write it (FAILOPEN['STORE']:).
_NAMED = re.compile(r"FAILOPEN(?:_([A-Z_]+)|\['([A-Z_]+)'\]):")
_DEFAULTS = {spec.name: spec.default for spec in dataclasses.fields(Config)}


def check_configuration(factory: Callable[..., Config], environ: Mapping[str, str]
                        ) -> tuple[list[Check], Config | None, list[str]]:
    """The whole Config, as a server builds it at start-up: its lines, the Config (None when it
    cannot be built) and every error found.

    Config stops at its first error; each error's setting is put back to its default and the
    Config built again, so one run names every bad setting it can (up to ten). A factory with
    a ``set_aside()`` (the problems it left out to build the rest) has those named first.
    """
    # A misspelt variable (PROTECTED_PATHS without its S) protects nothing: worth saying,
    # and beside an error too (the misspelt variable may be the missing setting).
    unknown = unknown_variables(environ)
    # An adapter's factory may set aside what Config cannot take (Django: the unknown keys of
    # settings.FAILOPEN) so that every other setting is checked too; those problems come first.
    set_aside = getattr(factory, "set_aside", None)
    errors: list[str] = list(set_aside()) if set_aside is not None else []
    defaults: dict[str, Any] = {}
    config: Config | None = None
    while len(errors) < _MAX_ERRORS:
        try:
            config = factory(**defaults)
            break
        except ConfigError as exc:
            if str(exc) in errors:
                break
            errors.append(str(exc))
            named = _field_named(str(exc))
            if named is None or named in defaults:
                break
            defaults[named] = _DEFAULTS[named]
    if errors:
        return [Check("configuration", "problem", "; ".join([error, *unknown]),
                      {"error": error, "unknown_variables": unknown}) for error in errors
                ], None, errors
    assert config is not None
    facts = {"error": None, "unknown_variables": unknown}
    if unknown:
        return [Check("configuration", "warning", "valid, but " + "; ".join(unknown),
                      facts)], config, []
    return [Check("configuration", "ok", "valid", facts)], config, []


def _field_named(message: str) -> str | None:
    """The Config field an error message begins with (``FAILOPEN_STORE: ...``), or None."""
    found = _NAMED.match(message)
    name = (found.group(1) or found.group(2)).lower() if found else None
    return name if name in _DEFAULTS else None


def nothing_protected(environ: Mapping[str, str], *, fix: str,
                      fields: str = "FAILOPEN_PROTECTED_BY_FIELDS=true", after: str = "") -> str:
    """The problem of a site whose settings protect nothing (issue 31, item 12): ``fix`` names
    the settings that protect, ``fields`` how a site says only form fields protect. A
    ``FAILOPEN_*`` variable close to a protection setting is named first: the misspelling that
    usually causes it (PROTECTED_PATHS without its S)."""
    near = [f"{found.group(1)} is set: did you mean {found.group(2)}?"
            for found in map(_NEAR_MISS.search, unknown_variables(environ)) if found]
    return ("nothing is protected: every request reaches the app unchecked"
            + (f" ({'; '.join(near)})" if near else "") + f". {fix}, or {fields} where only "
            "form fields (the Django or WTForms field) protect" + after)


def check_outage_policies(config: Config, environ: Mapping[str, str], *,
                          judge_protection: bool = True) -> Check:
    """What each protected route does while enforcement is off, and what that needs here.

    ``judge_protection``: nothing protected is a problem here (an adapter whose own line sees
    protection in the code, Django's ``@protect``, passes False and judges it there)."""
    extras = {name: find_spec(name) is not None for name in _EXTRAS}
    fleet = config.store.split(":", 1)[0].lower() in REDIS_SCHEMES
    routes = dict(config.outage_policy_routes)
    protected = [*config.protected_paths, *config.protected_views]
    counted = config.outage_rate != "none"  # in memory needs nothing; in Redis Config saw limits
    facts: dict[str, Any] = {
        "outage_policy": config.outage_policy, "outage_policy_routes": routes,
        "outage_rate": config.outage_rate, "rate_counted": counted,
        "fallback_secret": config.fallback_secret is not None, "extras": extras,
        "protected": protected, "trusted_proxies": list(config.trusted_proxies)}
    parts = [f"protected: {', '.join(protected)}" if protected else
             "protected by form fields (FAILOPEN_PROTECTED_BY_FIELDS)"
             if config.protected_by_fields else
             "no protected paths or views in the settings (views marked @protect are in the "
             "code)",
             f"default {config.outage_policy}",
             "routes of their own: " + ", ".join(f"{r}={p}" for r, p in routes.items())
             if routes else "no route with a policy of its own"]
    warnings = []
    if config.outage_rate == "none":
        parts.append("outage rate: not counted (none)")
    else:
        parts.append(f"outage rate {config.outage_rate} per client and route, counted "
                     + ("fleet-wide in Redis" if fleet else "in each process"))
    if config.uses_fallback and config.fallback_vendor is not None:
        # No ALTCHA: the second vendor's verify call answers, and its tokens are single-use.
        parts.append(f"fallback: {config.fallback_vendor} (its verify call, with its own keys)")
    elif config.uses_fallback:
        # Config refuses a fallback route without its secret or its extra: both are here.
        parts.append("fallback: secret set, altcha installed")
    elif config.fallback_secret is not None:
        parts.append("fallback secret set, no route in the settings uses it")
    else:
        parts.append("no fallback secret")
    if config.trusted_proxies:
        parts.append(f"X-Forwarded-For trusted from {', '.join(config.trusted_proxies)}")
    many = several_workers(environ)
    kept = [what for what, used in (("the outage rate limit", counted),
                                    ("the used fallback solutions", config.uses_fallback
                                     and config.fallback_vendor is None)) if used]
    if many is not None and not fleet and kept:
        # Each worker counts and remembers on its own: the limit and "used once" multiply.
        warnings.append(f"{many}, but {' and '.join(kept)} {'is' if len(kept) == 1 else 'are'}"
                        " kept in each process: use a redis:// store to share "
                        f"{'it' if len(kept) == 1 else 'them'}")
    problems = []
    if judge_protection and not protected and not config.protected_by_fields:
        problems.append(nothing_protected(
            environ, fix="Set FAILOPEN_PROTECTED_PATHS to the log-in and sign-up paths "
            "(FAILOPEN_PROTECTED_PATHS=/login,/signup)", after=" (a Django site: run manage.py "
            "failopen check, which sees @protect views)"))
        parts.pop(0)  # "no protected paths or views": said above
    facts["nothing_protected"] = bool(problems)
    detail = "; ".join(problems + parts + warnings)
    status: Status = "problem" if problems else "warning" if warnings else "ok"
    return Check("outage_policies", status, detail, facts)
