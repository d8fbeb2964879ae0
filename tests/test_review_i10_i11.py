"""Security review of issues #10 (browser snippet) and #11 (fleet mode): each test here failed on
main when written. Real Redis (started by the tests); no mocks."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from _redis_kit import RedisServer, same_deployment, wait_for

from failopen import Config
from failopen.runtime import FailOpen

pytestmark = pytest.mark.timeout(60)


def _follower_of_elsewhere(client: Any, config: Config) -> None:
    """Another machine of the same deployment leads (and publishes): this process follows."""
    client.set("failopen:epoch", "1")
    client.set("failopen:leader", json.dumps({"id": "elsewhere", "since": 1,
                                              **same_deployment(config)}), px=60_000)


def test_an_unusable_reading_does_not_cut_a_process_off_from_overrides(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    """A leader whose clock runs two minutes fast publishes readings every follower refuses.
    The followers poll for themselves then (right), but they also stopped reading the override
    key: an operator lifting a force-off (or forcing enforcement on) reached none of them, and
    they went on admitting tokenless requests until the force-off's own expiry (up to 7 days)."""
    client = redis_server.client()
    (runtime,) = fleet(1)
    _follower_of_elsewhere(client, runtime.config)
    (operator,) = fleet(1)  # never started: writes the store as `failopen override` does
    runtime.start()
    operator.flag.force_off("vendor outage INC-1", ttl=600)
    assert wait_for(lambda: not runtime.state.enforce)
    skewed = {"id": "elsewhere:7", "by": "elsewhere", "at": time.time() + 120, "kind": "watcher",
              "global_status": "major_outage", "source": "components", "regions": [],
              **same_deployment(runtime.config)}
    client.set("failopen:reading", json.dumps(skewed))
    assert wait_for(lambda: runtime.fleet is not None and runtime.fleet.store_state == "local")
    operator.flag.automatic("outage over")
    assert wait_for(lambda: runtime.state.enforce, timeout=5), runtime.state
    assert runtime.state.source == "watcher"
    # Forcing on reaches it too, while the reading is still refused.
    operator.flag.force_on("credential stuffing")
    assert wait_for(lambda: runtime.state.reason == "credential stuffing", timeout=5)
    assert runtime.fleet is not None and runtime.fleet.store_state == "local"


def test_building_the_runtime_makes_no_redis_call_in_the_callers_thread(
    failopen_config: Config, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from failopen.stores.redis import RedisStore

    callers: list[str] = []
    inner = RedisStore.call

    def call(self: RedisStore, *args: Any, **kwargs: Any) -> Any:
        callers.append(threading.current_thread().name)
        return inner(self, *args, **kwargs)

    monkeypatch.setattr(RedisStore, "call", call)
    runtime = FailOpen(failopen_config.replace(store=redis_server.url))  # what conf.runtime() does
    try:
        assert threading.current_thread().name not in callers
    finally:
        runtime.stop()


def test_an_override_already_in_redis_applies_on_the_watchers_first_turn(
    failopen_config: Config, redis_server: RedisServer
) -> None:
    """The runtime does not read Redis while it is built, but loses nothing by it: a force-off
    placed before this process started is in force after the watcher's first turn."""
    from failopen.engine.flag import EnforcementFlag
    from failopen.stores import open_store

    EnforcementFlag(store=open_store(redis_server.url)).force_off("INC-12", ttl=600)
    runtime = FailOpen(failopen_config.replace(store=redis_server.url))
    try:
        assert runtime.state.enforce is True  # not read yet: the safe side
        assert runtime.fleet is not None
        runtime.fleet.sync()
        runtime.watcher.tick()
        assert (runtime.state.enforce, runtime.state.source) == (False, "override")
    finally:
        runtime.stop()


def test_a_sync_read_before_a_local_override_does_not_drop_it(
    failopen_config: Config, redis_server: RedisServer
) -> None:
    """The watcher's sync reads the store, an operator in this process places a force-off, then
    the sync adopts what it read. It used to drop the force-off just placed (until the next
    sync), and a FLUSHALL at that moment made this process restore the store without it."""
    runtime = FailOpen(failopen_config.replace(store=redis_server.url))
    try:
        store, fleet = runtime.store, runtime.fleet
        assert fleet is not None
        snapshot = store.snapshot()  # type: ignore[attr-defined]  # the sync's read
        runtime.flag.force_off("INC-13", ttl=600)  # lands between the read and its use
        store.note_synced(snapshot[1])  # type: ignore[attr-defined]
        runtime.watcher.tick()
        assert (runtime.state.enforce, runtime.state.reason) == (False, "INC-13")
        redis_server.client().flushall()
        fleet.sync()  # this process notices first: it restores what it holds
        assert redis_server.client().get("failopen:override") is not None
    finally:
        runtime.stop()


def _reading(n: int, at: float, status: str, config: Config) -> str:
    return json.dumps({"id": f"elsewhere:{n}", "by": "elsewhere", "at": at, "kind": "watcher",
                       "global_status": status, "source": "components", "regions": [],
                       **same_deployment(config)})


def test_a_leaders_jittered_readings_all_count_towards_ending_a_bypass(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    """While bypassing, the leader polls every interval minus up to ``poll_jitter`` of it, so two
    of its readings may be less than half an interval apart. The rule meant for two leaders at
    once (such readings count once) also dropped the one leader's second recovery reading: the
    leader enforced again, its followers went on bypassing."""
    client = redis_server.client()
    (follower,) = fleet(1, poll_interval=2.0, poll_jitter=0.9, close_after=2)
    _follower_of_elsewhere(client, follower.config)
    follower.start()
    now = time.time()
    client.set("failopen:reading", _reading(1, now - 2.0, "major_outage", follower.config))
    assert wait_for(lambda: not follower.state.enforce)
    client.set("failopen:reading", _reading(2, now - 1.0, "operational", follower.config))
    fleet_ = follower.fleet
    assert fleet_ is not None
    assert wait_for(lambda: fleet_.last_reading is not None
                    and fleet_.last_reading.id == "elsewhere:2")
    assert not follower.state.enforce  # one reading that is not an outage: close_after is 2
    # 0.5 s later: the leader's next poll, 2 s - 0.75 x 2 s of jitter after the last.
    client.set("failopen:reading", _reading(3, now - 0.5, "operational", follower.config))
    assert wait_for(lambda: follower.state.enforce, timeout=3), follower.state
    assert fetches_none(follower)


def fetches_none(runtime: FailOpen) -> bool:
    return runtime.fleet is not None and not runtime.fleet.leader and runtime.watcher.polls == 0


def test_failopen_fleet_shows_control_characters_from_redis_not_their_effect(
    capsys: pytest.CaptureFixture[str], redis_server: RedisServer
) -> None:
    """What ``failopen fleet`` prints comes from Redis. A terminal escape in a heartbeat, the
    reading or an override's reason reached the operator's terminal as is: "\\r\\x1b[2K" and a
    line of its own hid the force-off line it followed."""
    from failopen.cli.command import main

    client = redis_server.client()
    client.set("failopen:epoch", "1")
    hide = "\r\x1b[2Koverride: none: the status page decides"
    now = time.time()
    client.set("failopen:override", json.dumps({
        "enforce": False, "reason": "INC-1" + hide, "set_at": now, "expires_at": now + 600}),
        px=600_000)
    client.set("failopen:reading", json.dumps({
        "id": "x:1", "by": "x\x1b]0;title\x07", "at": now, "kind": "watcher",
        "global_status": "operational\x1b[8m", "source": "components", "regions": []}))
    client.set("failopen:proc:p", json.dumps({"id": "p\x1b[1A", "seen": now}), px=60_000)
    capsys.readouterr()
    assert main(["fleet", "--store", redis_server.url]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out
    assert "enforce=False" in out and "\\x1b" in out


@pytest.mark.parametrize("local", ["force_off", "automatic"])
def test_an_override_placed_while_the_watcher_loads_the_store_is_not_undone(
    failopen_config: Config, redis_server: RedisServer, local: str
) -> None:
    """The watcher's refresh read the store (the old value), then an operator in this process
    placed or lifted an override, then the refresh applied what it had read. The operator's
    change was undone in this process, and the store (now holding that change) said nothing had
    changed, so it stayed undone: right after start-up this lost a force-off, and a FLUSHALL
    then restored the fleet's keys without it."""
    from failopen.engine.flag import EnforcementFlag
    from failopen.stores import open_store

    store = open_store(redis_server.url)
    flag = EnforcementFlag(store=store, load=False)
    if local == "automatic":
        EnforcementFlag(store=open_store(redis_server.url)).force_off("earlier", ttl=600)
        flag.refresh(force=True)
        assert flag.override is not None
    loaded = store.load

    def load_then_operator_acts() -> Any:
        value = loaded()  # what the watcher read
        if local == "force_off":
            flag.force_off("INC-14", ttl=600)  # another thread, before the watcher applies it
        else:
            flag.automatic("over")
        return value

    store.load = load_then_operator_acts  # type: ignore[method-assign]
    flag.refresh(force=True)
    store.load = loaded  # type: ignore[method-assign]
    flag.refresh()
    if local == "force_off":
        assert flag.override is not None and flag.override.reason == "INC-14"
    else:
        assert flag.override is None


def test_a_flushall_before_the_first_sync_is_not_read_as_no_override(
    failopen_config: Config, redis_server: RedisServer
) -> None:
    """A process whose watcher had not yet synced with the fleet (its first sync read the store
    before this process placed its override) refreshed with a plain GET. After a FLUSHALL that
    GET found no key and the process dropped its override, then restored the fleet's keys
    without it. Only a sync's read, which checks the epoch marker, may change the override."""
    runtime = FailOpen(failopen_config.replace(store=redis_server.url))
    try:
        fleet = runtime.fleet
        assert fleet is not None
        snapshot = runtime.store.snapshot()  # type: ignore[attr-defined]  # the first sync's read
        runtime.flag.force_off("INC-15", ttl=600)
        runtime.store.note_synced(snapshot[1])  # type: ignore[attr-defined]  # not adopted
        redis_server.client().flushall()
        runtime.watcher.tick()  # the refresh
        assert (runtime.state.enforce, runtime.state.reason) == (False, "INC-15")
        fleet.sync()  # the first to notice puts back what it holds
        assert redis_server.client().get("failopen:override") is not None
    finally:
        runtime.stop()
