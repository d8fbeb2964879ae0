"""FAILOPEN_FALLBACK_VENDOR and its keys (issue 29): presets, and every start-up refusal names
what to change; the fallback private key never appears in a repr, a description or an error."""

from __future__ import annotations

from typing import Any

import pytest

from failopen import Config
from failopen.exceptions import ConfigError
from failopen.providers.registry import PROVIDERS
from failopen.testing.providers import FakeHCaptchaVerify

KEY = "0xFALLBACK-private-key-never-shown"
BASE: dict[str, Any] = {
    "vendor": "turnstile", "private_key": "first-key", "protected_paths": ("/signup",),
    "outage_policy_routes": "/signup=fallback", "fallback_vendor": "hcaptcha",
    "fallback_private_key": KEY, "fallback_public_key": FakeHCaptchaVerify.DEFAULT_PUBLIC_KEY,
}


def test_the_vendor_presets_its_verify_url_script_origin_and_token_field() -> None:
    config = Config(**BASE)
    assert config.fallback_verify_url == "https://api.hcaptcha.com/siteverify"
    assert config.fallback_vendor_url == "https://js.hcaptcha.com"
    assert config.fallback_token_field == "h-captcha-response"
    assert config.fallback_secret is None  # not required with a second vendor
    other = config.replace(fallback_vendor="recaptcha")
    assert other.fallback_verify_url == "https://www.google.com/recaptcha/api/siteverify"
    assert other.fallback_vendor_url == "https://www.google.com"
    assert Config(**BASE, fallback_vendor_url="https://proxy.example.com/").fallback_vendor_url \
        == "https://proxy.example.com"


def test_without_a_second_vendor_the_fallback_is_altcha_as_before() -> None:
    config = Config()
    assert (config.fallback_vendor, config.fallback_token_field) == (None, "altcha")


def test_every_vendor_but_the_spec_s_names_a_script_origin() -> None:
    origins = {name: p.script_origin for name, p in PROVIDERS.items()}
    assert origins == {
        "enforcement": None, "turnstile": "https://challenges.cloudflare.com",
        "hcaptcha": "https://js.hcaptcha.com", "recaptcha": "https://www.google.com",
        "recaptcha-enterprise": "https://www.google.com",
        "friendly-captcha": "https://cdn.jsdelivr.net"}


@pytest.mark.parametrize(("changes", "names"), [
    ({"fallback_vendor": "hcaptch"}, ["FAILOPEN_FALLBACK_VENDOR", "hcaptcha, recaptcha"]),
    ({"fallback_vendor": "turnstile"}, ["FAILOPEN_FALLBACK_VENDOR", "another vendor"]),
    ({"fallback_vendor": "enforcement"}, ["FAILOPEN_FALLBACK_VENDOR", "FAILOPEN_TOKEN_HEADER"]),
    ({"fallback_private_key": None}, ["FAILOPEN_FALLBACK_PRIVATE_KEY", "required"]),
    ({"fallback_public_key": None}, ["FAILOPEN_FALLBACK_PUBLIC_KEY", "required"]),
    ({"fallback_secret": "s" * 40}, ["FAILOPEN_FALLBACK_SECRET", "FAILOPEN_FALLBACK_VENDOR"]),
    ({"fallback_vendor": "recaptcha-enterprise", "vendor": "recaptcha"},
     ["FAILOPEN_FALLBACK_VENDOR", "g-recaptcha-response"]),
    ({"fallback_vendor": "recaptcha-enterprise"}, ["FAILOPEN_FALLBACK_VERIFY_URL", "required"]),
    ({"fallback_vendor": "recaptcha-enterprise",
      "fallback_verify_url": "https://recaptchaenterprise.googleapis.com/v1/projects/p/x"},
     ["FAILOPEN_FALLBACK_VERIFY_URL", "assessments"]),
    ({"fallback_verify_url": "http://api.hcaptcha.com/siteverify"},
     ["FAILOPEN_FALLBACK_VERIFY_URL"]),
    ({"fallback_vendor_url": "https://js.example.com/?x=1"}, ["FAILOPEN_FALLBACK_VENDOR_URL"]),
    ({"fallback_private_key": KEY + "\n"}, ["FAILOPEN_FALLBACK_PRIVATE_KEY", "whitespace"]),
    ({"fallback_vendor": None, "outage_policy_routes": ()},
     ["FAILOPEN_FALLBACK_PRIVATE_KEY", "without"]),
])
def test_a_misconfiguration_stops_start_up_naming_what_to_change(
        changes: dict[str, Any], names: list[str]) -> None:
    settings = {**BASE, **changes}
    if changes.get("vendor") == "recaptcha":
        settings["public_key"] = "site"
    with pytest.raises(ConfigError) as raised:
        Config(**settings)
    message = str(raised.value)
    assert all(name in message for name in names), message
    assert KEY.strip() not in message


def test_the_environment_and_django_keys_are_the_same_names() -> None:
    env = {"FAILOPEN_" + k.upper(): str(v) if not isinstance(v, tuple) else ",".join(v)
           for k, v in BASE.items()}
    from_env = Config.from_env(env)
    from_mapping = Config.from_mapping({k.upper(): v for k, v in BASE.items()}, environ={})
    assert from_env.fallback_vendor == from_mapping.fallback_vendor == "hcaptcha"
    assert from_env.fallback_private_key == from_mapping.fallback_private_key


def test_a_second_vendor_without_a_fallback_route_is_accepted_as_altcha_s_secret_is() -> None:
    # Django's @protect(outage="fallback") names routes Config cannot see: no error, as for
    # FAILOPEN_FALLBACK_SECRET without a fallback route.
    config = Config(**{**BASE, "outage_policy_routes": ()})
    assert config.fallback_vendor == "hcaptcha" and not config.uses_fallback


def test_the_fallback_private_key_is_shown_nowhere() -> None:
    config = Config(**BASE)
    assert KEY not in repr(config) and KEY not in str(config.describe())
    assert config.describe()["fallback_private_key"] == "***"
    assert config.fallback_private_key is not None and config.fallback_private_key.reveal() == KEY


def test_a_fallback_route_answered_by_the_second_vendor_is_counted_without_limits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Review of issue 29: the outage rate limit still applies on a fallback route (item 6).
    # Without ``limits`` the runtime only warned and ran the route uncounted; since issue 31
    # (item 11) memory counts without it, and only a Redis store, which counts with it, stops
    # start-up. Saying "none" is the explicit way to run uncounted.
    import importlib.util

    from failopen.runtime import FailOpen

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "limits" else find_spec(name, *a))
    runtime = FailOpen(Config(**BASE))
    try:
        assert runtime.guard.gate.rate is not None
    finally:
        runtime.stop()
    with pytest.raises(ConfigError) as raised:
        Config(**BASE, store="redis://localhost:6379/0")
    assert "limits" in str(raised.value) and KEY not in str(raised.value)
    assert Config(**BASE, outage_rate="none").outage_rate == "none"
    # A second vendor without any fallback route in the settings: nothing to count here.
    assert Config(**{**BASE, "outage_policy_routes": ()}).fallback_vendor == "hcaptcha"
