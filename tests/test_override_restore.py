"""An override a member applied survives Redis restarting empty, with its original expiry; one an
operator lifted or replaced never comes back, whichever member notices the restart first.

The members here are not started: each test turns them itself (a sync, then the flag's tick, as
the watcher thread does), so the order in which they see the restart is the test's to choose."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from _redis_kit import RedisServer

from failopen.engine.flag import EnforcementFlag
from failopen.runtime import FailOpen
from failopen.stores import open_store
from failopen.stores.redis import parse_override

pytestmark = pytest.mark.timeout(60)

KEY = "failopen:override"


def turn(*runtimes: FailOpen, times: int = 1) -> None:
    """What each member's watcher thread does once a turn: sync with the fleet, then tick."""
    for _ in range(times):
        for runtime in runtimes:
            assert runtime.fleet is not None
            runtime.fleet.sync()
            runtime.watcher.tick()


def operator(redis_server: RedisServer) -> EnforcementFlag:
    """``failopen override`` from another machine."""
    return EnforcementFlag(store=open_store(redis_server.url))


def restart_empty(redis_server: RedisServer) -> None:
    redis_server.kill()
    redis_server.start()  # no persistence: every key is gone
    assert redis_server.client().keys("*") == []


def test_an_applied_override_comes_back_with_its_original_expiry(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    a, b = fleet(2)
    operator(redis_server).force_off("INC-9", ttl=60)
    placed = redis_server.client().get(KEY)
    turn(a, b)
    assert a.state.source == b.state.source == "override"
    time.sleep(0.5)  # the restore must count this half second against the expiry
    restart_empty(redis_server)
    turn(a, b, times=3)
    back = redis_server.client().get(KEY)
    # Byte for byte the operator's override: same set_at, same expires_at (never extended) ...
    assert back == placed
    expires_at = parse_override(back).expires_at  # type: ignore[union-attr]
    assert expires_at is not None
    # ... and the key lapses at that moment, not 60s after the restart.
    assert 0 < redis_server.client().pttl(KEY) <= (expires_at - time.time()) * 1000 + 50
    assert redis_server.client().pttl(KEY) < 59_600
    assert not a.state.enforce and not b.state.enforce and a.state.reason == "INC-9"


def test_an_expired_override_is_never_restored(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    (a,) = fleet(1)
    operator(redis_server).force_off("short", ttl=0.6)
    turn(a)
    assert a.state.source == "override"
    redis_server.kill()
    time.sleep(0.7)
    redis_server.start()
    turn(a, times=3)
    assert redis_server.client().get(KEY) is None
    assert a.state.enforce and a.state.source != "override"


def test_a_lift_read_but_not_yet_applied_is_not_undone_by_a_restart(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    (a,) = fleet(1)
    operator(redis_server).force_off("INC-9", ttl=60)
    turn(a)
    operator(redis_server).automatic("vendor is back")
    assert a.fleet is not None
    a.fleet.sync()  # read the lift; the flag applies it at the tick, which has not come yet
    assert a.flag.override is not None
    restart_empty(redis_server)
    for _ in range(3):
        a.fleet.sync()  # notices the lost keys first: must not put back what it saw lifted
    assert redis_server.client().get(KEY) is None
    a.watcher.tick()
    assert a.state.enforce and a.state.source != "override"


def test_a_lift_placed_right_after_a_restart_is_not_undone(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    (a,) = fleet(1)
    operator(redis_server).force_off("INC-9", ttl=60)
    turn(a)
    restart_empty(redis_server)
    # The operator lifts before any member noticed the restart.
    operator(redis_server).automatic("vendor is back")
    turn(a, times=3)
    assert redis_server.client().get(KEY) is None
    assert a.state.enforce and a.state.source != "override"


def test_a_stale_member_cannot_bring_back_a_lifted_override(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    informed, stale = fleet(2)
    operator(redis_server).force_off("INC-9", ttl=60)
    placed = redis_server.client().get(KEY)
    turn(informed, stale)
    operator(redis_server).automatic("vendor is back")
    turn(informed)  # the lift reached this one; the other never synced since
    assert informed.state.enforce
    restart_empty(redis_server)
    # The stale member notices first and puts back the only override it knows.
    for _ in range(3):
        assert stale.fleet is not None
        stale.fleet.sync()
    assert redis_server.client().get(KEY) == placed
    # The informed member never applies it again, and takes it out of the store.
    for _ in range(3):
        turn(informed)
        assert informed.state.enforce and informed.state.source != "override"
    assert redis_server.client().get(KEY) is None
    turn(stale, times=2)
    assert stale.state.enforce and stale.state.source != "override"
    # Having seen it removed, the stale member does not bring it back after another restart.
    restart_empty(redis_server)
    turn(stale, informed, times=3)
    assert redis_server.client().get(KEY) is None
    assert stale.state.enforce and informed.state.enforce


def test_a_replaced_override_is_replaced_again_by_the_one_that_followed(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer
) -> None:
    informed, stale = fleet(2)
    operator(redis_server).force_off("INC-9", ttl=60)
    turn(informed, stale)
    operator(redis_server).force_on("attack: enforce everywhere", ttl=600)
    replacement = redis_server.client().get(KEY)
    turn(informed)
    restart_empty(redis_server)
    for _ in range(3):
        assert stale.fleet is not None
        stale.fleet.sync()  # puts back the force-off it knew
    assert parse_override(redis_server.client().get(KEY)).enforce is False  # type: ignore[union-attr]
    turn(informed)
    assert redis_server.client().get(KEY) == replacement  # the operator's latest, unextended
    assert informed.state.enforce and informed.state.source == "override"
    turn(stale, times=2)
    assert stale.state.enforce and stale.state.reason == "attack: enforce everywhere"
