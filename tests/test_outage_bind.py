"""A fallback challenge belongs to the outage it was issued in (issue 31, item A3).

The reproducer: outage 1, a challenge fetched and solved, recovery (enforcement on), outage 2
within a poll interval plus the status time-out (35 s by default, the gate's ``issue_skew``),
the old solution sent: it was accepted, although enforcement was on in between. Now refused; a
challenge fetched in outage 2 is admitted. Single process (status page and operator override),
and a fleet of two runtimes on a real redis-server, where a sibling that saw outage 2 earlier
still has its challenges admitted (what ``issue_skew`` is for).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from _redis_kit import RedisServer

from failopen import Config, FailOpen
from failopen.testing import solve_challenge
from failopen.testing.clock import FakeClock
from failopen.testing.status_page import FakeStatusPage
from failopen.web import challenge_answer

SECRET = "outage-bind-" + "s" * 32


def config(**extra: object) -> Config:
    return Config(protected_paths=("/signup",), verify_url="http://127.0.0.1:9/verify",
                  private_key="never-used-key", outage_policy_routes="/signup=fallback",
                  fallback_secret=SECRET, fallback_cost=1000, outage_rate="none",
                  **extra)  # type: ignore[arg-type]


def fetch(runtime: FailOpen) -> str:
    """What a browser does: GET <prefix>/challenge, then solve it."""
    status, challenge = challenge_answer(runtime.state, runtime.challenges)
    assert status == 200, challenge
    return solve_challenge(challenge)


def submit(runtime: FailOpen, solution: str | None) -> str:
    """The runtime's guard decides (the test drives the polls: no watcher thread, whose waits
    would move the fake clock)."""
    return runtime.guard.decide(None, path="/signup", client="203.0.113.9", solution=solution,
                          policy="fallback", route="/signup").outcome


@pytest.fixture
def watched() -> Iterator[tuple[FakeClock, FakeStatusPage, FailOpen]]:
    clock = FakeClock()
    page = FakeStatusPage(clock=clock)
    runtime = FailOpen(config(status_url="https://status.test", poll_interval=30.0),
                       status_transport=page.transport(), clock=clock)
    yield clock, page, runtime
    runtime.stop()


def test_a_solution_from_the_previous_outage_is_refused_in_the_next(
        watched: tuple[FakeClock, FakeStatusPage, FailOpen]) -> None:
    clock, page, runtime = watched
    runtime.poll_now()
    page.set_global("major_outage")
    runtime.poll_now()
    assert not runtime.state.enforce, "outage 1"
    clock.advance(5)
    old = fetch(runtime)
    page.set_global("operational")
    for _ in range(2):  # the readings it takes to end a bypass
        clock.advance(2)
        runtime.poll_now()
    assert runtime.state.enforce, "recovered: enforcement on"
    assert submit(runtime, old) != "bypassed_fallback", "enforcing: the vendor's token decides"
    clock.advance(10)  # outage 2 begins 10 s later: well within the 35 s issue_skew
    page.set_global("major_outage")
    runtime.poll_now()
    assert not runtime.state.enforce, "outage 2"
    assert submit(runtime, old) == "fallback_invalid"
    assert submit(runtime, fetch(runtime)) == "bypassed_fallback"


def test_an_operator_flap_binds_challenges_too() -> None:
    clock = FakeClock()
    runtime = FailOpen(config(), clock=clock)
    try:
        runtime.flag.force_off("outage 1", ttl=600)
        old, unused = fetch(runtime), fetch(runtime)
        assert submit(runtime, old) == "bypassed_fallback"
        clock.advance(1)
        runtime.flag.automatic("recovered")
        assert runtime.state.enforce
        clock.advance(1)
        runtime.flag.force_off("outage 2", ttl=600)
        assert submit(runtime, unused) == "fallback_invalid"
        assert submit(runtime, fetch(runtime)) == "bypassed_fallback"
    finally:
        runtime.stop()


def test_a_force_on_over_the_pages_outage_ends_the_outage_its_challenges_belong_to(
        watched: tuple[FakeClock, FakeStatusPage, FailOpen]) -> None:
    # The operator forces enforcement on during the page's outage (sign-up abuse), and lifts it,
    # or it lapses, while the page still shows the outage. Challenges stocked before the
    # override belonged to the outage dated at the page's start: they passed again after it.
    clock, page, runtime = watched
    page.set_global("major_outage")
    runtime.poll_now()
    clock.advance(5)
    stock = [fetch(runtime) for _ in range(2)]
    clock.advance(5)
    runtime.flag.force_on("abuse on the fallback", ttl=60)
    clock.advance(61)
    assert not runtime.state.enforce, "lapsed; the page still shows the outage"
    assert submit(runtime, stock[0]) == "fallback_invalid"
    runtime.flag.force_on("abuse again")
    clock.advance(5)
    runtime.flag.automatic("lifted")
    assert submit(runtime, stock[1]) == "fallback_invalid"
    fresh = fetch(runtime)
    clock.advance(1)
    runtime.poll_now()  # the page's next reading keeps the outage's new date
    assert submit(runtime, fresh) == "bypassed_fallback"


def test_an_override_placed_again_keeps_this_outages_challenges(
        watched: tuple[FakeClock, FakeStatusPage, FailOpen]) -> None:
    # Honest users, not an attacker: the operator extends a force-off ("place it again when it
    # lapses if the outage goes on"), or places one over the page's outage, or lifts it while
    # the page still shows the outage. Enforcement never came on: a challenge fetched a few
    # minutes before is this outage's, and was refused as "issued while enforcing".
    clock, page, runtime = watched
    runtime.flag.force_off("vendor down", ttl=600)
    clock.advance(100)
    before_again = fetch(runtime)
    clock.advance(100)
    runtime.flag.force_off("vendor still down: placed again", ttl=600)
    assert submit(runtime, before_again) == "bypassed_fallback"
    runtime.flag.automatic("the page decides")
    page.set_global("major_outage")
    runtime.poll_now()
    clock.advance(100)
    before_override = fetch(runtime)
    clock.advance(100)
    runtime.flag.force_off("over the page's outage", ttl=600)
    assert submit(runtime, before_override) == "bypassed_fallback"
    under_override = fetch(runtime)
    clock.advance(100)
    runtime.flag.automatic("lifted; the page still shows the outage")
    assert submit(runtime, under_override) == "bypassed_fallback"


def test_a_restart_between_outages_refuses_the_earlier_outages_challenge(
        watched: tuple[FakeClock, FakeStatusPage, FailOpen]) -> None:
    clock, page, runtime = watched
    page.set_global("major_outage")
    runtime.poll_now()
    old = fetch(runtime)
    page.set_global("operational")
    clock.advance(5)
    runtime.stop()
    # The process restarts while enforcement is on: a new runtime, the same page and clock.
    again = FailOpen(config(status_url="https://status.test", poll_interval=30.0),
                     status_transport=page.transport(), clock=clock)
    try:
        again.poll_now()
        assert again.state.enforce
        clock.advance(5)
        page.set_global("major_outage")
        again.poll_now()
        assert submit(again, old) == "fallback_invalid"
        assert submit(again, fetch(again)) == "bypassed_fallback"
    finally:
        again.stop()


def test_a_process_started_during_the_outage_admits_its_siblings_challenges(
        watched: tuple[FakeClock, FakeStatusPage, FailOpen]) -> None:
    # A worker recycled (gunicorn --max-requests) during an outage has seen no recovery: it must
    # still admit a challenge a sibling issued in this outage before it started.
    clock, page, runtime = watched
    page.set_global("major_outage")
    runtime.poll_now()
    clock.advance(20)
    sibling = fetch(runtime)
    clock.advance(1)
    recycled = FailOpen(config(status_url="https://status.test", poll_interval=30.0),
                        status_transport=page.transport(), clock=clock)
    try:
        recycled.poll_now()
        assert not recycled.state.enforce
        assert submit(recycled, sibling) == "bypassed_fallback"
    finally:
        recycled.stop()


def test_a_sibling_that_saw_the_outage_earlier_still_passes_within_the_skew(
        watched: tuple[FakeClock, FakeStatusPage, FailOpen]) -> None:
    # Two workers without a shared store, each polling: the sibling sees outage 2 twenty
    # seconds before this one does; its challenge, issued then, is admitted here.
    clock, page, here = watched
    sibling = FailOpen(config(status_url="https://status.test", poll_interval=30.0),
                       status_transport=page.transport(), clock=clock)
    try:
        page.set_global("major_outage")
        here.poll_now()
        sibling.poll_now()
        clock.advance(60)
        page.set_global("operational")
        for _ in range(2):
            clock.advance(30)
            here.poll_now()
            sibling.poll_now()
        clock.advance(60)
        page.set_global("major_outage")
        sibling.poll_now()
        early = fetch(sibling)
        clock.advance(20)
        here.poll_now()
        assert not here.state.enforce
        assert submit(here, early) == "bypassed_fallback"
    finally:
        sibling.stop()


# --- a fleet on a real redis-server ------------------------------------------------------------


def member(redis_server: RedisServer) -> FailOpen:
    # The servers' real clock: the fleet's record of used solutions begins on Redis's clock
    # and makes up for a server clock ahead of it, which a fake clock moved on would look like.
    runtime = FailOpen(config(store=redis_server.url))
    assert runtime.fleet is not None
    return runtime


def sync(*members: FailOpen) -> None:
    """One turn of each member's fleet sync (what its watcher thread does every second), on
    a clock one millisecond on (the precision the times in a challenge carry)."""
    for runtime in members:
        assert runtime.fleet is not None
        runtime.fleet.sync()
        runtime.flag.refresh()
    moment = time.time()
    while int(time.time() * 1000) == int(moment * 1000):
        time.sleep(0.001)


@pytest.mark.slow
def test_in_a_fleet_the_previous_outages_solution_is_refused_by_another_worker(
        redis_server: RedisServer) -> None:
    # Outage 2 begins milliseconds after outage 1 ended: far within the 35 s issue_skew.
    first, second = member(redis_server), member(redis_server)
    try:
        sync(first, second)  # the first member to sync begins the record of used solutions
        first.flag.force_off("outage 1", ttl=600)  # in the fleet's store
        sync(first, second)
        assert not first.state.enforce and not second.state.enforce
        old = fetch(first)
        first.flag.automatic("recovered")
        sync(first, second)
        assert first.state.enforce and second.state.enforce, "enforcement on, fleet-wide"
        second.flag.force_off("outage 2", ttl=600)
        sync(first, second)
        assert not first.state.enforce
        assert submit(first, old) == "fallback_invalid"
        assert submit(second, old) == "fallback_invalid"
        # The async twin asks the gate off the event loop (Redis): the same answer.
        decided = asyncio.run(second.guard.adecide(None, path="/signup", client="203.0.113.9",
                                                   solution=old, policy="fallback",
                                                   route="/signup"))
        assert decided.outcome == "fallback_invalid"
        assert "earlier outage" in decided.reason
        fresh = fetch(second)
        assert submit(first, fresh) == "bypassed_fallback", "issued by a sibling, this outage"
        assert submit(second, fresh) == "fallback_invalid", "and used once, fleet-wide"
    finally:
        first.stop()
        second.stop()


def test_a_sibling_that_saw_the_recovery_later_cannot_carry_outage_1_into_outage_2(
        watched: tuple[FakeClock, FakeStatusPage, FailOpen]) -> None:
    # Two workers polling for themselves: the sibling still bypasses 20 s after this one saw
    # the recovery, and issues a challenge then, after this worker's resumption. It names the
    # outage it was issued in (outage 1, which began before that resumption): refused.
    clock, page, here = watched
    lagging = FailOpen(config(status_url="https://status.test", poll_interval=30.0),
                       status_transport=page.transport(), clock=clock)
    try:
        page.set_global("major_outage")
        here.poll_now()
        lagging.poll_now()
        clock.advance(120)
        page.set_global("operational")
        for _ in range(2):
            clock.advance(2)
            here.poll_now()
        assert here.state.enforce and not lagging.state.enforce
        clock.advance(20)
        late = fetch(lagging)
        clock.advance(5)
        page.set_global("major_outage")
        here.poll_now()
        assert not here.state.enforce
        assert submit(here, late) == "fallback_invalid"
    finally:
        lagging.stop()
