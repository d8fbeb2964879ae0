"""A Sentinel failover under a running fleet (issue 22, item 7): three member processes on a
``redis+sentinel://`` store; the primary is killed with SIGKILL; the fleet follows the sentinel to
the promoted replica, keeps the override, elects one poller, and decides rightly all along (the
vendor healthy: valid tokens verified, requests without one refused, nothing bypassed). The
fallback's used solutions and rate limit follow the failover too."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _fleet_kit import Member, Members, member_env
from _redis_kit import needs_redis, wait_for
from _sentinel_kit import SENTINEL_PASSWORD, SentinelSet, wait_failover

from failopen.engine.flag import EnforcementFlag
from failopen.fallback._redis import RedisLink
from failopen.fallback.rate import OutageRateLimit
from failopen.fallback.used import MemoryUsedSolutions, RedisUsedSolutions
from failopen.stores import open_store
from failopen.testing import FakeStatusPage, FakeVerifyAPI

pytestmark = [needs_redis, pytest.mark.slow, pytest.mark.timeout(120)]

LEASE = 1.5
REFRESH = 0.1


@pytest.fixture
def members(
    sentinel_set_with_password: SentinelSet, fake_status_page: FakeStatusPage,
    fake_verify_api: FakeVerifyAPI, tmp_path: Path,
) -> Iterator[Callable[[int], list[Member]]]:
    fleet = Members(member_env(sentinel_set_with_password.url, fake_status_page.url,
                               fake_verify_api.verify_url, fake_verify_api.private_key,
                               refresh=REFRESH, lease=LEASE, FLEET_MEMBER_TOKENS="1"),
                    tmp_path)
    yield fleet.start
    fleet.stop()


def _leaders(fleet: list[Member]) -> list[Member]:
    return [m for m in fleet if m.state().get("leader")]


def _heartbeats_since(servers: SentinelSet, since: float) -> set[str]:
    """The members whose heartbeat on the promoted replica was written after ``since``."""
    client = servers.client("replica")
    seen = set()
    for key in client.scan_iter("failopen:proc:*"):
        value = client.get(key)
        if value is not None and json.loads(value)["seen"] > since:
            seen.add(json.loads(value)["id"])
    return seen


def test_the_fleet_follows_a_failover_and_decides_rightly_throughout(
    members: Callable[[int], list[Member]], sentinel_set_with_password: SentinelSet,
    fake_status_page: FakeStatusPage,
) -> None:
    servers = sentinel_set_with_password
    fleet = members(3)
    assert wait_for(lambda: len(_leaders(fleet)) == 1)
    store = open_store(servers.url)
    EnforcementFlag(store=store).force_on("drill", ttl=600)
    assert wait_for(lambda: all(m.state()["reason"] == "drill" for m in fleet))
    # Copied to the replica before its primary dies: asynchronous, and on a loaded machine later
    # than the half second the store's WAIT gives it (which then warns; test_sentinel_store).
    assert wait_for(lambda: servers.client("replica").get("failopen:override") is not None)
    sent = [m.state()["valid_sent"] for m in fleet]

    killed_at, began = time.time(), time.monotonic()
    servers.servers["primary"].kill()
    promoted = wait_failover(servers)
    ids = {m.state()["id"] for m in fleet}
    # The fleet writes on the new primary: every member's heartbeat, written after the kill.
    assert wait_for(lambda: _heartbeats_since(servers, killed_at) == ids, timeout=30)
    followed = time.monotonic() - began
    assert wait_for(lambda: all(m.state()["store"] == "redis" for m in fleet), timeout=20)
    print(f"\nsentinel promoted the replica {promoted:.2f}s after SIGKILL; every member had "
          f"written on it {followed:.2f}s after SIGKILL")
    assert servers.role("replica") == "master"

    # One poller afterwards: one leader, holding the lease on the new primary; the followers'
    # polls stand still while the leader's go on.
    assert wait_for(lambda: len(_leaders(fleet)) == 1, timeout=20)
    (leader,) = _leaders(fleet)
    lease = json.loads(servers.client("replica").get("failopen:leader"))
    assert lease["id"] == leader.state()["id"]
    followers = [m for m in fleet if m is not leader]
    polls = [m.state()["polls"] for m in followers]
    leader_polls = leader.state()["polls"]
    time.sleep(3 * LEASE)
    assert len(_leaders(fleet)) == 1 and _leaders(fleet)[0] is leader
    assert [m.state()["polls"] for m in followers] == polls
    assert leader.state()["polls"] > leader_polls
    assert fake_status_page.requests > 0

    # The override set before the failover holds everywhere, and on the new primary.
    assert all(m.state()["reason"] == "drill" and m.state()["source"] == "override"
               for m in fleet)
    assert servers.client("replica").get("failopen:override") is not None
    # No wrong decision at any moment: every valid token was verified (none refused), nothing
    # without a token got through, nothing bypassed, no error, and requests went on throughout.
    for member, before in zip(fleet, sent, strict=True):
        state = member.state()
        assert state["valid_sent"] > before
        assert state["valid_allowed"] == state["valid_sent"], state
        assert state["missing_allowed"] == 0 and state["bypassed"] == 0, state
        assert state["turned_off"] == 0 and state["errors"] == 0, state
        assert state["off_thread"] == 0, state  # no request talked to Redis or a sentinel
        assert SENTINEL_PASSWORD not in member.log()


def test_the_fallback_follows_a_failover(sentinel_set: SentinelSet) -> None:
    used = RedisUsedSolutions(sentinel_set.url, password=None, prefix="failopen:", timeout=0.5,
                              fallback=MemoryUsedSolutions())
    other = RedisUsedSolutions(sentinel_set.url, password=None, prefix="failopen:",
                               timeout=0.5, fallback=MemoryUsedSolutions())
    rate = OutageRateLimit("3/minute", redis_url=sentinel_set.url, prefix="failopen:",
                           timeout=0.5)
    try:
        expires = time.time() + 300
        assert used.claim("solution-1", expires) is True
        assert rate.hit("203.0.113.9", "/login") is None
        primary = sentinel_set.client("primary")
        assert primary.exists("failopen:fallback:used:solution-1") == 1
        assert primary.keys("failopen:fallback:rate*")
        assert wait_for(lambda: sentinel_set.client("replica").exists(
            "failopen:fallback:used:solution-1") == 1)
        time.sleep(0.2)  # the rate limit's key replicated too (asynchronous, a few ms)

        sentinel_set.servers["primary"].kill()
        wait_failover(sentinel_set)
        # Another process (memory of its own) refuses the replay: the new primary has the claim.
        assert wait_for(lambda: _answers(other.link), timeout=20)
        assert other.claim("solution-1", expires) is False
        assert other.claim("solution-2", expires) is True
        replica = sentinel_set.client("replica")
        assert replica.exists("failopen:fallback:used:solution-2") == 1
        # The rate limit counts on from the replicated count: two more fit, the fourth does not
        # (with the count lost, or kept in memory, the fourth would fit too).
        assert rate.link is not None
        assert wait_for(lambda: _answers(rate.link), timeout=20)
        assert rate.hit("203.0.113.9", "/login") is None
        assert rate.hit("203.0.113.9", "/login") is None
        assert rate.hit("203.0.113.9", "/login") is not None
        assert replica.keys("failopen:fallback:rate*")
    finally:
        used.close()
        other.close()
        rate.close()


def _answers(link: RedisLink) -> bool:
    """True once the link's client reaches the new primary (a stale connection to the killed
    one fails first, and is dropped)."""
    try:
        link.client.ping()
    except link.errors:
        time.sleep(0.1)
        return False
    return link.usable()
