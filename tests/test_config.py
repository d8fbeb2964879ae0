"""Config: defaults, environment, validation messages that name the setting."""

from __future__ import annotations

import dataclasses

import pytest

from failopen.config import Config, env_name
from failopen.exceptions import ConfigError
from failopen.secret import Secret


def test_defaults_are_safe() -> None:
    config = Config()
    assert config.bypass_on == frozenset({"partial_outage", "major_outage"})
    assert config.open_after == 1 and config.close_after == 2
    assert config.mode == "enforce"
    assert config.store == "memory:"
    assert config.token_field == "enforcement-token"
    assert config.token_header == "X-Enforcement-Token"
    assert config.stale_after_seconds == 90.0


# One FAILOPEN_* value per Config field, none of them the default, and what it parses to.
ENV_TABLE: dict[str, tuple[str, object]] = {
    "status_url": ("https://status.example.com", "https://status.example.com"),
    "poll_interval": ("0.5", 0.5),
    "poll_jitter": ("0.25", 0.25),
    "status_timeout": ("1.5", 1.5),
    "status_max_bytes": ("65536", 65536),
    "global_component": ("abc123", "abc123"),
    "indicator_fallback": ("yes", True),
    "bypass_on": ("major_outage, indicator:critical",
                  frozenset({"major_outage", "indicator:critical"})),
    "open_after": ("2", 2),
    "close_after": ("3", 3),
    "stale_after": ("45", 45.0),
    "backoff_max": ("120", 120.0),
    "max_stale_bypass": ("600", 600.0),
    "verify_url": ("https://acme-verify.example.com/api/v4/verify/",
                   "https://acme-verify.example.com/api/v4/verify/"),
    "private_key": ("pk-secret-value", Secret("pk-secret-value")),
    "public_key": ("PUB-1", "PUB-1"),
    "vendor": (" Turnstile ", "turnstile"),
    "min_score": ("0.7", 0.7),
    "expected_actions": ("/accounts/login/=login", (("/accounts/login/", "login"),)),
    "verify_timeout": ("2", 2.0),
    "require_verified": ("on", True),
    "protected_paths": ("/accounts/login/, /accounts/signup/",
                        ("/accounts/login/", "/accounts/signup/")),
    "protected_views": ("accounts:login, accounts.views.SignupView",
                        ("accounts:login", "accounts.views.SignupView")),
    "protected_by_fields": ("true", True),
    "protected_methods": ("post, put", frozenset({"POST", "PUT"})),
    "token_field": ("tok", "tok"),
    "token_header": ("X-Tok", "X-Tok"),
    "mode": ("shadow", "shadow"),
    "audit": ("each", "each"),
    "confirm_ttl": ("2.5", 2.5),
    "retry_after": ("9", 9),
    "store": ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    "store_password": ("store-secret-value", Secret("store-secret-value")),
    "store_refresh": ("0.25", 0.25),
    "redis_prefix": ("mysite:failopen:", "mysite:failopen:"),
    "fleet_lease": ("6", 6.0),
    "max_body_bytes": ("4096", 4096),
    "vendor_url": ("https://client.vendor.example/", "https://client.vendor.example"),
    "widget": ("invisible", "invisible"),
    "admin_token": ("adm-" + "x" * 28, Secret("adm-" + "x" * 28)),
    "override_endpoint": ("true", True),
    "audit_file": ("/tmp/failopen-audit.jsonl", "/tmp/failopen-audit.jsonl"),
    "audit_max_bytes": ("65536", 65536),
    "audit_backups": ("3", 3),
    "metrics": ("off", "off"),
    "evidence": ("status, Probe", frozenset({"status", "probe"})),
    "probe_interval": ("12", 12.0),
    "probe_open_after": ("4", 4),
    "outage_policy": ("closed", "closed"),
    "outage_policy_routes": ("/accounts/signup/=fallback, accounts:login=Open",
                             (("/accounts/signup/", "fallback"), ("accounts:login", "open"))),
    "fallback_secret": ("f" * 40, Secret("f" * 40)),
    "fallback_cost": ("5000", 5000),
    "fallback_ttl": ("60", 60.0),
    "outage_rate": ("5/minute", "5/minute"),
    "outage_rate_max_clients": ("50000", 50_000),
    "trusted_proxies": ("10.0.0.0/8, 192.168.1.7", ("10.0.0.0/8", "192.168.1.7/32")),
    # Issue 29: a second vendor as the fallback challenge (read without FAILOPEN_FALLBACK_SECRET,
    # which it excludes: see env_for).
    "fallback_vendor": (" hCaptcha ", "hcaptcha"),
    "fallback_private_key": ("0xfallback-secret-value", Secret("0xfallback-secret-value")),
    "fallback_public_key": ("site-2", "site-2"),
    "fallback_verify_url": ("https://hcaptcha-proxy.example.com/siteverify",
                            "https://hcaptcha-proxy.example.com/siteverify"),
    "fallback_vendor_url": ("https://js.example.com/", "https://js.example.com"),
}
SECOND_VENDOR = {"fallback_vendor", "fallback_private_key", "fallback_public_key",
                 "fallback_verify_url", "fallback_vendor_url"}


def env_for(name: str) -> dict[str, str]:
    """Every variable of ENV_TABLE that can stand in one Config with ``name``'s: ALTCHA's secret
    or the second vendor's settings, never both (Config refuses mixing the two challenges)."""
    left_out = {"fallback_secret"} if name in SECOND_VENDOR else SECOND_VENDOR
    return {env_name(field): text for field, (text, _) in ENV_TABLE.items()
            if field not in left_out}


def test_the_env_table_has_every_config_field() -> None:
    fields = {spec.name for spec in dataclasses.fields(Config)}
    assert fields - set(ENV_TABLE) == set(), "add the new field(s) to ENV_TABLE"
    assert set(ENV_TABLE) - fields == set(), "ENV_TABLE names fields Config no longer has"


@pytest.mark.parametrize("name", sorted(ENV_TABLE))
def test_from_env_reads_every_field(name: str) -> None:
    config = Config.from_env(env_for(name))
    expected = ENV_TABLE[name][1]
    assert getattr(config, name) == expected
    assert type(getattr(config, name)) is type(expected)
    assert getattr(Config(), name) != expected, "the table's value must not be the default"


def test_the_env_values_take_effect() -> None:
    config = Config.from_env(env_for("poll_interval"))
    assert config.is_protected("POST", "/accounts/login/")
    assert config.is_protected("PUT", "/accounts/signup/x")
    assert not config.is_protected("GET", "/accounts/login/")
    assert not config.is_protected("POST", "/about/")


def test_keyword_overrides_win_over_env() -> None:
    config = Config.from_env({"FAILOPEN_POLL_INTERVAL": "5"}, poll_interval=7.0)
    assert config.poll_interval == 7.0


def test_empty_env_values_are_ignored() -> None:
    assert Config.from_env({"FAILOPEN_POLL_INTERVAL": ""}).poll_interval == 30.0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FAILOPEN_POLL_INTERVAL": "soon"}, "FAILOPEN_POLL_INTERVAL"),
        ({"FAILOPEN_POLL_INTERVAL": "-1"}, "FAILOPEN_POLL_INTERVAL"),
        ({"FAILOPEN_POLL_INTERVAL": "nan"}, "FAILOPEN_POLL_INTERVAL"),
        ({"FAILOPEN_STATUS_URL": "http://status.example.com"}, "https"),
        ({"FAILOPEN_STATUS_URL": "status.example.com"}, "FAILOPEN_STATUS_URL"),
        ({"FAILOPEN_VERIFY_URL": "https://v.example.com/"}, "FAILOPEN_PRIVATE_KEY"),
        ({"FAILOPEN_BYPASS_ON": "operational"}, "FAILOPEN_BYPASS_ON"),
        ({"FAILOPEN_MODE": "yolo"}, "FAILOPEN_MODE"),
        ({"FAILOPEN_STORE": "s3://bucket"}, "FAILOPEN_STORE"),
        ({"FAILOPEN_REDIS_PREFIX": "my site"}, "FAILOPEN_REDIS_PREFIX"),
        ({"FAILOPEN_FLEET_LEASE": "2"}, "FAILOPEN_FLEET_LEASE"),
        ({"FAILOPEN_PROTECTED_PATHS": "login"}, "FAILOPEN_PROTECTED_PATHS"),
        ({"FAILOPEN_OPEN_AFTER": "1.5"}, "FAILOPEN_OPEN_AFTER"),
        ({"FAILOPEN_POLL_JITTER": "2"}, "FAILOPEN_POLL_JITTER"),
        ({"FAILOPEN_INDICATOR_FALLBACK": "maybe"}, "FAILOPEN_INDICATOR_FALLBACK"),
        ({"FAILOPEN_STALE_AFTER": "1"}, "FAILOPEN_STALE_AFTER"),
        ({"FAILOPEN_BACKOFF_MAX": "0"}, "FAILOPEN_BACKOFF_MAX"),
        ({"FAILOPEN_MAX_STALE_BYPASS": "-5"}, "FAILOPEN_MAX_STALE_BYPASS"),
        ({"FAILOPEN_MAX_STALE_BYPASS": "inf"}, "FAILOPEN_MAX_STALE_BYPASS"),
        ({"FAILOPEN_MAX_STALE_BYPASS": "60"}, "FAILOPEN_MAX_STALE_BYPASS: 60s is shorter"),
        ({"FAILOPEN_MAX_STALE_BYPASS": "100", "FAILOPEN_STALE_AFTER": "120"},
         "at least 120"),
    ],
)
def test_bad_values_fail_with_the_setting_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.from_env(env)


@pytest.mark.parametrize(
    ("interval", "expected"), [(0.5, 5.0), (5.0, 50.0), (30.0, 300.0), (60.0, 300.0)]
)
def test_backoff_max_defaults_to_ten_intervals_at_most_five_minutes(
    interval: float, expected: float
) -> None:
    config = Config(poll_interval=interval)
    assert config.backoff_max is None
    assert config.backoff_max_seconds == expected
    # Still a setting: the variable wins over the proportional default, in either direction.
    env = {"FAILOPEN_POLL_INTERVAL": str(interval), "FAILOPEN_BACKOFF_MAX": "600"}
    assert Config.from_env(env).backoff_max_seconds == 600.0
    assert Config(poll_interval=interval, backoff_max=1.0).backoff_max_seconds == 1.0


def test_max_stale_bypass_defaults_to_fifteen_minutes_or_the_stale_limit() -> None:
    assert Config().max_stale_bypass_seconds == 900.0
    assert Config.from_env({"FAILOPEN_MAX_STALE_BYPASS": "300"}).max_stale_bypass_seconds == 300.0
    # A site that polls hourly on purpose keeps working: its bypass ends once it is stale.
    assert Config(poll_interval=3600.0).max_stale_bypass_seconds == 3 * 3600.0
    assert Config(stale_after=90.0, max_stale_bypass=90.0).max_stale_bypass_seconds == 90.0


def test_plain_http_is_fine_on_loopback() -> None:
    config = Config(
        status_url="http://127.0.0.1:8000", verify_url="http://localhost:9/v", private_key="k"
    )
    assert config.status_url == "http://127.0.0.1:8000"


def test_unknown_setting_names_are_errors() -> None:
    with pytest.raises(ConfigError, match="POLL_INTERVALL"):
        Config.from_mapping({"POLL_INTERVALL": 3})
    assert Config.from_mapping({"POLL_INTERVAL": 3}).poll_interval == 3.0


def test_mapping_beats_env_and_accepts_lists() -> None:
    config = Config.from_mapping(
        {"PROTECTED_PATHS": ["/login/"], "BYPASS_ON": ["major_outage"]},
        environ={"FAILOPEN_PROTECTED_PATHS": "/other/"},
    )
    assert config.protected_paths == ("/login/",)
    assert config.bypass_on == frozenset({"major_outage"})


def test_admin_token_never_in_repr_or_describe() -> None:
    config = Config(admin_token="adm-secret-value-0123456789")
    assert "adm-secret-value" not in repr(config)
    assert config.describe()["admin_token"] == "***"


@pytest.mark.parametrize("token", ["short", " x" * 5, "x" * 23])
def test_a_guessable_admin_token_fails_at_start_up_without_echoing_it(token: str) -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_ADMIN_TOKEN: must be at least 24") as info:
        Config(admin_token=token)
    assert token.strip() == "" or token not in str(info.value)


def test_private_key_never_in_repr_or_describe() -> None:
    config = Config(verify_url="https://v.example.com/", private_key="pk-secret-value")
    assert "pk-secret-value" not in repr(config)
    assert "pk-secret-value" not in str(config.describe())
    assert config.describe()["private_key"] == "***"


def test_env_name() -> None:
    assert env_name("poll_interval") == "FAILOPEN_POLL_INTERVAL"


def test_indicator_values_need_the_fallback() -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_INDICATOR_FALLBACK"):
        Config.from_env({"FAILOPEN_BYPASS_ON": "major_outage,indicator:major"})
    config = Config.from_env(
        {"FAILOPEN_BYPASS_ON": "indicator:major", "FAILOPEN_INDICATOR_FALLBACK": "true"}
    )
    assert config.bypass_on == frozenset({"indicator:major"})


def test_url_errors_never_echo_credentials() -> None:
    for url in ("http://ops:S3cretPass@status.example.com", "https://ops:S3cretPass@status.x"):
        with pytest.raises(ConfigError) as caught:
            Config(status_url=url)
        assert "S3cretPass" not in str(caught.value)
        assert "credentials" in str(caught.value)


def test_only_localhost_itself_may_use_plain_http() -> None:
    with pytest.raises(ConfigError, match="https"):
        Config(status_url="http://evil.localhost/")
    assert Config(status_url="http://[::1]:8000").status_url == "http://[::1]:8000"


def test_each_vendor_presets_its_script_origin_and_first_widget_mode() -> None:
    assert (Config(vendor="turnstile").vendor_url, Config(vendor="turnstile").widget) == (
        "https://challenges.cloudflare.com", "visible")
    assert Config(vendor="hcaptcha").vendor_url == "https://js.hcaptcha.com"
    assert Config(vendor="recaptcha").vendor_url == "https://www.google.com"
    assert Config(vendor="recaptcha-enterprise").widget == "score"  # its keys are score keys
    assert Config(vendor="friendly-captcha").vendor_url == "https://cdn.jsdelivr.net"
    # The spec's vendor: nothing preset, as before; the setting is required for the snippet.
    assert (Config().vendor_url, Config().widget) == (None, None)
    # A setting given wins; a preset follows the vendor through replace().
    given = Config(vendor="hcaptcha", vendor_url="https://proxy.example/h", widget="invisible")
    assert (given.vendor_url, given.widget) == ("https://proxy.example/h", "invisible")
    assert Config(vendor="turnstile").replace(vendor="hcaptcha").vendor_url == \
        "https://js.hcaptcha.com"
    assert Config(vendor="turnstile").replace(vendor="enforcement").vendor_url is None


def test_a_widget_mode_the_vendor_has_not_stops_start_up() -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_WIDGET: 'score' is not a Turnstile "
                                          "widget mode; use one of: visible, invisible"):
        Config(vendor="turnstile", widget="score")
    with pytest.raises(ConfigError, match="FAILOPEN_WIDGET: .*has no widget modes; remove it"):
        Config(widget="visible")
    assert Config.from_env({"FAILOPEN_VENDOR": "recaptcha", "FAILOPEN_WIDGET": "score"}).widget \
        == "score"


def test_the_vendor_url_is_a_base_the_snippet_can_extend() -> None:
    assert Config(vendor_url="http://127.0.0.1:8404/").vendor_url == "http://127.0.0.1:8404"
    assert Config(vendor_url="https://cdn.example/x/").vendor_url == "https://cdn.example/x"
    # The browser would load the challenge script over plain http from anyone on the path.
    with pytest.raises(ConfigError, match="FAILOPEN_VENDOR_URL.*https"):
        Config(vendor_url="http://client.vendor.example")
    with pytest.raises(ConfigError, match="FAILOPEN_VENDOR_URL.*query"):
        Config(vendor_url="https://client.vendor.example/?v=2")
    with pytest.raises(ConfigError, match="FAILOPEN_VENDOR_URL"):
        Config.from_env({"FAILOPEN_VENDOR_URL": "client.vendor.example"})


def test_collections_given_in_code_are_normalised() -> None:
    config = Config(protected_methods=["post", "Put"], protected_paths=["/login"],
                    bypass_on={"major_outage"})
    assert config.protected_methods == frozenset({"POST", "PUT"})
    assert config.is_protected("POST", "/login/x")
    assert config.protected_paths == ("/login",)
    assert config.bypass_on == frozenset({"major_outage"})
    with pytest.raises(ConfigError, match="FAILOPEN_PROTECTED_PATHS"):
        Config(protected_paths="/login")  # type: ignore[arg-type]


# A blank private key is no key at all (tests/test_config_secrets.py): only a non-string is wrong.
@pytest.mark.parametrize(("field", "value"), [
    (field, value) for field in ("private_key", "public_key", "global_component")
    for value in ("", "  ", 5) if field != "private_key" or not isinstance(value, str)])
def test_string_settings_must_be_non_empty_strings(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=env_name(field)) as caught:
        Config(**{field: value})  # type: ignore[arg-type]
    assert repr(value) not in str(caught.value) or value == ""


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("POST", "/accounts/login/", True),
    ("post", "/accounts/login/", True),      # servers pass it through; frameworks route it as POST
    ("POST", "/accounts/login/x", True),
    ("POST", "/accounts/login", True),       # routers often answer both spellings
    ("POST", "//accounts//login/", True),
    ("POST", "/accounts/./login/", True),
    ("POST", "/x/../accounts/login/", True),
    ("POST", "/accounts/logout/", False),
    ("POST", "/accounts/log", False),
    ("GET", "/accounts/login/", False),
    ("HEAD", "/accounts/login/", False),
    ("POST", "/", False),
])
def test_is_protected_covers_every_spelling_of_a_protected_route(
    method: str, path: str, expected: bool
) -> None:
    config = Config(protected_paths=("/accounts/login/",), verify_url="https://v.example.com/",
                    private_key="k")
    assert config.is_protected(method, path) is expected


# What a router may still resolve to "/accounts/login/" (or "/accounts/login"): Starlette's route
# regex ends in "$", which also matches before a final "\n"; other routers and servers strip
# trailing whitespace, stop at a NUL or a ";", decode "%XX" once more, or take "\\" for "/".
# Every combination with the slash and dot-segment spellings counts too.
SPELLINGS = [
    "/accounts/login\n", "/accounts/login/\n", "/accounts/login\r\n", "/accounts/login ",
    "/accounts/login\t", "/accounts/login\x00", "/accounts/login\x00.php", "/accounts/login\x0b",
    "/accounts/login\x1f", "/accounts/login\x7f", "/accounts/login\x85", "/accounts/login\xa0",
    "/accounts/login\u2028", "/accounts/login\u3000", "/accounts/login\ufeff",
    "/accounts/login\u200b", "/accounts/login;jsessionid=1", "/accounts/login?x",
    "/accounts/login#",
    "/accounts/login%0A", "/accounts/login%0a", "/accounts/login%2F", "/accounts%2Flogin",
    "/accounts/login%20", "/accounts/log%69n", "/accounts\\login", "/accounts/login\\",
    "//accounts/login\n", "/accounts/./login\n", "/x/../accounts/login \n", "/accounts/login/.\n",
    "/accounts/login\n/", "/accounts/lo\ngin", "/accounts/login \t\r\n",
]


@pytest.mark.parametrize("path", SPELLINGS)
def test_every_spelling_a_router_may_resolve_is_protected(path: str) -> None:
    config = Config(protected_paths=("/accounts/login/",))
    assert config.is_protected("POST", path), repr(path)
    assert config.protects_path(path), repr(path)


@pytest.mark.parametrize("path", [
    "/accounts/logins", "/accounts/logi\n", "/accounts/log", "/accounts/logout\n",
    "/accounts/%6cogout", "/café/login", "/accounts/login.php", "/accounts\nlogin",
])
def test_other_routes_stay_unprotected(path: str) -> None:
    config = Config(protected_paths=("/accounts/login/",))
    assert not config.protects_path(path), repr(path)


def test_head_is_protected_wherever_get_is() -> None:
    config = Config(protected_paths=("/search/",), protected_methods={"GET"},
                    verify_url="https://v.example.com/", private_key="k")
    assert config.is_protected("HEAD", "/search/") and config.is_protected("head", "/search/")
    assert config.protected_methods == frozenset({"GET"}), "the setting itself is not rewritten"


@pytest.mark.parametrize(("key", "meant"), [
    ("status_url", "STATUS_URL"),  # lower case: was accepted, then silently dropped
    ("Status_Url", "STATUS_URL"),
    ("STATUS_ULR", "STATUS_URL"),
    ("PROTECTED_PATH", "PROTECTED_PATHS"),
    ("FAILOPEN_STATUS_URL", "STATUS_URL"),  # the variable's name inside the mapping
])
def test_misspelled_setting_names_say_what_was_meant(key: str, meant: str) -> None:
    with pytest.raises(ConfigError, match=f"did you mean '{meant}'"):
        Config.from_mapping({key: "https://status.example.com"})


def test_setting_name_far_from_any_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="known: ADMIN_TOKEN, AUDIT"):
        Config.from_mapping({"COLOUR": "blue"})
    with pytest.raises(ConfigError, match="keys are strings"):
        Config.from_mapping({1: "x"})  # type: ignore[dict-item]


def test_protected_views_are_names_not_paths() -> None:
    assert Config.from_env({"FAILOPEN_PROTECTED_VIEWS": "accounts:login, app.views.Login"}
                           ).protected_views == ("accounts:login", "app.views.Login")
    with pytest.raises(ConfigError, match="FAILOPEN_PROTECTED_PATHS"):
        Config(protected_views=("/login/",))


# --- durations: one reading for variables, settings and flags (issue 21, B.7) ---------------


@pytest.mark.parametrize(("name", "text", "seconds"), [
    ("FAILOPEN_POLL_INTERVAL", "30s", 30.0), ("FAILOPEN_POLL_INTERVAL", "2m", 120.0),
    ("FAILOPEN_STATUS_TIMEOUT", "500ms", 0.5), ("FAILOPEN_MAX_STALE_BYPASS", "1h", 3600.0),
    ("FAILOPEN_FALLBACK_TTL", "5m", 300.0), ("FAILOPEN_FLEET_LEASE", " 45 ", 45.0),
    ("FAILOPEN_CONFIRM_TTL", "1.5", 1.5)])
def test_duration_variables_take_units(name: str, text: str, seconds: float) -> None:
    config = Config.from_env({"FAILOPEN_STATUS_URL": "https://status.example.com", name: text})
    field = name.removeprefix("FAILOPEN_").lower()
    assert getattr(config, field) == seconds


@pytest.mark.parametrize(("text", "said"), [
    ("-5", "'-5' is negative; a duration is above 0"), ("0s", "'0s' is zero"),
    ("30x", "'30x' is not a duration like 30s, 5m, 1h"), ("thirty", "not a duration")])
def test_a_bad_duration_variable_names_the_variable_and_what_is_wrong(text: str,
                                                                      said: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Config.from_env({"FAILOPEN_POLL_INTERVAL": text})
    assert str(raised.value).startswith("FAILOPEN_POLL_INTERVAL: ") and said in str(raised.value)


def test_a_settings_mapping_takes_durations_too() -> None:
    config = Config.from_mapping({"POLL_INTERVAL": "10s", "STATUS_TIMEOUT": "2s"}, environ={})
    assert (config.poll_interval, config.status_timeout) == (10.0, 2.0)
    assert Config.from_mapping({"POLL_INTERVAL": 7}, environ={}).poll_interval == 7


@pytest.mark.parametrize("methods", ["POST PUT", "POST;PUT", "POST\tPUT"])
def test_protected_methods_that_no_request_can_carry_fail_at_start_up(methods: str) -> None:
    # Found in review: "POST PUT" (spaces, not commas) was kept as one method named "POST PUT",
    # which no request carries: POST and PUT went unprotected, without a word at start-up.
    with pytest.raises(ConfigError, match="FAILOPEN_PROTECTED_METHODS.*comma"):
        Config.from_env({"FAILOPEN_PROTECTED_METHODS": methods})
    with pytest.raises(ConfigError, match="FAILOPEN_PROTECTED_METHODS"):
        Config.from_mapping({"PROTECTED_METHODS": methods})


@pytest.mark.parametrize("methods", [[" PUT"], ["POST", ""], ["P UT"], ["POST\n"]])
def test_protected_methods_given_in_code_are_http_methods(methods: list[str]) -> None:
    # In code nothing strips them: " PUT" protected nothing (a request says "PUT").
    with pytest.raises(ConfigError, match="FAILOPEN_PROTECTED_METHODS"):
        Config(protected_methods=methods)


def test_every_method_a_server_may_pass_is_accepted() -> None:
    config = Config(protected_methods=["post", "PROPFIND", "M-SEARCH", "PURGE"])
    assert config.protected_methods == frozenset({"POST", "PROPFIND", "M-SEARCH", "PURGE"})
