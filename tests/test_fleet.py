"""Fleet mode in one process: several FailOpen instances (each its own fleet member, as separate
processes would be) share one real Redis: one poller, shared readings and overrides, fallback."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from _redis_kit import RedisServer, same_deployment, wait_for

from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI

pytestmark = pytest.mark.timeout(60)


def leaders(runtimes: list[FailOpen]) -> list[FailOpen]:
    return [r for r in runtimes if r.fleet is not None and r.fleet.leader]


def fetches(runtime: FailOpen) -> int:
    return int(runtime.counted.count)  # type: ignore[attr-defined]


def test_four_processes_one_poller(
    fleet: Callable[..., list[FailOpen]], fake_status_page: FakeStatusPage
) -> None:
    runtimes = fleet(4)
    for runtime in runtimes:
        runtime.start()
    assert wait_for(lambda: len(leaders(runtimes)) == 1)
    leader = leaders(runtimes)[0]
    assert wait_for(lambda: fetches(leader) >= 5)
    followers = [r for r in runtimes if r is not leader]
    assert [fetches(r) for r in followers] == [0, 0, 0]
    # Followers apply the leader's readings through their own hysteresis.
    fake_status_page.set_global("major_outage")
    assert wait_for(lambda: all(not r.state.enforce for r in runtimes)), [r.state for r in runtimes]
    assert all(r.state.source == "watcher" and r.state.global_status == "major_outage"
               for r in runtimes)
    assert all(r.decide(FakeVerifyAPI.BAD).bypassed for r in followers)
    fake_status_page.set_global("operational")
    assert wait_for(lambda: all(r.state.enforce for r in runtimes))
    assert [fetches(r) for r in followers] == [0, 0, 0]
    assert leaders(runtimes) == [leader]


def test_override_reaches_every_process_and_lapses_by_ttl(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    runtimes = fleet(3)
    for runtime in runtimes:
        runtime.start()
    runtimes[0].flag.force_off("vendor outage INC-11", ttl=0.8)
    assert wait_for(lambda: all(r.state.source == "override" for r in runtimes))
    assert all(not r.state.enforce for r in runtimes)
    assert 0 < redis_server.client().pttl("failopen:override") <= 800
    assert wait_for(lambda: all(r.state.source == "watcher" and r.state.enforce
                                for r in runtimes))
    runtimes[1].flag.force_on("drill")
    assert wait_for(lambda: all(r.state.reason == "drill" for r in runtimes))
    runtimes[2].flag.automatic("drill over")
    assert wait_for(lambda: all(r.state.source == "watcher" for r in runtimes))


def test_leader_that_stops_renewing_is_replaced_within_a_lease(
    fleet: Callable[..., list[FailOpen]]
) -> None:
    runtimes = fleet(3)
    for runtime in runtimes:
        runtime.start()
    assert wait_for(lambda: len(leaders(runtimes)) == 1)
    old = leaders(runtimes)[0]
    old.watcher.stop()  # as if frozen: no release, the lease has to lapse
    rest = [r for r in runtimes if r is not old]
    assert wait_for(lambda: len(leaders(rest)) == 1)
    new = leaders(rest)[0]
    before = fetches(new)
    assert wait_for(lambda: fetches(new) > before)


def test_a_clean_stop_hands_over_at_once(fleet: Callable[..., list[FailOpen]]) -> None:
    runtimes = fleet(2, fleet_lease=30.0, store_refresh=0.05)
    for runtime in runtimes:
        runtime.start()
    assert wait_for(lambda: len(leaders(runtimes)) == 1)
    old = leaders(runtimes)[0]
    old.stop()
    other = next(r for r in runtimes if r is not old)
    assert wait_for(lambda: other.fleet is not None and other.fleet.leader, timeout=5)


def test_redis_killed_and_restarted(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
    fake_status_page: FakeStatusPage, caplog: pytest.LogCaptureFixture,
) -> None:
    runtimes = fleet(3)
    for runtime in runtimes:
        runtime.start()
    runtimes[0].flag.force_on("kept while Redis is away", ttl=120)
    assert wait_for(lambda: all(r.state.source == "override" for r in runtimes))
    with caplog.at_level(logging.WARNING, logger="failopen.fleet"):
        redis_server.kill()
        assert wait_for(lambda: all(r.fleet is not None and r.fleet.store_state == "local"
                                    for r in runtimes))
        # Every process polls for itself, and keeps the override it saw.
        counts = [fetches(r) for r in runtimes]
        assert wait_for(lambda: all(fetches(r) > c for r, c in zip(runtimes, counts, strict=True)))
        assert all(r.state.reason == "kept while Redis is away" for r in runtimes)
        for runtime in runtimes:
            assert runtime.decide(FakeVerifyAPI.BAD).outcome == "invalid_token"
        time.sleep(0.3)  # several failed syncs: still one log line per process
        down = [r for r in caplog.records if "fleet store unusable" in r.getMessage()]
        assert len(down) == 3
        redis_server.start()
        assert wait_for(lambda: all(r.fleet is not None and r.fleet.store_state == "redis"
                                    for r in runtimes))
        assert wait_for(lambda: len(leaders(runtimes)) == 1)
    back = [r for r in caplog.records if "answers again" in r.getMessage()]
    assert len(back) == 3
    # The keys survived (no persistence here, so the restarted server is empty: the marker
    # says so, and the first process puts back the override it knew).
    assert wait_for(lambda: redis_server.client().get("failopen:override") is not None)
    assert all(r.state.reason == "kept while Redis is away" for r in runtimes)
    fake_status_page.set_global("major_outage")
    assert wait_for(lambda: all(r.flag.automatic_state.enforce is False for r in runtimes))


def test_flushall_mid_run_keeps_the_override(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    runtimes = fleet(3)
    for runtime in runtimes:
        runtime.start()
    runtimes[0].flag.force_off("outage", ttl=60)
    assert wait_for(lambda: all(r.state.source == "override" for r in runtimes))
    redis_server.client().flushall()
    assert wait_for(lambda: redis_server.client().get("failopen:override") is not None)
    ttl = redis_server.client().pttl("failopen:override")
    assert 0 < ttl <= 60_000
    time.sleep(0.3)
    assert all(not r.state.enforce and r.state.reason == "outage" for r in runtimes)
    assert wait_for(lambda: len(leaders(runtimes)) == 1)
    # Lifting it afterwards still reaches everyone.
    runtimes[2].flag.automatic("over")
    assert wait_for(lambda: all(r.state.source == "watcher" for r in runtimes))


def test_after_a_flushall_every_member_beats_again_at_once(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    # A minute's lease: each member beats every 10 s, the longest interval there is.
    runtimes = fleet(3, fleet_lease=60.0)
    for runtime in runtimes:
        runtime.start()
    beats = lambda: len(redis_server.client().keys("failopen:proc:*"))  # noqa: E731
    assert wait_for(lambda: beats() == 3)
    redis_server.client().flushall()
    # Not 10 s later: failopen override would count a fleet of 3 as fewer meanwhile.
    assert wait_for(lambda: beats() == 3, timeout=3)


def test_a_member_that_finds_the_keys_already_put_back_beats_at_once(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    # Turned by hand, so the order is the test's: the first member notices the lost keys and
    # puts the marker back, the second takes the free lease (and says so in a heartbeat), the
    # third only ever sees the new marker and a held lease, yet its heartbeat went too.
    members = [runtime.fleet for runtime in fleet(3, fleet_lease=60.0)]
    for member in members:
        assert member is not None
        member.sync()
    beats = lambda: len(redis_server.client().keys("failopen:proc:*"))  # noqa: E731
    assert beats() == 3
    redis_server.client().flushall()
    for member in members:
        member.sync()  # type: ignore[union-attr]
    members[0].sync()  # type: ignore[union-attr]  # back from its fallback, beating at once
    assert redis_server.client().get("failopen:epoch") is not None
    assert beats() == 3


@pytest.mark.parametrize("key", ["reading", "leader", "override"])
def test_garbage_in_a_key_falls_back_then_rejoins(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer, key: str
) -> None:
    runtimes = fleet(2)
    for runtime in runtimes:
        runtime.start()
    assert wait_for(lambda: len(leaders(runtimes)) == 1)
    follower = next(r for r in runtimes if r not in leaders(runtimes))
    assert follower.fleet is not None
    count = fetches(follower)
    # (The leader may overwrite a garbage reading before anyone reads it: that is recovery.)
    redis_server.client().set(f"failopen:{key}", b"\x00garbage", px=700)
    if key != "reading":
        assert wait_for(lambda: follower.fleet.store_state == "local")
        assert wait_for(lambda: fetches(follower) > count)  # polls for itself meanwhile
    assert wait_for(lambda: all(r.fleet is not None and r.fleet.store_state == "redis"
                                for r in runtimes))
    assert wait_for(lambda: len(leaders(runtimes)) == 1)


def test_a_reading_from_the_future_is_not_trusted(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    (runtime,) = fleet(1)
    ours = same_deployment(runtime.config)
    client = redis_server.client()
    client.set("failopen:epoch", "1")
    client.set("failopen:leader", json.dumps({"id": "elsewhere", "since": 1, **ours}),
               px=60_000)
    forged = {"id": "x:1", "by": "x", "at": time.time() + 3600, "kind": "watcher",
              "global_status": "major_outage", "source": "components", "regions": [], **ours}
    client.set("failopen:reading", json.dumps(forged))
    runtime.start()
    assert wait_for(lambda: runtime.fleet is not None and runtime.fleet.store_state == "local")
    assert wait_for(lambda: runtime.state.source == "watcher")
    assert runtime.state.enforce and runtime.state.global_status == "operational"


def test_followers_count_a_readings_age(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    """A published outage reading that is already older than the stale limit opens nothing."""
    (follower,) = fleet(1, poll_interval=5.0, stale_after=10.0, max_stale_bypass=10.0)
    ours = same_deployment(follower.config)
    redis_server.client().set("failopen:epoch", "1")
    redis_server.client().set("failopen:leader",
                              json.dumps({"id": "elsewhere", "since": 1, **ours}), px=60_000)
    old = {"id": "elsewhere:1", "by": "elsewhere", "at": time.time() - 11, "kind": "watcher",
           "global_status": "major_outage", "source": "components", "regions": [], **ours}
    redis_server.client().set("failopen:reading", json.dumps(old))
    follower.start()
    time.sleep(0.3)
    assert follower.fleet is not None and not follower.fleet.leader
    assert follower.state.enforce
    assert fetches(follower) == 0
    fresh = dict(old, id="elsewhere:2", at=time.time() - 9.9)
    redis_server.client().set("failopen:reading", json.dumps(fresh))
    assert wait_for(lambda: not follower.state.enforce)
    # Its age counted: ten seconds after it was made (not after it was seen) the bypass ends.
    assert wait_for(lambda: follower.state.enforce, timeout=3)
    assert "bypass ended" in follower.state.reason


def test_one_confirmation_per_fleet(
    fleet: Callable[..., list[FailOpen]], fake_status_page: FakeStatusPage
) -> None:
    runtimes = fleet(4, poll_interval=30.0, confirm_ttl=30.0)
    for runtime in runtimes:
        runtime.start()
    assert wait_for(lambda: len(leaders(runtimes)) == 1 and all(
        r.state.source == "watcher" for r in runtimes))
    fake_status_page.set_global("major_outage")
    before = sum(fetches(r) for r in runtimes)
    threads = [threading.Thread(target=r.confirm) for r in runtimes for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(fetches(r) for r in runtimes) == before + 1
    # The one confirmation reaches every process through the store.
    assert wait_for(lambda: all(not r.state.enforce for r in runtimes))
    assert all(r.state.source == "confirmed" for r in runtimes)


def test_requests_never_touch_redis(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    # The outage rate limit is counted in the fleet's Redis by design (bounded by a short
    # timeout: tests/fallback/test_rate.py); every other Redis call stays off the request path.
    runtimes = fleet(2, outage_rate="none")
    for runtime in runtimes:
        runtime.start()
    runtimes[0].flag.force_off("outage", ttl=60)
    assert wait_for(lambda: all(not r.state.enforce for r in runtimes))
    callers: list[str] = []
    for runtime in runtimes:
        store: Any = runtime.store
        inner = store.call

        def call(*args: Any, inner: Any = inner, **kwargs: Any) -> Any:
            callers.append(threading.current_thread().name)
            return inner(*args, **kwargs)

        store.call = call
    for _ in range(200):
        for runtime in runtimes:
            assert runtime.decide(FakeVerifyAPI.BAD).bypassed
            assert runtime.bypass(path="/login") is not None
    assert wait_for(lambda: len(callers) > 4)  # the background thread goes on syncing
    assert set(callers) == {"failopen.status-watcher"}


def test_a_frozen_redis_is_a_fallback_too(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    """SIGSTOP: connections open, no answers (slow Redis). Syncs time out; requests go on."""
    import signal

    runtimes = fleet(2)
    for runtime in runtimes:
        runtime.start()
    assert wait_for(lambda: len(leaders(runtimes)) == 1)
    assert redis_server.process is not None
    redis_server.process.send_signal(signal.SIGSTOP)
    try:
        assert wait_for(lambda: all(r.fleet is not None and r.fleet.store_state == "local"
                                    for r in runtimes))
        for runtime in runtimes:
            assert runtime.decide(None).outcome == "missing_token"
        counts = [fetches(r) for r in runtimes]
        assert wait_for(lambda: all(fetches(r) > c for r, c in zip(runtimes, counts, strict=True)))
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
    assert wait_for(lambda: all(r.fleet is not None and r.fleet.store_state == "redis"
                                for r in runtimes))
    assert wait_for(lambda: len(leaders(runtimes)) == 1)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_fork_during_a_sync_leaves_the_child_a_usable_member(
    fleet: Callable[..., list[FailOpen]]
) -> None:
    import os
    import signal

    (runtime,) = fleet(1)
    assert runtime.fleet is not None
    runtime.fleet._lock.acquire()  # as if the watcher thread were mid-sync at fork()
    try:
        pid = os.fork()
        if pid == 0:  # the child: a new member, never the parent's leader, and not stuck
            signal.alarm(5)  # a hang kills the child (SIGALRM), which fails the test
            try:
                runtime.fleet.sync()
                os._exit(0 if runtime.fleet.store_state == "redis" else 1)
            except BaseException:
                os._exit(2)
    finally:
        runtime.fleet._lock.release()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_start_after_stop_rejoins(fleet: Callable[..., list[FailOpen]]) -> None:
    """stop() closes the store's connections and leaves the fleet; start() joins it again."""
    (runtime,) = fleet(1)
    runtime.start()
    assert wait_for(lambda: runtime.fleet is not None and runtime.fleet.leader)
    runtime.stop()
    assert runtime.fleet is not None and not runtime.fleet.leader
    runtime.start()
    assert wait_for(lambda: runtime.fleet is not None and runtime.fleet.leader)
    assert runtime.fleet.store_state == "redis"
