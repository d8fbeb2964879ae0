"""The Redis store: overrides shared by a fleet, expiry by TTL, passwords masked, and a Redis that
is down, answers garbage or lost its keys never breaks a process."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

import pytest
from _redis_kit import RedisServer, needs_redis

from failopen import Config
from failopen.engine.flag import EnforcementFlag, Override
from failopen.exceptions import ConfigError, StoreError
from failopen.stores import open_store
from failopen.stores.redis import RedisStore
from failopen.testing import free_port

SECRET = "s3cret-Pa55-word"


def test_redis_urls_are_accepted_at_config_and_masked() -> None:
    config = Config(store=f"redis://:{SECRET}@127.0.0.1:6379/0")
    assert SECRET not in repr(config) and SECRET not in json.dumps(config.describe())
    # The password moves to store_password, where every path that shows a Config masks it.
    acl = Config(store=f"rediss://u:{SECRET}@127.0.0.1:6380/1")
    assert acl.store == "rediss://u@127.0.0.1:6380/1"
    assert acl.store_password is not None and acl.store_password.reveal() == SECRET
    assert acl.describe()["store"] == "rediss://u:***@127.0.0.1:6380/1"
    unix = "unix:///run/redis/redis.sock?db=2"
    assert Config(store=unix).store == unix


@pytest.mark.parametrize("url", ["redis://", "redis:///0", f"redis://:{SECRET}@/0", "unix://sock"])
def test_a_redis_url_without_a_server_fails_at_config(url: str) -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_STORE") as raised:
        Config(store=url)
    assert SECRET not in str(raised.value)


def test_import_failopen_does_not_import_redis() -> None:
    code = ("import sys, failopen, failopen.runtime, failopen.engine.fleet, failopen.stores.redis; "
            "assert 'redis' not in sys.modules, 'redis imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_without_redis_py_the_error_names_the_extra() -> None:
    code = ("import sys; sys.modules['redis'] = None\n"
            "import importlib.util; importlib.util.find_spec = lambda n, *a: None\n"
            "from failopen import Config\n"
            "try:\n    Config(store='redis://:pw@127.0.0.1:1/0')\n"
            "except Exception as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    assert 'pip install "failopen[redis]"' in out and "pw" not in out.replace("***", "")


def test_an_unreachable_redis_is_a_store_error_without_the_password() -> None:
    store = open_store(f"redis://:{SECRET}@127.0.0.1:{free_port()}/0")
    for call in (store.load, lambda: store.save(None), store.changed):
        with pytest.raises(StoreError) as raised:
            call()
        assert SECRET not in str(raised.value) and "***" in str(raised.value)
    assert SECRET not in repr(store) and SECRET not in store.describe()


@needs_redis
def test_override_round_trip_and_ttl_is_the_expiry(redis_server: RedisServer) -> None:
    store = open_store(redis_server.url)
    flag = EnforcementFlag(store=store)
    flag.force_off("vendor outage INC-9", ttl=120)
    client = redis_server.client()
    ttl_ms = client.pttl("failopen:override")
    assert 110_000 < ttl_ms <= 120_000
    other = EnforcementFlag(store=open_store(redis_server.url))
    assert other.override is not None and other.override.reason == "vendor outage INC-9"
    flag.automatic("over")
    assert client.get("failopen:override") is None
    flag.force_on("drill")  # until lifted: no TTL
    assert client.pttl("failopen:override") == -1


@needs_redis
def test_override_lapses_by_ttl_with_no_process_running(redis_server: RedisServer) -> None:
    EnforcementFlag(store=open_store(redis_server.url)).force_off("short", ttl=0.3)
    time.sleep(0.4)
    assert redis_server.client().exists("failopen:override") == 0
    assert EnforcementFlag(store=open_store(redis_server.url)).override is None


@needs_redis
def test_prefixes_keep_sites_apart(redis_server: RedisServer) -> None:
    EnforcementFlag(store=open_store(redis_server.url, prefix="a:")).force_on("site a")
    assert EnforcementFlag(store=open_store(redis_server.url, prefix="b:")).override is None
    assert redis_server.client().exists("a:override") == 1


@needs_redis
@pytest.mark.parametrize("garbage", [b"{not json", b"\xff\xfe", b'{"enforce": false, "set_at": 1}',
                                     json.dumps({"enforce": "no", "set_at": 1}).encode()])
def test_garbage_override_keeps_the_last_known(
    redis_server: RedisServer, garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(redis_server.url)
    flag = EnforcementFlag(store=store)
    flag.force_on("drill")
    redis_server.client().set("failopen:override", garbage)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            flag.refresh()
    assert flag.override is not None and flag.override.reason == "drill"
    assert len([r for r in caplog.records if "unreadable" in r.getMessage()]) == 1


@needs_redis
def test_a_stored_force_off_without_expiry_is_refused(redis_server: RedisServer) -> None:
    value = json.dumps({"enforce": False, "reason": "x", "set_at": time.time(),
                        "expires_at": None})
    redis_server.client().set("failopen:override", value)
    with pytest.raises(StoreError):
        open_store(redis_server.url).load()


@needs_redis
def test_restore_after_lost_keys_is_first_come_only(redis_server: RedisServer) -> None:
    a = open_store(redis_server.url)
    b = open_store(redis_server.url)
    assert isinstance(a, RedisStore) and isinstance(b, RedisStore)
    now = time.time()
    kept = Override(False, "outage", now, now + 60)
    assert a.restore(kept) is True
    assert b.restore(Override(True, "other", now)) is False
    loaded = b.load()
    assert loaded is not None and loaded.reason == "outage"
    assert 50_000 < a.override_ttl() <= 60_000
