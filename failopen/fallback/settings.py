"""The outage settings' own rules: the policy names, ``ROUTE=POLICY`` lists, the outage rate and
the extra the fallback needs. ``Config`` (:mod:`failopen.config`) calls these as it is built, so
a route that is not protected, an unknown policy or a missing extra stops start-up.

The rate is read by :mod:`failopen.fallback.rate_text`: no optional package, so the default limit
is in force on every install. ``limits`` is needed only to count in a fleet's Redis.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from failopen._internal.networks import parse_networks
from failopen._internal.route_pairs import route_pairs
from failopen.exceptions import ConfigError
from failopen.fallback.rate_text import parse_rate
from failopen.secret import Secret
from failopen.stores.urls import REDIS_SCHEMES

__all__ = [
    "DEFAULT_MAX_CLIENTS", "DEFAULT_OUTAGE_RATE", "INSTALL", "INSTALL_FLEET", "MIN_SECRET",
    "OUTAGE_POLICIES", "check_outage", "check_outage_rate", "check_policy_routes",
    "policy_routes", "require_extra",
]

#: What a protected route may do while enforcement is off.
OUTAGE_POLICIES = ("open", "fallback", "closed")
#: Requests admitted without a vendor check, per client address and route.
DEFAULT_OUTAGE_RATE = "20/minute"
#: Clients (address and route) one process's memory counts apart; past them new clients share
#: one window (failopen.fallback.rate_memory). About 330 bytes each with one admission in the
#: window, 540 with 20: 7-11 MB at most per process.
DEFAULT_MAX_CLIENTS = 20_000
INSTALL = 'pip install "failopen[fallback]"'
#: What brings ``limits``, which counts the outage rate limit in a fleet's Redis (with redis-py).
INSTALL_FLEET = 'pip install "failopen[redis]"'
#: Characters of FAILOPEN_FALLBACK_SECRET at least: whoever guesses it mints solutions for free.
MIN_SECRET = 32
# What the extra brings, by import name.
_EXTRA = ("altcha",)


def require_extra(feature: str) -> None:
    """ConfigError naming the extra when ``altcha`` is missing (nothing imported: ``find_spec``
    only looks)."""
    missing = _missing_extra(feature)
    if missing:
        raise ConfigError(missing)


def _missing_extra(feature: str) -> str | None:
    """What :func:`require_extra` would say, or None when the extra is installed."""
    missing = [name for name in _EXTRA if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return (f"{feature} needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: {INSTALL}")


def _policy(route: str, policy: Any) -> str:
    text = policy.strip().lower() if isinstance(policy, str) else policy
    if text not in OUTAGE_POLICIES:
        raise ValueError(f"{route!r} has the policy {policy!r}; use one of "
                         f"{', '.join(OUTAGE_POLICIES)}")
    return str(text)


def policy_routes(value: Any) -> tuple[tuple[str, str], ...]:
    """``ROUTE=POLICY`` pairs from a comma-separated string, a mapping or pairs, in the order
    given; ConfigError for an item without ``=``, an unknown policy or a route given twice."""
    try:
        return route_pairs(value, what="policy", whats="policies", check=_policy,
                           example="/login=open,/signup=fallback,/password-reset=closed")
    except ValueError as exc:
        raise ConfigError(f"FAILOPEN_OUTAGE_POLICY_ROUTES: {exc}") from None


def check_policy_routes(routes: tuple[tuple[str, str], ...], *, paths: tuple[str, ...],
                        views: tuple[str, ...]) -> None:
    """ConfigError when a route is neither a protected path nor a protected view, as spelled
    there (a policy for a route nothing protects would never apply: a typo, said at start-up)."""
    protected = set(paths) | set(views)
    for route, _policy_name in routes:
        if route not in protected:
            shown = ", ".join(sorted(protected)) or "nothing (FAILOPEN_PROTECTED_PATHS and "\
                "FAILOPEN_PROTECTED_VIEWS are empty)"
            raise ConfigError(
                f"FAILOPEN_OUTAGE_POLICY_ROUTES: {route!r} is not a protected route; spell each "
                f"route as in FAILOPEN_PROTECTED_PATHS or FAILOPEN_PROTECTED_VIEWS, which "
                f"protect {shown}")


def check_outage_rate(rate: Any, *, fleet: bool = False) -> str:
    """The rate as kept (``none`` in lower case, any other as given); ConfigError for one that
    :func:`~failopen.fallback.rate_text.parse_rate` refuses, or when ``fleet`` (a Redis store)
    would count it in Redis without ``limits`` installed."""
    if not isinstance(rate, str) or not rate.strip():
        raise ConfigError(f"FAILOPEN_OUTAGE_RATE: expected a rate such as {DEFAULT_OUTAGE_RATE} "
                          f"or none, got {rate!r}")
    if rate.strip().lower() == "none":
        return "none"
    try:
        parse_rate(rate)
    except ValueError as exc:
        raise ConfigError(f"FAILOPEN_OUTAGE_RATE: {exc}") from None
    if fleet and importlib.util.find_spec("limits") is None:
        # Counting in each process instead would multiply the limit by the fleet's size unsaid.
        raise ConfigError(
            "FAILOPEN_OUTAGE_RATE: a Redis store (FAILOPEN_STORE) counts the outage rate limit "
            f"fleet-wide with the limits package, which is not installed: {INSTALL_FLEET} "
            "(or set FAILOPEN_OUTAGE_RATE to none)")
    return rate


def check_outage(*, policy: str, routes: Any, paths: tuple[str, ...], views: tuple[str, ...],
                 secret: Secret | None, rate: Any, proxies: Any, store: str = "memory:",
                 second_vendor: bool = False) -> dict[str, Any]:
    """The outage settings checked together, as Config keeps them: ``outage_policy_routes``,
    ``outage_rate``, ``trusted_proxies``, and the lookups ``_policies`` and ``_proxies``.

    ``store``: FAILOPEN_STORE; a Redis one counts the rate there.
    ``second_vendor``: FAILOPEN_FALLBACK_VENDOR is set, so a fallback route needs neither ALTCHA
    nor its secret (:mod:`failopen.fallback.second_vendor` checks that vendor's settings)."""
    pairs = policy_routes(routes)
    check_policy_routes(pairs, paths=paths, views=views)
    fallback = policy == "fallback" or any(p == "fallback" for _r, p in pairs)
    if not second_vendor and fallback:
        # Both said at once: a site that lacks the extra usually lacks the secret too, and one
        # start-up per missing piece is a slow way to learn the list.
        wanting = [m for m in (
            _missing_extra("the fallback outage policy (FAILOPEN_OUTAGE_POLICY, "
                           "FAILOPEN_OUTAGE_POLICY_ROUTES)"),
            None if secret is not None else
            "FAILOPEN_FALLBACK_SECRET: required when a route's outage policy is fallback "
            "(it signs the challenges; give every process of the fleet the same one), "
            "unless FAILOPEN_FALLBACK_VENDOR names a second vendor as the challenge. "
            "Generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'",
        ) if m is not None]
        if wanting:
            raise ConfigError("; and ".join(wanting))
    if secret is not None and len(secret.reveal().strip()) < MIN_SECRET:
        # Never echo the value: it is a credential.
        raise ConfigError(
            f"FAILOPEN_FALLBACK_SECRET: must be at least {MIN_SECRET} characters; generate one "
            "with: python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    try:
        networks = parse_networks(proxies if isinstance(proxies, str) else tuple(proxies))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"FAILOPEN_TRUSTED_PROXIES: {exc}; list your proxies' addresses "
                          "or networks, such as 10.0.0.0/8,192.168.1.7") from None
    return {
        "outage_policy_routes": pairs,
        "outage_rate": check_outage_rate(
            rate, fleet=store.partition(":")[0].lower() in REDIS_SCHEMES),
        "trusted_proxies": tuple(str(n) for n in networks),
        "_policies": dict(pairs),
        "_proxies": networks,
    }
