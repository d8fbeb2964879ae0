"""The outsider's review of issue 18's merged work: each test is a finding that failed on main."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable

import pytest
from _redis_kit import RedisServer

from failopen import Config, Secret
from failopen.cli.command import main
from failopen.exceptions import ConfigError
from failopen.runtime import FailOpen
from failopen.stores import split_password
from failopen.stores.redis import RedisStore

SECRET = "Pa55-word-Tail"


@pytest.mark.parametrize("url", [
    f"redis://:ab/{SECRET}@127.0.0.1:6379/0",  # a base64 password's "/", unescaped
    f"redis://app:ab/{SECRET}@127.0.0.1:6379/0",
    f"redis://:ab?{SECRET}@127.0.0.1:6379/0",
    f"redis://:ab#{SECRET}@127.0.0.1:6379/0",
    f"redis://app:ab@cd/{SECRET}@127.0.0.1:6379/0",
], ids=["slash", "user-slash", "question-mark", "hash", "at-then-slash"])
def test_a_store_url_whose_password_does_not_parse_is_refused_without_showing_it(
        url: str) -> None:
    # urlsplit (and redis-py) end the userinfo at the "/": the URL "had no password", stayed in
    # Config.store as written, and dataclasses.asdict(config) printed it in clear.
    with pytest.raises(ConfigError) as caught:
        Config(store=url)
    assert "percent-encode" in str(caught.value)
    assert SECRET not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        RedisStore(url)  # no attribute of a store may hold it in clear either
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(("url", "password"), [
    (f"redis://127.0.0.1:6379/0?password=a@{SECRET}", f"a@{SECRET}"),
    (f"redis://:{SECRET}@127.0.0.1:6379/0?client_name=me@host", SECRET),
    ("redis://127.0.0.1:6379/0?client_name=me@host", None),
    (f"redis://:a%2F{SECRET}@127.0.0.1:6379/0", f"a/{SECRET}"),  # percent-encoded: fine
])
def test_an_at_sign_where_redis_py_reads_it_as_written_is_accepted(
        url: str, password: str | None) -> None:
    stripped, found = split_password(url)
    assert found == password and SECRET not in stripped
    assert SECRET not in str(dataclasses.asdict(Config(store=url)))


def test_a_blank_query_password_before_the_real_one_does_not_keep_it_in_the_url() -> None:
    # redis-py reads the first non-blank ?password= (parse_qs drops blank values).
    url = f"redis://127.0.0.1:6379/0?password=&password={SECRET}"
    assert split_password(url) == ("redis://127.0.0.1:6379/0", SECRET)
    config = Config(store=url)
    assert SECRET not in str(dataclasses.asdict(config))
    assert config.store_password is not None and config.store_password.reveal() == SECRET


# --- fleet records nested deeper than json can parse ---------------------------------------------

NESTED = "[" * 100_000  # json.loads raises RecursionError, which is no ValueError


def test_a_nested_leader_key_is_one_fallback_not_a_traceback_per_sync(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
) -> None:
    # A plain garbage leader key is "unfollowable": one ERROR, the override still followed. A
    # nested one raised out of _is_token: a traceback every sync (twice a second per process),
    # and the process stopped following the override an operator places.
    (runtime,) = fleet(1)
    assert runtime.fleet is not None
    client = redis_server.client()
    client.set("failopen:epoch", "1")
    client.set("failopen:leader", NESTED)
    with caplog.at_level(logging.WARNING, logger="failopen.fleet"):
        for _ in range(5):
            runtime.fleet.sync()
    events = [getattr(r, "event", None) for r in caplog.records]
    assert "failopen.fleet_error" not in events, events
    assert events.count("failopen.fleet_store_unusable") == 1
    assert runtime.fleet.store_state == "local"
    # The operator's force-off still reaches this process.
    # (It applies it at its next sync, below: the command is not asked to wait for it.)
    assert main(["override", "off", "--store", redis_server.url, "--ttl", "5m",
                 "--wait", "0"]) == 0, capsys.readouterr().err
    runtime.fleet.sync()
    runtime.flag.refresh()
    assert not runtime.flag.state.enforce, runtime.flag.state


def test_a_nested_confirmation_lock_does_not_stop_our_confirmation(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
) -> None:
    # may_confirm runs on the request path (the confirmer, which never raises): the holder's
    # value raised RecursionError out of it, and the request got an internal error.
    (runtime,) = fleet(1, confirm_ttl=30.0)
    assert runtime.fleet is not None
    runtime.fleet.sync()  # following the store, as a running member does
    assert runtime.fleet.store_state == "redis"
    redis_server.client().set("failopen:confirm", NESTED, px=60_000)
    assert runtime.fleet.may_confirm()  # not a lock of ours: this process checks its own page


def test_failopen_fleet_shows_the_fleet_around_garbage_heartbeats(
    capsys: pytest.CaptureFixture[str], redis_server: RedisServer,
) -> None:
    client = redis_server.client()
    client.set("failopen:epoch", "1")
    client.set("failopen:leader", NESTED, px=60_000)
    client.set("failopen:proc:nested", NESTED, px=60_000)
    client.set("failopen:proc:huge", json.dumps({"id": "huge", "seen": 10**400}), px=60_000)
    client.set("failopen:proc:ok", json.dumps({"id": "ok", "seen": time.time()}), px=60_000)
    capsys.readouterr()
    code = main(["fleet", "--store", redis_server.url, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    assert report["leader"] is None
    assert [p["id"] for p in report["processes"]] == ["ok"]


# --- an empty secret, given as a failopen.Secret -------------------------------------------------


@pytest.mark.parametrize("field", ["private_key", "admin_token", "store_password"])
@pytest.mark.parametrize("blank", ["", "  "])
def test_an_empty_secret_object_means_unset_as_an_empty_string_does(
        field: str, blank: str) -> None:
    # Config(admin_token=Secret(os.environ.get("X", ""))) said "must be at least 24 characters"
    # (and an empty store password "only a Redis store takes a password"): item 10 holds for
    # the public Secret type too.
    config = Config(**{field: Secret(blank)})
    assert getattr(config, field) is None
