"""A fleet of four processes on a real six-node Redis Cluster (issue 30, A2-A3): one poller
(about one status request per interval), an outage and an override reaching every member, the
override lapsing; then the primary holding the deployment's slot is killed with SIGKILL, its
replica promoted, and the fleet goes on: one poller again, an outage and a new override reach
every member, and no request ever talked to Redis or failed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _cluster_kit import RedisCluster, needs_cluster, serve_cluster
from _fleet_kit import Member, Members, member_env
from _redis_kit import stores_closed_after, wait_for

from failopen.engine.flag import EnforcementFlag
from failopen.stores import open_store
from failopen.testing import FakeStatusPage, FakeVerifyAPI

pytestmark = [needs_cluster, pytest.mark.slow, pytest.mark.timeout(120)]

LEASE = 1.5
REFRESH = 0.1
INTERVAL = 0.2  # FAILOPEN_POLL_INTERVAL in member_env


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisCluster]:
    with stores_closed_after(monkeypatch):
        yield from serve_cluster(tmp_path / "cluster")


@pytest.fixture
def members(
    cluster: RedisCluster, fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI,
    tmp_path: Path,
) -> Iterator[Callable[[int], list[Member]]]:
    fleet = Members(member_env(cluster.url, fake_status_page.url, fake_verify_api.verify_url,
                               fake_verify_api.private_key, refresh=REFRESH, lease=LEASE,
                               FLEET_MEMBER_TOKENS="1"), tmp_path)
    yield fleet.start
    fleet.stop()


def _leaders(fleet: list[Member]) -> list[Member]:
    return [m for m in fleet if m.state().get("leader")]


def _one_poller(fleet: list[Member], page: FakeStatusPage, seconds: float = 2.0) -> float:
    """Status requests per poll interval over ``seconds``, with one leader throughout and the
    followers' polls standing still."""
    assert wait_for(lambda: len(_leaders(fleet)) == 1, timeout=20)
    (leader,) = _leaders(fleet)
    followers = [m for m in fleet if m is not leader]
    polls = [m.state()["polls"] for m in followers]
    before, began = page.requests, time.monotonic()
    time.sleep(seconds)
    rate = (page.requests - before) / ((time.monotonic() - began) / INTERVAL)
    assert _leaders(fleet) == [leader]
    assert [m.state()["polls"] for m in followers] == polls
    return rate


def _primary(cluster: RedisCluster) -> int | None:
    """The port of the primary holding the deployment's slot; None while none does (the old one
    failed, no replica promoted yet)."""
    try:
        return cluster.holders("{failopen}:override")[0]
    except AssertionError:
        return None


def _outage_reaches_everyone(fleet: list[Member], page: FakeStatusPage) -> None:
    page.set_global("major_outage")
    assert wait_for(lambda: all(not m.state()["enforce"] for m in fleet), timeout=20)
    page.set_global("operational")
    assert wait_for(lambda: all(m.state()["enforce"] for m in fleet), timeout=20)


def test_a_fleet_on_a_cluster_survives_the_death_of_its_slots_primary(
    members: Callable[[int], list[Member]], cluster: RedisCluster,
    fake_status_page: FakeStatusPage,
) -> None:
    fleet = members(4)
    rate = _one_poller(fleet, fake_status_page)
    assert 0.6 <= rate <= 1.3, rate
    _outage_reaches_everyone(fleet, fake_status_page)
    store = open_store(cluster.url)
    EnforcementFlag(store=store).force_off("INC-30", ttl=2)
    assert wait_for(lambda: all(m.state()["reason"] == "INC-30" for m in fleet))
    assert all(not m.state()["enforce"] and m.state()["source"] == "override" for m in fleet)
    # The override lapses by itself, everywhere.
    assert wait_for(lambda: all(m.state()["source"] == "watcher" and m.state()["enforce"]
                                for m in fleet), timeout=15)

    primary, replicas = cluster.holders("{failopen}:override")
    assert replicas, "the slot's primary has no replica to promote"
    sent = [m.state()["valid_sent"] for m in fleet]
    began = time.monotonic()
    cluster.kill(primary)
    assert wait_for(lambda: _primary(cluster) in replicas, timeout=30), "no replica was promoted"
    promoted = time.monotonic() - began
    assert wait_for(lambda: all(m.state()["store"] == "redis" for m in fleet), timeout=30)
    rate_after = _one_poller(fleet, fake_status_page)
    followed = time.monotonic() - began
    print(f"\nreplica promoted {promoted:.2f}s after SIGKILL; one poller again "
          f"{followed:.2f}s after; {rate:.2f} then {rate_after:.2f} status requests per interval")
    assert 0.6 <= rate_after <= 1.3, rate_after

    _outage_reaches_everyone(fleet, fake_status_page)
    EnforcementFlag(store=store).force_on("after the failover", ttl=300)
    assert wait_for(lambda: all(m.state()["reason"] == "after the failover" for m in fleet))
    # No wrong decision at any moment: valid tokens verified, nothing without one let through
    # while enforcing, no error, and no request talked to Redis.
    for member, before in zip(fleet, sent, strict=True):
        state = member.state()
        assert state["valid_sent"] > before
        assert state["errors"] == 0 and state["off_thread"] == 0, state
