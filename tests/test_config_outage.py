"""The outage settings (issue 20): a policy per route, the fallback challenge's secret, cost and
lifetime, the outage rate and the trusted proxies, each refused at start-up with a message."""

from __future__ import annotations

import dataclasses
import importlib.util
import ipaddress
import json
from typing import Any

import pytest

from failopen.config import Config
from failopen.exceptions import ConfigError
from failopen.secret import Secret

SECRET = "fallback-" + "s" * 32
PATHS = ("/login", "/signup/", "/password-reset")


def config(**changes: Any) -> Config:
    return Config(protected_paths=PATHS, **changes)


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``without("limits")``: that package looks uninstalled to ``find_spec``."""
    find_spec = importlib.util.find_spec

    def hide(*names: str) -> None:
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: None if name in names else find_spec(name, *a))

    return hide


def test_the_defaults_keep_todays_behaviour() -> None:
    made = Config()
    assert made.outage_policy == "open" and made.outage_policy_routes == ()
    assert made.outage_policy_for("/login") == "open" and made.outage_policy_for(None) == "open"
    assert not made.uses_fallback and made.fallback_secret is None
    assert made.fallback_cost == 100_000 and made.fallback_ttl == 300.0
    assert made.outage_rate == "20/minute"
    assert made.outage_rate_max_clients == 20_000
    assert made.trusted_proxies == () and made.trusted_networks == ()


def test_each_route_follows_its_policy_and_the_rest_the_default() -> None:
    made = config(outage_policy="closed", fallback_secret=SECRET,
                  outage_policy_routes="/login=open, /signup/=FALLBACK")
    assert made.outage_policy_routes == (("/login", "open"), ("/signup/", "fallback"))
    assert made.outage_policy_for("/login") == "open"
    assert made.outage_policy_for("/signup/") == "fallback"
    assert made.outage_policy_for("/password-reset") == "closed"
    assert made.outage_policy_for(None) == "closed"
    assert made.uses_fallback


@pytest.mark.parametrize("routes", [
    {"/login": "open", "/signup/": "fallback"},
    [("/login", "open"), ("/signup/", "fallback")],
    "/login=open,/signup/=fallback,",
])
def test_routes_come_as_text_a_mapping_or_pairs(routes: Any) -> None:
    made = config(fallback_secret=SECRET, outage_policy_routes=routes)
    assert made.outage_policy_routes == (("/login", "open"), ("/signup/", "fallback"))
    assert made == made.replace(), "validated again, unchanged"


def test_from_the_environment_and_from_django_settings() -> None:
    env = {"FAILOPEN_PROTECTED_PATHS": "/login", "FAILOPEN_OUTAGE_POLICY": "fallback",
           "FAILOPEN_FALLBACK_SECRET": SECRET, "FAILOPEN_OUTAGE_POLICY_ROUTES": "/login=closed",
           "FAILOPEN_TRUSTED_PROXIES": "10.0.0.0/8"}
    made = Config.from_env(env)
    assert made.outage_policy_for("/login") == "closed" and made.uses_fallback
    django = Config.from_mapping({
        "PROTECTED_VIEWS": ["accounts:login", "accounts:signup"],
        "OUTAGE_POLICY_ROUTES": {"accounts:signup": "fallback", "accounts:login": "open"},
        "FALLBACK_SECRET": SECRET, "OUTAGE_RATE": "5/minute",
    }, environ={})
    assert django.outage_policy_for("accounts:signup") == "fallback"
    assert django.outage_rate == "5/minute"


@pytest.mark.parametrize(("changes", "message"), [
    ({"outage_policy": "fail"}, "FAILOPEN_OUTAGE_POLICY: expected one of open, fallback, closed"),
    ({"outage_policy_routes": "/login=lax"}, "use one of open, fallback, closed"),
    ({"outage_policy_routes": "/signup=closed"},
     r"'/signup' is not a protected route.*protect /login, /password-reset, /signup/"),
    ({"outage_policy_routes": "/login"}, "'/login' is not ROUTE=POLICY"),
    ({"outage_policy_routes": "=open"}, "'=open' is not ROUTE=POLICY"),
    ({"outage_policy_routes": "/login=open,/login=closed"}, "'/login' is given two policies"),
    ({"outage_policy_routes": [("/login",)]}, "is not a \\(route, policy\\) pair"),
    ({"outage_policy_routes": 5}, "expected ROUTE=POLICY"),
    ({"outage_policy": "fallback"}, "FAILOPEN_FALLBACK_SECRET: required"),
    ({"outage_policy_routes": "/login=fallback"}, "FAILOPEN_FALLBACK_SECRET: required"),
    ({"fallback_secret": "short"}, "FAILOPEN_FALLBACK_SECRET: must be at least 32"),
    ({"fallback_cost": 999}, "FAILOPEN_FALLBACK_COST"),
    ({"fallback_cost": 10**10}, "FAILOPEN_FALLBACK_COST"),
    ({"fallback_ttl": 0}, "FAILOPEN_FALLBACK_TTL"),
    ({"outage_rate": "often"}, "FAILOPEN_OUTAGE_RATE: 'often' is not one rate"),
    ({"outage_rate": "20/minute;5/second"}, "FAILOPEN_OUTAGE_RATE"),
    ({"outage_rate": "0/minute"}, "admits nobody"),
    ({"outage_rate": ""}, "FAILOPEN_OUTAGE_RATE"),
    # A cap of a few clients makes everyone share one window: a typo, said at start-up.
    ({"outage_rate_max_clients": 99}, "FAILOPEN_OUTAGE_RATE_MAX_CLIENTS: expected a whole number "
                                      "from 100"),
    ({"outage_rate_max_clients": 10**8}, "FAILOPEN_OUTAGE_RATE_MAX_CLIENTS"),
    ({"outage_rate_max_clients": True}, "FAILOPEN_OUTAGE_RATE_MAX_CLIENTS"),
    ({"trusted_proxies": "10.0.0.0/8, proxy.internal"},
     "FAILOPEN_TRUSTED_PROXIES: 'proxy.internal' is not an address"),
    ({"trusted_proxies": "10.0.0.1/8"}, "FAILOPEN_TRUSTED_PROXIES"),
])
def test_bad_outage_settings_stop_start_up(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(**changes)


def test_a_route_may_be_a_protected_view() -> None:
    made = Config(protected_views=("accounts:signup",),
                  outage_policy_routes="accounts:signup=closed")
    assert made.outage_policy_for("accounts:signup") == "closed"
    with pytest.raises(ConfigError, match="'accounts:login' is not a protected route"):
        made.replace(outage_policy_routes="accounts:login=closed")
    with pytest.raises(ConfigError, match="protect nothing"):
        Config(outage_policy_routes="/login=closed")


def test_the_fallback_secret_is_a_secret_everywhere() -> None:
    made = config(outage_policy="fallback", fallback_secret=SECRET)
    assert isinstance(made.fallback_secret, Secret) and made.fallback_secret.reveal() == SECRET
    assert made.describe()["fallback_secret"] == "***"
    json.dumps(made.describe())
    for shown in (repr(made), str(made.describe()), str(dataclasses.asdict(made))):
        assert SECRET not in shown
    with pytest.raises(ConfigError) as refused:
        config(fallback_secret=SECRET[:20])
    assert SECRET[:20] not in str(refused.value)
    assert config(fallback_secret="  ").fallback_secret is None, "blank is unset"


def test_none_is_read_in_any_case() -> None:
    assert Config.from_env({"FAILOPEN_OUTAGE_RATE": "None"}).outage_rate == "none"


def test_trusted_proxies_are_kept_as_written_by_ipaddress() -> None:
    made = Config(trusted_proxies="10.0.0.0/8, 2001:DB8::/32, 192.168.1.7, 10.0.0.0/8")
    assert made.trusted_proxies == ("10.0.0.0/8", "2001:db8::/32", "192.168.1.7/32")
    assert made.trusted_networks == tuple(ipaddress.ip_network(n) for n in made.trusted_proxies)
    assert Config(trusted_proxies=["10.0.0.0/8"]).trusted_proxies == ("10.0.0.0/8",)
    assert made.describe()["trusted_proxies"] == list(made.trusted_proxies)


def test_without_the_extra_a_fallback_policy_names_it(without: Any) -> None:
    without("altcha")
    with pytest.raises(ConfigError, match=r'needs altcha.*pip install "failopen\[fallback\]"'):
        config(outage_policy="fallback", fallback_secret=SECRET)
    with pytest.raises(ConfigError, match=r'pip install "failopen\[fallback\]"'):
        config(outage_policy_routes="/signup/=fallback", fallback_secret=SECRET)
    assert config(outage_policy="closed").outage_policy == "closed", "closed needs nothing"


def test_without_the_extra_and_the_secret_start_up_names_both(without: Any) -> None:
    # A site following a page that forgot both learns both from one start-up, not one per try.
    without("altcha", "limits")
    for changes in ({"outage_policy": "fallback"}, {"outage_policy_routes": "/signup/=fallback"}):
        with pytest.raises(ConfigError) as raised:
            config(**changes)
        said = str(raised.value)
        assert said.startswith("the fallback outage policy (FAILOPEN_OUTAGE_POLICY, "
                               "FAILOPEN_OUTAGE_POLICY_ROUTES) needs altcha, which is not "
                               'installed: pip install "failopen[fallback]"; and '
                               "FAILOPEN_FALLBACK_SECRET: required when"), said
    without("altcha")
    with pytest.raises(ConfigError, match=r"needs altcha, which is not installed: .*; and "
                                          "FAILOPEN_FALLBACK_SECRET: required"):
        config(outage_policy="fallback")


def test_without_limits_every_rate_is_counted_in_memory(without: Any) -> None:
    # Issue 31, item 11: `pip install "failopen[django]"` brings no limits, and the default rate
    # was then off (a WARNING at start-up, every token-less request admitted on an open route).
    without("limits")
    assert Config().outage_rate == "20/minute"
    assert Config(outage_rate="5 per 2 minutes").outage_rate == "5 per 2 minutes"
    assert Config.from_env({"FAILOPEN_OUTAGE_RATE": "20/minute"}).outage_rate == "20/minute"
    from failopen.runtime import FailOpen

    runtime = FailOpen(Config())
    try:
        assert repr(runtime.guard.gate.rate) == "OutageRateLimit('20/minute', memory)"
    finally:
        runtime.stop()


def test_a_redis_store_without_limits_stops_start_up_naming_the_extra(without: Any) -> None:
    without("limits")
    with pytest.raises(ConfigError, match=r'FAILOPEN_OUTAGE_RATE: a Redis store.*limits.*'
                                          r'pip install "failopen\[redis\]"'):
        Config(store="redis://localhost:6379/0")
    with pytest.raises(ConfigError, match="limits"):
        Config(store="redis+sentinel://localhost:26379/mymaster", outage_rate="5/minute")
    assert Config(store="redis://localhost:6379/0", outage_rate="none").outage_rate == "none"
    assert Config(store="file:///tmp/x/override.json").outage_rate == "20/minute"


def test_import_failopen_imports_neither_altcha_nor_limits_nor_redis() -> None:
    import subprocess
    import sys

    loaded = "print(sorted(m for m in ('altcha', 'limits', 'redis') if m in sys.modules))"
    code = ("import sys, failopen, failopen.fallback, failopen.web.client_address; "
            f"failopen.Config(); {loaded}; failopen.Config(outage_rate='5/minute'); {loaded}")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    # The rate is read by failopen itself: limits only counts in a fleet's Redis.
    assert done.stdout.split() == ["[]", "[]"]
