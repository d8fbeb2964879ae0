"""FAILOPEN_VENDOR and what each vendor presets: the verify URL, the token field, the status page
and its component; a setting given always wins; the default vendor changes nothing."""

from __future__ import annotations

import pytest

from failopen import Config, ConfigError
from failopen.providers.registry import PROVIDERS
from failopen.providers.verify import HttpVerifier
from failopen.runtime import FailOpen

KEY = "a-secret-key-of-the-site"
ENTERPRISE = "https://recaptchaenterprise.googleapis.com/v1/projects/my-proj/assessments"


def test_the_default_vendor_is_the_spec_s_and_presets_nothing() -> None:
    config = Config()
    assert config.vendor == "enforcement"
    assert (config.verify_url, config.status_url, config.global_component) == (None, None, None)
    assert config.token_field == "enforcement-token"
    with_key = Config(private_key=KEY, verify_url="https://acme.test/api/v4/verify/")
    assert with_key.verify_url == "https://acme.test/api/v4/verify/"


def test_an_unknown_vendor_stops_start_up_with_the_list() -> None:
    with pytest.raises(ConfigError) as raised:
        Config.from_env({"FAILOPEN_VENDOR": "recapcha"})
    message = str(raised.value)
    assert message.startswith("FAILOPEN_VENDOR: 'recapcha' is not a vendor failopen knows")
    for name in PROVIDERS:
        assert name in message


def test_the_vendor_name_is_read_in_any_case() -> None:
    assert Config.from_env({"FAILOPEN_VENDOR": " Turnstile "}).vendor == "turnstile"
    assert Config.from_mapping({"VENDOR": "HCAPTCHA"}).vendor == "hcaptcha"


@pytest.mark.parametrize(("vendor", "url", "field"), [
    ("turnstile", "https://challenges.cloudflare.com/turnstile/v0/siteverify",
     "cf-turnstile-response"),
    ("hcaptcha", "https://api.hcaptcha.com/siteverify", "h-captcha-response"),
    ("recaptcha", "https://www.google.com/recaptcha/api/siteverify", "g-recaptcha-response"),
    ("friendly-captcha", "https://global.frcapi.com/api/v2/captcha/siteverify",
     "frc-captcha-response"),
])
def test_each_vendor_presets_its_verify_url_and_field(vendor: str, url: str, field: str) -> None:
    config = Config(vendor=vendor, private_key=KEY)
    assert (config.verify_url, config.token_field) == (url, field)
    # Without the secret, no verify URL: nothing could be verified with it.
    assert Config(vendor=vendor).verify_url is None


def test_a_setting_given_wins_over_the_preset() -> None:
    config = Config(vendor="turnstile", private_key=KEY, verify_url="http://127.0.0.1:9/sv",
                    token_field="captcha", status_url="http://127.0.0.1:9",
                    global_component="mine")
    assert (config.verify_url, config.token_field, config.status_url,
            config.global_component) == ("http://127.0.0.1:9/sv", "captcha",
                                         "http://127.0.0.1:9", "mine")


def test_a_field_given_the_default_s_text_is_still_given() -> None:
    # Explicit "enforcement-token" with Turnstile: the site chose it; keep it.
    config = Config.from_env({"FAILOPEN_VENDOR": "turnstile",
                              "FAILOPEN_TOKEN_FIELD": "enforcement-token"})
    assert config.token_field == "enforcement-token"


@pytest.mark.parametrize(("vendor", "url", "component"), [
    ("turnstile", "https://www.cloudflarestatus.com", "m4jywscr0n0k"),
    ("hcaptcha", "https://www.hcaptchastatus.com", "Captcha API"),
])
def test_vendors_with_a_status_page_preset_it_and_pin_their_component(
        vendor: str, url: str, component: str) -> None:
    config = Config(vendor=vendor)
    assert (config.status_url, config.global_component) == (url, component)
    # The component stays pinned when the page is elsewhere (a proxy, our fakes).
    moved = Config(vendor=vendor, status_url="http://127.0.0.1:9")
    assert moved.global_component == component


@pytest.mark.parametrize("vendor", ["recaptcha", "recaptcha-enterprise", "friendly-captcha"])
def test_vendors_without_a_status_page_preset_none(vendor: str) -> None:
    config = Config(vendor=vendor)
    assert (config.status_url, config.global_component) == (None, None)


def test_replace_with_another_vendor_takes_that_vendor_s_presets() -> None:
    turnstile = Config(vendor="turnstile", private_key=KEY)
    hcaptcha = turnstile.replace(vendor="hcaptcha")
    assert hcaptcha.verify_url == "https://api.hcaptcha.com/siteverify"
    assert hcaptcha.token_field == "h-captcha-response"
    assert hcaptcha.global_component == "Captcha API"
    back = hcaptcha.replace(vendor="enforcement")
    assert (back.verify_url, back.status_url, back.token_field) == (None, None,
                                                                    "enforcement-token")


def test_enterprise_needs_its_project_url_its_site_key_and_no_key_in_the_url() -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_PUBLIC_KEY: required"):
        Config(vendor="recaptcha-enterprise", private_key=KEY, verify_url=ENTERPRISE)
    with pytest.raises(ConfigError, match="assessments URL"):
        Config(vendor="recaptcha-enterprise", private_key=KEY, public_key="6Lsite",
               verify_url="https://recaptchaenterprise.googleapis.com/v1/assess")
    with pytest.raises(ConfigError, match="carries key=") as raised:
        Config(vendor="recaptcha-enterprise", private_key=KEY, public_key="6Lsite",
               verify_url=ENTERPRISE + "?key=AIzaSecretInTheUrl")
    assert "AIzaSecretInTheUrl" not in str(raised.value)
    ok = Config(vendor="recaptcha-enterprise", private_key=KEY, public_key="6Lsite",
                verify_url=ENTERPRISE)
    assert ok.token_field == "g-recaptcha-response"


def test_protected_routes_of_a_preset_vendor_need_its_secret() -> None:
    config = Config(vendor="turnstile", protected_paths=("/signup/",))
    with pytest.raises(ConfigError, match="FAILOPEN_PRIVATE_KEY: required .*Turnstile"):
        FailOpen(config)


@pytest.mark.parametrize("score", ["-0.1", "1.5", "nan", "high"])
def test_min_score_is_a_score(score: str) -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_MIN_SCORE"):
        Config.from_env({"FAILOPEN_MIN_SCORE": score})


def test_expected_actions_by_route() -> None:
    config = Config.from_env({
        "FAILOPEN_VENDOR": "recaptcha", "FAILOPEN_PROTECTED_PATHS": "/login/,/signup/",
        "FAILOPEN_EXPECTED_ACTIONS": "/login/=login, /signup/=sign_up"})
    assert config.expected_actions == (("/login/", "login"), ("/signup/", "sign_up"))
    django = Config.from_mapping({"VENDOR": "turnstile", "PROTECTED_VIEWS": ["accounts:login"],
                                  "EXPECTED_ACTIONS": {"accounts:login": "login"}})
    assert django.expected_actions == (("accounts:login", "login"),)


@pytest.mark.parametrize(("value", "message"), [
    ("/login/", "is not ROUTE=ACTION"),
    ("/nowhere/=login", "is not a protected route"),
    ("/login/=log in", "is not an action name"),
    ("/login/=a,/login/=b", "two actions"),
])
def test_expected_actions_refuse_what_would_never_apply(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.from_env({"FAILOPEN_VENDOR": "recaptcha", "FAILOPEN_PROTECTED_PATHS": "/login/",
                         "FAILOPEN_EXPECTED_ACTIONS": value})


def test_the_runtime_verifies_with_the_vendor_s_adapter() -> None:
    config = Config(vendor="turnstile", private_key=KEY, public_key="site-1",
                    protected_paths=("/signup/",), min_score=0.8,
                    expected_actions=(("/signup/", "signup"),))
    runtime = FailOpen(config)
    try:
        verifier = runtime.verifier
        assert isinstance(verifier, HttpVerifier)
        assert verifier.provider is PROVIDERS["turnstile"]
        assert verifier.public_key == "site-1"
        assert runtime.guard.actions == {"/signup/": "signup"}
        assert "vendor='turnstile'" in repr(verifier)
        assert KEY not in repr(verifier) and KEY not in repr(config)
    finally:
        runtime.stop()


def test_describe_names_the_vendor_and_masks_the_key() -> None:
    described = Config(vendor="friendly-captcha", private_key=KEY).describe()
    assert described["vendor"] == "friendly-captcha"
    assert described["private_key"] == "***"
