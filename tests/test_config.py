"""Config: defaults, environment, validation messages that name the setting."""

from __future__ import annotations

import pytest

from failopen.config import Config, env_name
from failopen.exceptions import ConfigError


def test_defaults_are_safe() -> None:
    config = Config()
    assert config.bypass_on == frozenset({"partial_outage", "major_outage"})
    assert config.open_after == 1 and config.close_after == 2
    assert config.mode == "enforce"
    assert config.store == "memory:"
    assert config.token_field == "enforcement-token"
    assert config.token_header == "X-Enforcement-Token"
    assert config.stale_after_seconds == 90.0


def test_from_env_reads_every_documented_name() -> None:
    env = {
        "FAILOPEN_STATUS_URL": "https://status.example.com",
        "FAILOPEN_POLL_INTERVAL": "0.5",
        "FAILOPEN_VERIFY_URL": "https://acme-verify.example.com/api/v4/verify/",
        "FAILOPEN_PRIVATE_KEY": "pk-secret-value",
        "FAILOPEN_PUBLIC_KEY": "PUB-1",
        "FAILOPEN_VERIFY_TIMEOUT": "2",
        "FAILOPEN_PROTECTED_PATHS": "/accounts/login/, /accounts/signup/",
        "FAILOPEN_TOKEN_FIELD": "tok",
        "FAILOPEN_TOKEN_HEADER": "X-Tok",
        "FAILOPEN_BYPASS_ON": "major_outage",
        "FAILOPEN_GLOBAL_COMPONENT": "abc123",
        "FAILOPEN_STORE": "file:///tmp/override.json",
        "FAILOPEN_MODE": "shadow",
    }
    config = Config.from_env(env)
    assert config.status_url == "https://status.example.com"
    assert config.poll_interval == 0.5
    assert config.private_key == "pk-secret-value"
    assert config.protected_paths == ("/accounts/login/", "/accounts/signup/")
    assert config.bypass_on == frozenset({"major_outage"})
    assert config.mode == "shadow"
    assert config.verify_timeout == 2.0
    assert config.global_component == "abc123"
    assert config.is_protected("POST", "/accounts/login/")
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
        ({"FAILOPEN_PROTECTED_PATHS": "login"}, "FAILOPEN_PROTECTED_PATHS"),
        ({"FAILOPEN_OPEN_AFTER": "1.5"}, "FAILOPEN_OPEN_AFTER"),
        ({"FAILOPEN_POLL_JITTER": "2"}, "FAILOPEN_POLL_JITTER"),
        ({"FAILOPEN_INDICATOR_FALLBACK": "maybe"}, "FAILOPEN_INDICATOR_FALLBACK"),
        ({"FAILOPEN_STALE_AFTER": "1"}, "FAILOPEN_STALE_AFTER"),
    ],
)
def test_bad_values_fail_with_the_setting_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.from_env(env)


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
