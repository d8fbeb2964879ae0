"""The Redis store, the fleet's records and the fallback on a real Redis Cluster (issue 30, A1):
every key of a deployment in the one hash slot the prefix's tag names, each script atomic there,
heartbeats found through their index (no SCAN), and ``failopen check`` and ``failopen fleet``
naming the slot and the primary that holds it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from _cluster_kit import RedisCluster, needs_cluster
from _redis_kit import stores_closed_after

from failopen import Config
from failopen.cli.fleet import fleet_report
from failopen.cli.preflight_store import check_store
from failopen.engine.flag import EnforcementFlag
from failopen.engine.override_reach import measure_reach
from failopen.exceptions import StoreUnavailable
from failopen.fallback.rate import OutageRateLimit
from failopen.fallback.used import MemoryUsedSolutions, RedisUsedSolutions
from failopen.stores import open_store
from failopen.stores.redis import RedisStore
from failopen.testing import FakeClock

pytestmark = [needs_cluster, pytest.mark.slow, pytest.mark.timeout(90)]


@pytest.fixture(autouse=True)
def _closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with stores_closed_after(monkeypatch):
        yield


def _store(cluster: RedisCluster, prefix: str = "failopen:") -> RedisStore:
    store = open_store(cluster.url, prefix=prefix)
    assert isinstance(store, RedisStore)
    return store


def _all_keys(cluster: RedisCluster) -> dict[int, list[bytes]]:
    """Every key on every primary, by port."""
    found = {}
    for port in cluster.ports:
        node = cluster.node(port)
        if node.info("replication")["role"] == "master":
            found[port] = sorted(node.keys("*"))
    return found


def test_overrides_round_trip_and_every_key_shares_one_slot(redis_cluster: RedisCluster) -> None:
    store = _store(redis_cluster, prefix="c1:")
    assert store.prefix == "{c1}:"
    flag = EnforcementFlag(store=store)
    flag.force_off("INC-30", ttl=60)
    loaded = store.load()
    assert loaded is not None and loaded.reason == "INC-30" and not loaded.enforce
    assert 55_000 < store.override_ttl() <= 60_000
    assert store.acquire("me", 1000) and store.renew("me", 1000) and not store.acquire("you", 1000)
    store.release("me")
    store.publish('{"x": 1}', 1000)
    assert store.try_confirm("t", 1000)[0] is True
    assert store.try_confirm("u", 1000) == (False, b'{"x": 1}', b"t")
    store.heartbeat("p1", json.dumps({"id": "p1", "seen": time.time()}), 60_000)
    assert store.restore(None) is False  # the marker is there: nothing to put back
    # Every key this deployment wrote sits on one primary, in one slot.
    primary, _replicas = redis_cluster.holders("{c1}:override")
    mine = {port: [k for k in keys if k.startswith(b"{c1}:")]
            for port, keys in _all_keys(redis_cluster).items()}
    assert {port for port, keys in mine.items() if keys} == {primary}
    node = redis_cluster.node(primary)
    assert {node.execute_command("CLUSTER KEYSLOT", k) for k in mine[primary]} == {
        store.where_keys()["slot"]}  # type: ignore[index]
    assert len(mine[primary]) >= 7
    store.save(None)
    assert store.load() is None


def test_heartbeats_are_indexed_and_lapse_from_the_index(redis_cluster: RedisCluster) -> None:
    store = _store(redis_cluster, prefix="c2:")
    now = time.time()
    store.heartbeat("a", json.dumps({"id": "a", "seen": now}), 60_000)
    store.heartbeat("b", json.dumps({"id": "b", "seen": now}), 150)
    assert len(store.processes()) == 2
    beats, _since, _now = store.live_beats()
    assert sorted(json.loads(v)["id"] for v, _ttl in beats) == ["a", "b"]
    time.sleep(0.3)
    store.heartbeat("a", json.dumps({"id": "a", "seen": time.time()}), 60_000)  # prunes b
    assert [json.loads(v)["id"] for v in store.processes()] == ["a"]
    assert redis_cluster.node(redis_cluster.holders("{c2}:procs")[0]).zrange(
        "{c2}:procs", 0, -1) == [b"a"]
    store.forget("a")
    assert store.processes() == []
    assert fleet_report(store)["processes"] == []


def test_check_and_fleet_name_the_slot_and_its_primary(redis_cluster: RedisCluster) -> None:
    store = _store(redis_cluster)
    primary, replicas = redis_cluster.holders("{failopen}:override")
    store.heartbeat("p", json.dumps({"id": "p", "seen": time.time()}), 60_000)
    report = fleet_report(store)
    assert report["slot"]["primary"] == f"127.0.0.1:{primary}"
    assert report["slot"]["replicas"] == [f"127.0.0.1:{port}" for port in replicas]
    assert [p["id"] for p in report["processes"]] == ["p"]
    check = check_store(Config(store=redis_cluster.url), {})
    assert check.status == "ok", check.detail
    assert f"hash slot {report['slot']['slot']} on the primary 127.0.0.1:{primary}" in check.detail
    assert check.facts["prefix"] == "{failopen}:"
    reach = measure_reach(store, store.load(), page=None, wait=0.2)
    assert reach.processes == 1
    store.forget("p")


def test_the_fallback_shares_the_slot(redis_cluster: RedisCluster) -> None:
    used = RedisUsedSolutions(redis_cluster.url, password=None, prefix="c3:", timeout=0.5,
                              fallback=MemoryUsedSolutions())
    other = RedisUsedSolutions(redis_cluster.url, password=None, prefix="c3:", timeout=0.5,
                               fallback=MemoryUsedSolutions())
    rate = OutageRateLimit("2/minute", redis_url=redis_cluster.url, prefix="c3:", timeout=0.5)
    try:
        expires = time.time() + 60
        assert used.claim("s1", expires) is True
        assert other.claim("s1", expires) is False  # the fleet's record, not memory
        assert rate.hit("198.51.100.7", "/login") is None
        assert rate.hit("198.51.100.7", "/login") is None
        assert rate.hit("198.51.100.7", "/login") is not None
        primary, _ = redis_cluster.holders("{c3}:x")
        keys = redis_cluster.node(primary).keys("{c3}:*")
        assert b"{c3}:fallback:used:s1" in keys
        assert any(k.startswith(b"{c3}:fallback:rate") for k in keys)
    finally:
        used.close()
        other.close()
        rate.close()


def test_a_claim_near_expiry_holds_while_redis_clock_is_ahead(
    redis_cluster: RedisCluster,
) -> None:
    """Issue 31, item 4, on a cluster: the servers' clock 10 minutes behind Redis's, a solution
    with 5 s left is claimed once (SET NX PXAT stored it already expired)."""
    primary, _ = redis_cluster.holders("{c5}:x")
    redis_cluster.node(primary).set("{c5}:fallback:since", "0")  # a record complete from start
    clock = FakeClock(start=time.time() - 600)
    made = [RedisUsedSolutions(redis_cluster.url, password=None, prefix="c5:", timeout=0.5,
                               fallback=MemoryUsedSolutions(clock=clock), clock=clock)
            for _ in range(2)]
    try:
        expires = clock.time() + 5
        assert made[0].claim("s5", expires, issued_at=expires - 300) is True
        assert made[1].claim("s5", expires, issued_at=expires - 300) is False
        assert redis_cluster.node(primary).pttl("{c5}:fallback:used:s5") > 5_000
    finally:
        for used in made:
            used.close()


def test_a_cluster_nobody_answers_is_a_store_error_that_says_so() -> None:
    # No server needed: nothing listens on port 1. Opening makes no I/O; the first call fails.
    store = open_store("redis+cluster://:pw@127.0.0.1:1", password=None)
    assert isinstance(store, RedisStore)
    with pytest.raises(StoreUnavailable) as raised:
        store.load()
    text = str(raised.value)
    assert "redis+cluster://:***@127.0.0.1:1" in text and "pw" not in text.replace("://", "")
    assert "failover" in text
    store.close()
