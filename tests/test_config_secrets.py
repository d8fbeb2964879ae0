"""Secrets in a Config (issue 18, items 10 and 12): masked on every path that walks the fields,
and an empty string means "not set"."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from typing import Any

import pytest
from _redis_kit import RedisServer

from failopen import Config, Secret
from failopen.engine.flag import Override
from failopen.exceptions import ConfigError
from failopen.runtime import FailOpen

KEY = "pk-Secret-Value-0001"
TOKEN = "adm-Secret-Token-0123456789abcdef"
PASSWORD = "Redis-Pa55-word-0002"
VERIFY = "https://verify.vendor.example/api/v1/verify"


def _walks(config: Config) -> dict[str, str]:
    """What a user, a logger or a debug page may print by walking a Config's fields."""
    fields = dataclasses.fields(config)
    return {
        "repr": repr(config),
        "str": str(config),
        "asdict": str(dataclasses.asdict(config)),
        "astuple": str(dataclasses.astuple(config)),
        "fields+getattr": str({f.name: getattr(config, f.name) for f in fields}),
        "f-string": " ".join(f"{getattr(config, f.name)}" for f in fields),
        "vars": str(vars(config)),
        "copy": repr(copy.copy(config)) + str(vars(copy.copy(config))),
        "deepcopy": str(vars(copy.deepcopy(config))),
        "replace": str(dataclasses.asdict(dataclasses.replace(config, poll_interval=7.0))),
        "describe": json.dumps(config.describe()),
    }


@pytest.mark.parametrize("settings", [
    {"VERIFY_URL": VERIFY, "PRIVATE_KEY": KEY, "ADMIN_TOKEN": TOKEN,
     "STORE": f"redis://:{PASSWORD}@127.0.0.1:6379/0"},
    {"VERIFY_URL": VERIFY, "PRIVATE_KEY": KEY, "ADMIN_TOKEN": TOKEN,
     "STORE": "redis://127.0.0.1:6379/0", "STORE_PASSWORD": PASSWORD},
    {"VERIFY_URL": VERIFY, "PRIVATE_KEY": KEY, "ADMIN_TOKEN": TOKEN,
     "STORE": f"rediss://app:{PASSWORD}@redis.internal:6380/1?socket_timeout=1"},
    {"VERIFY_URL": VERIFY, "PRIVATE_KEY": KEY, "ADMIN_TOKEN": TOKEN,
     "STORE": f"redis://redis.internal:6379/0?password={PASSWORD}&db=2"},
], ids=["url-password", "store-password", "acl-user", "query-password"])
def test_no_path_that_walks_a_config_shows_a_secret(settings: dict[str, Any]) -> None:
    config = Config.from_mapping(settings, environ={})
    for how, shown in _walks(config).items():
        for secret in (KEY, TOKEN, PASSWORD):
            assert secret not in shown, f"{how} shows a secret: {shown}"
    assert config.describe()["store_password"] == "***"
    # JSON of the raw fields refuses a secret rather than writing it.
    with pytest.raises(TypeError, match="not JSON serializable"):
        json.dumps(dataclasses.asdict(config))


def test_pickling_a_config_with_a_secret_is_refused_without_showing_it() -> None:
    config = Config(verify_url=VERIFY, private_key=KEY)
    with pytest.raises(TypeError, match="not pickled") as raised:
        pickle.dumps(config)
    assert KEY not in str(raised.value)
    # Without a secret there is nothing to leak: it pickles as before.
    plain = Config(poll_interval=5.0)
    assert pickle.loads(pickle.dumps(plain)) == plain


def test_the_code_that_uses_a_secret_reads_it_on_purpose() -> None:
    config = Config(verify_url=VERIFY, private_key=KEY, admin_token=TOKEN)
    assert isinstance(config.private_key, Secret) and isinstance(config.admin_token, Secret)
    assert config.private_key.reveal() == KEY and config.admin_token.reveal() == TOKEN
    # A Secret given in code is taken as is; Configs compare and hash by their values.
    same = Config(verify_url=VERIFY, private_key=Secret(KEY), admin_token=TOKEN)
    assert same == config and hash(same) == hash(config)
    assert config != config.replace(admin_token=TOKEN + "x")
    assert config.replace(poll_interval=7.0).private_key == Secret(KEY)


def test_a_password_in_the_store_url_moves_out_of_it() -> None:
    config = Config(store=f"rediss://app:{PASSWORD}@redis.internal:6380/1")
    assert config.store == "rediss://app@redis.internal:6380/1"
    assert config.store_password is not None and config.store_password.reveal() == PASSWORD
    query = Config(store=f"redis://redis.internal/0?db=2&password={PASSWORD}")
    assert query.store == "redis://redis.internal/0?db=2"
    assert query.store_password == Secret(PASSWORD)


def test_two_different_store_passwords_are_refused_without_echoing_either() -> None:
    with pytest.raises(ConfigError, match="give it once") as raised:
        Config.from_env({"FAILOPEN_STORE": f"redis://:{PASSWORD}@127.0.0.1/0",
                         "FAILOPEN_STORE_PASSWORD": "another-one"})
    assert PASSWORD not in str(raised.value) and "another-one" not in str(raised.value)
    # The same one twice is no conflict.
    same = Config.from_env({"FAILOPEN_STORE": f"redis://:{PASSWORD}@127.0.0.1/0",
                            "FAILOPEN_STORE_PASSWORD": PASSWORD})
    assert same.store_password == Secret(PASSWORD)


def test_a_store_password_for_a_store_without_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_STORE_PASSWORD: only a Redis store"):
        Config.from_env({"FAILOPEN_STORE_PASSWORD": PASSWORD})


@pytest.mark.parametrize("blank", ["", "   "])
def test_an_empty_secret_setting_means_unset(blank: str) -> None:
    # Django settings written as os.environ.get("X", ""): unset, never "too short".
    config = Config.from_mapping({"ADMIN_TOKEN": blank, "PRIVATE_KEY": blank,
                                  "STORE_PASSWORD": blank}, environ={})
    assert config.admin_token is None and config.private_key is None
    assert config.store_password is None
    assert Config(admin_token=blank, private_key=blank).admin_token is None
    env = Config.from_env({"FAILOPEN_ADMIN_TOKEN": blank, "FAILOPEN_PRIVATE_KEY": blank,
                           "FAILOPEN_STORE_PASSWORD": blank})
    assert env.admin_token is None and env.private_key is None and env.store_password is None


def test_an_empty_private_key_with_a_verify_url_says_it_is_required() -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_PRIVATE_KEY: required when FAILOPEN_VERIFY"):
        Config.from_mapping({"VERIFY_URL": VERIFY, "PRIVATE_KEY": ""}, environ={})


def test_a_secret_of_the_wrong_type_is_named_without_its_value() -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_ADMIN_TOKEN: expected a string, got bytes"):
        Config(admin_token=TOKEN.encode())  # type: ignore[arg-type]


@pytest.mark.parametrize("where", ["variable", "url", "query"])
def test_the_store_password_opens_a_redis_that_requires_it(
    redis_server: RedisServer, where: str
) -> None:
    """A real redis-server with requirepass: the password moved out of the URL, or given beside
    it, is the one the store authenticates with."""
    admin = redis_server.client()
    admin.config_set("requirepass", PASSWORD)
    host = redis_server.url.removeprefix("redis://")
    environ = {"variable": {"FAILOPEN_STORE": redis_server.url,
                            "FAILOPEN_STORE_PASSWORD": PASSWORD},
               "url": {"FAILOPEN_STORE": f"redis://:{PASSWORD}@{host}"},
               "query": {"FAILOPEN_STORE": f"{redis_server.url}?password={PASSWORD}"}}[where]
    runtime = FailOpen(Config.from_env(environ))
    try:
        runtime.store.save(Override(enforce=True, reason="drill", set_at=1.0, set_by="t"))
        loaded = runtime.store.load()
        assert loaded is not None and loaded.reason == "drill"
        shown = repr(runtime.store) + runtime.store.describe() + str(vars(runtime.store))
        assert PASSWORD not in shown and ":***@" in runtime.store.describe()
    finally:
        runtime.stop()
        admin.execute_command("AUTH", PASSWORD)
        admin.config_set("requirepass", "")


def test_the_cli_keeps_the_store_password_when_another_setting_is_bad(
    redis_server: RedisServer, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator must reach the store during an outage whatever else is misconfigured: a bad
    setting the verb does not use is only warned about, and the password is one it uses."""
    admin = redis_server.client()
    admin.config_set("requirepass", PASSWORD)
    try:
        monkeypatch.setenv("FAILOPEN_STORE", redis_server.url)
        monkeypatch.setenv("FAILOPEN_STORE_PASSWORD", PASSWORD)
        monkeypatch.setenv("FAILOPEN_POLL_INTERVAL", "soon")
        for verb in ("override", "fleet"):
            result = run(verb, "show") if verb == "override" else run(verb)
            assert result.code == 0, result.err
            assert "ignored a setting this command does not use" in result.err
            assert PASSWORD not in result.out + result.err
    finally:
        admin.execute_command("AUTH", PASSWORD)
        admin.config_set("requirepass", "")
