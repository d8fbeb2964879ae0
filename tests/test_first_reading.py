"""A worker started during an outage admits its first protected requests as the running ones do.

A fresh process enforces until its watcher's first turn has read the status page (or, in a fleet,
synced with the others). A request that would be refused before then waits for that turn, bounded
by the status timeout, and is decided from the flag as the turn left it. However many requests
wait, the only status request is the watcher's own poll; an unreadable page, a 429, a timeout or a
page that shows no outage leaves enforcement on, exactly as before.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from _redis_kit import wait_for

from failopen import Config
from failopen.engine.guard import Decision
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.runtime import FailOpen
from failopen.testing import FakeRequest, FakeStatusPage, Reply, as_transport


class GatedPage:
    """The fake page in-process, each request held until the test opens the gate."""

    def __init__(self, page: FakeStatusPage) -> None:
        self.page = page
        self.gate = threading.Event()
        self.asked = threading.Event()

    def handle(self, request: FakeRequest) -> Reply:
        self.asked.set()
        self.gate.wait(30)
        return self.page.handle(request)

    def transport(self) -> httpx.MockTransport:
        return as_transport(self.handle)


class Unavailable:
    """The verify call during the vendor's outage."""

    def __init__(self) -> None:
        self.calls = 0

    def verify(self, token: str) -> VerifyResult:
        self.calls += 1
        return VerifyResult(VerifyOutcome.UNAVAILABLE, "vendor down")

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


@pytest.fixture
def outage(fake_status_page: FakeStatusPage) -> FakeStatusPage:
    fake_status_page.set_global("major_outage")
    return fake_status_page


@pytest.fixture
def make(failopen_config: Config) -> Iterator[Callable[..., FailOpen]]:
    """A fresh worker's FailOpen: built, never started (its first request starts the watcher).
    Polls every 30 s, so the only status request a test sees is the first turn's."""
    built: list[FailOpen] = []

    def build(**kwargs: Any) -> FailOpen:
        changes = {k: kwargs.pop(k) for k in list(kwargs) if k in Config.__dataclass_fields__}
        changes.setdefault("poll_interval", 30.0)
        # Bursts from one client: the outage rate limit would cut them (tests/fallback/).
        changes.setdefault("outage_rate", "none")
        runtime = FailOpen(failopen_config.replace(**changes), **kwargs)
        built.append(runtime)
        return runtime

    yield build
    for runtime in built:
        runtime.stop()


def in_threads(n: int, call: Callable[[], Decision]) -> list[Decision]:
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: call(), range(n)))


# --- the first requests wait for the first reading, and share it ----------------------------


def test_the_first_tokenless_login_of_a_fresh_worker_is_bypassed_during_an_outage(
    make: Callable[..., FailOpen], outage: FakeStatusPage
) -> None:
    runtime = make()
    decision = runtime.decide(None, path="/login", client="203.0.113.7")
    assert (decision.allow, decision.outcome) == (True, "bypassed_flag_off"), decision
    assert runtime.state.source == "watcher" and runtime.state.enforce is False
    assert outage.requests == 1, "one status request: the watcher's first poll"


def test_a_burst_of_first_requests_holds_one_thread_for_the_watchers_one_poll(
    make: Callable[..., FailOpen], outage: FakeStatusPage
) -> None:
    """One request thread waits for the first reading; the rest of a burst is decided at once
    from the flag as it is (refused, as before any reading: never a bypass without evidence),
    not held for the status timeout each (issue 31, item 8: a flood held every thread)."""
    gated = GatedPage(outage)
    runtime = make(status_transport=gated.transport(), status_timeout=30.0)
    first = runtime.watcher.first_reading
    assert first is not None
    tokens = [None, "", "not printable \x00", "x" * 5000]  # each refused before verify
    with ThreadPoolExecutor(8) as pool:
        waiter = pool.submit(runtime.decide, None, path="/login")
        assert gated.asked.wait(10), "the watcher never asked the page"
        assert wait_for(first._waiter.locked)
        try:
            others = [pool.submit(runtime.decide, tokens[i % len(tokens)], path="/login")
                      .result(10) for i in range(24)]  # answered while the page is held
        finally:
            gated.gate.set()
        assert waiter.result(10).outcome == "bypassed_flag_off"
    assert {d.outcome for d in others} == {"missing_token", "invalid_token"}, others
    assert outage.requests == 1
    assert runtime.decide(None, path="/login").outcome == "bypassed_flag_off"


def test_a_request_whose_token_cannot_be_verified_asks_nothing_more_of_the_page(
    make: Callable[..., FailOpen], outage: FakeStatusPage
) -> None:
    """Verify unavailable before the first reading: the watcher's poll is the confirmation,
    not a second status request made for the request. One of them waits for that poll (at most
    CONFIRM_WAIT); the others answer from the flag as it is: bypassed if the reading is in,
    else "cannot verify now" (503), never a bypass without it."""
    verifier = Unavailable()
    runtime = make(verifier=verifier)
    decisions = in_threads(8, lambda: runtime.decide("a-token", path="/login"))
    assert {d.outcome for d in decisions} <= {
        "bypassed_flag_off", "bypassed_confirmed_outage", "cannot_verify"}, decisions
    first = runtime.watcher.first_reading
    assert first is not None and first.await_sync()
    assert outage.requests == 1
    # Later requests are bypassed without a verify call, as on every running worker.
    calls = verifier.calls
    assert runtime.decide("a-token").outcome == "bypassed_flag_off"
    assert verifier.calls == calls
    assert outage.requests == 1


def test_a_confirmation_asked_before_the_first_reading_shares_the_watchers_poll(
    make: Callable[..., FailOpen], outage: FakeStatusPage
) -> None:
    """The snippet's ``?confirm=1`` on a fresh worker: one status request, not two. Since
    issue 31 (item 8) the confirmations do not wait for that poll whole: each is answered while
    the page still holds it (one of them waited at most CONFIRM_WAIT), from the flag as it is;
    once the poll has read the outage, the next one answers off."""
    gated = GatedPage(outage)
    runtime = make(status_transport=gated.transport(), status_timeout=30.0)
    runtime.ensure_started()
    assert gated.asked.wait(10)
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(runtime.confirm) for _ in range(4)]
        try:
            states = [future.result(10) for future in futures]
        finally:
            held = not gated.gate.is_set()
            gated.gate.set()
    assert held, "a confirmation waited for the held poll"
    assert [s.enforce for s in states] == [True] * 4
    first = runtime.watcher.first_reading
    assert first is not None and first.await_sync()
    assert runtime.confirm().enforce is False
    assert outage.requests == 1


def test_a_valid_token_does_not_wait_for_the_status_page(
    make: Callable[..., FailOpen], outage: FakeStatusPage, fake_verify_api: Any
) -> None:
    """Only requests that would be refused wait: a healthy vendor's answer is not delayed."""
    gated = GatedPage(outage)
    runtime = make(status_transport=gated.transport(), status_timeout=30.0)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(runtime.decide, fake_verify_api.GOOD, path="/login")
        decision = future.result(10)  # answered while the page is still held
        assert decision.outcome == "valid"
        gated.gate.set()


@pytest.mark.anyio
async def test_async_first_requests_are_bypassed_without_a_thread_each(
    make: Callable[..., FailOpen], outage: FakeStatusPage
) -> None:
    gated = GatedPage(outage)
    runtime = make(status_transport=gated.transport())
    submitted = 0

    class Counting(ThreadPoolExecutor):
        def submit(self, *args: Any, **kwargs: Any) -> Any:
            nonlocal submitted
            submitted += 1
            return super().submit(*args, **kwargs)

    loop = asyncio.get_running_loop()
    executor = Counting(2)
    loop.set_default_executor(executor)
    try:
        tasks = [asyncio.create_task(runtime.adecide(None, path="/login")) for _ in range(50)]
        while not gated.asked.is_set():
            await asyncio.sleep(0.005)
        tasks[0].cancel()  # a client gone must not cancel what the others wait for
        gated.gate.set()
        decisions = await asyncio.wait_for(asyncio.gather(*tasks[1:]), 10)
    finally:
        gated.gate.set()
    assert {d.outcome for d in decisions} == {"bypassed_flag_off"}
    assert outage.requests == 1
    assert submitted == 0, "the waiting requests held thread-pool workers"


# --- never a bypass without evidence, never an unbounded wait ---------------------------------


@pytest.mark.parametrize("fault", ["503", "429", "timeout", "malformed", "not_json",
                                   "missing_global", "unknown_status"])
def test_an_unusable_first_reading_keeps_enforcing(
    make: Callable[..., FailOpen], outage: FakeStatusPage, fault: str
) -> None:
    outage.set_fault(fault)
    runtime = make(status_transport=outage.transport(), indicator_fallback=False)
    decision = runtime.decide(None, path="/login")
    assert (decision.allow, decision.outcome) == (False, "missing_token")
    assert runtime.decide("a-token", path="/login").allow is False
    assert runtime.state.enforce is True


@pytest.mark.parametrize("status", ["operational", "degraded_performance", "under_maintenance"])
def test_a_first_reading_that_shows_no_outage_keeps_enforcing(
    make: Callable[..., FailOpen], fake_status_page: FakeStatusPage, status: str
) -> None:
    fake_status_page.set_global(status)
    runtime = make(verifier=Unavailable())
    assert runtime.decide(None, path="/login").outcome == "missing_token"
    assert runtime.decide("a-token", path="/login").outcome == "cannot_verify"
    assert runtime.state.enforce is True


def test_the_wait_is_bounded_by_the_status_timeout(
    make: Callable[..., FailOpen], outage: FakeStatusPage
) -> None:
    """A page that hangs: the request is refused as before once the status timeout has passed,
    while the watcher's poll is still held; no request of its own reaches the page."""
    gated = GatedPage(outage)
    runtime = make(status_transport=gated.transport(), status_timeout=0.2,
                   verifier=Unavailable())
    try:
        assert runtime.decide(None, path="/login").outcome == "missing_token"
        assert runtime.decide("a-token", path="/login").outcome == "cannot_verify"
        assert runtime.confirm().enforce is True
        assert gated.asked.is_set() and not gated.gate.is_set()
        assert outage.requests == 0, "the held poll has not been answered yet"
    finally:
        gated.gate.set()


def test_with_open_after_above_one_a_first_reading_cannot_open_so_nothing_waits(
    make: Callable[..., FailOpen], outage: FakeStatusPage
) -> None:
    """FAILOPEN_OPEN_AFTER=2: one reading is not the sustained outage asked for, so the first
    requests are refused at once (they would be after the reading, too)."""
    gated = GatedPage(outage)
    runtime = make(status_transport=gated.transport(), status_timeout=30.0, open_after=2)
    try:
        with ThreadPoolExecutor(1) as pool:
            decision = pool.submit(runtime.decide, None, path="/login").result(10)
        assert decision.outcome == "missing_token"
    finally:
        gated.gate.set()


def test_a_stopped_runtime_does_not_wait(
    make: Callable[..., FailOpen], outage: FakeStatusPage
) -> None:
    gated = GatedPage(outage)
    runtime = make(status_transport=gated.transport(), status_timeout=30.0)
    runtime.stop()
    try:
        with ThreadPoolExecutor(1) as pool:
            decision = pool.submit(runtime.decide, None, path="/login").result(10)
        assert decision.outcome == "missing_token"
        assert not gated.asked.is_set()
    finally:
        gated.gate.set()


# --- a fresh fleet member adopts the fleet's reading and override in its first sync ------------


def test_a_fresh_fleet_member_admits_its_first_login_on_the_fleets_reading(
    fleet: Callable[..., list[FailOpen]], outage: FakeStatusPage
) -> None:
    """The running fleet has confirmed the outage; a member started now (a scale-up) makes no
    status request: its first sync brings the leader's published reading."""
    [running] = fleet(1)
    running.start()
    assert wait_for(lambda: running.fleet is not None and running.fleet.leader
                    and not running.state.enforce)
    [fresh] = fleet(1)
    decision = fresh.decide(None, path="/login")
    assert decision.outcome == "bypassed_flag_off", decision
    assert fresh.state.global_status == "major_outage"
    assert fresh.counted.count == 0  # type: ignore[attr-defined]
    assert fresh.fleet is not None and not fresh.fleet.leader


def test_a_fresh_fleet_member_admits_its_first_login_on_an_operators_override(
    fleet: Callable[..., list[FailOpen]], fake_status_page: FakeStatusPage
) -> None:
    """An override forcing enforcement off (the page shows nothing) reaches a fresh member in
    its first sync: its first request is admitted as on every other member, not refused."""
    [operator] = fleet(1)
    operator.flag.force_off("vendor outage INC-18", ttl=600)
    [fresh] = fleet(1)
    decision = fresh.decide(None, path="/login")
    assert decision.outcome == "bypassed_flag_off", decision
    assert fresh.state.source == "override"


def test_a_fresh_fleet_member_keeps_enforcing_when_the_fleet_shows_no_outage(
    fleet: Callable[..., list[FailOpen]], fake_status_page: FakeStatusPage
) -> None:
    [running] = fleet(1)
    running.start()
    assert wait_for(lambda: running.state.source == "watcher")
    [fresh] = fleet(1)
    assert fresh.decide(None, path="/login").outcome == "missing_token"
    assert fresh.state.enforce is True


def test_a_whole_fleet_started_during_an_outage_admits_every_members_first_login(
    fleet: Callable[..., list[FailOpen]], outage: FakeStatusPage
) -> None:
    """A cold start (a deploy restarting every worker, an empty store): one member leads and
    reads the page; the others' first syncs find no reading yet. Their first requests wait for
    the leader's (bounded) instead of being refused, and only the leader asks the page."""
    members = fleet(3, poll_interval=30.0)
    decisions = in_threads(3, lambda: members.pop().decide(None, path="/login"))
    assert {d.outcome for d in decisions} == {"bypassed_flag_off"}, decisions
    assert outage.requests == 1


def test_shadow_mode_only_reports_the_first_bypass(
    make: Callable[..., FailOpen], outage: FakeStatusPage, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = make(mode="shadow")
    decision = runtime.decide(None, path="/login")
    assert (decision.allow, decision.outcome, decision.shadow) == (False, "missing_token", True)
    assert "shadow: would bypass" in caplog.text


def test_an_operators_force_on_wins_over_a_fresh_members_first_reading(
    fleet: Callable[..., list[FailOpen]], outage: FakeStatusPage
) -> None:
    """A bot attack during the vendor's incident: forced on in the store, the outage on the
    page. A fresh member's first request is refused, not admitted on the page's reading."""
    [operator] = fleet(1)
    operator.flag.force_on("attack in progress", ttl=600)
    [fresh] = fleet(1)
    assert fresh.decide(None, path="/login").outcome == "missing_token"
    assert fresh.state.source == "override" and fresh.state.enforce is True


# --- the helper itself -------------------------------------------------------------------------


def test_a_failing_end_callback_is_logged_and_the_waiters_still_hear_of_the_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from failopen.engine.first_reading import FirstReading

    first = FirstReading(wait=30.0)

    def broken() -> None:
        raise RuntimeError("a bug in a callback")

    first.on_end.append(broken)
    with ThreadPoolExecutor(1) as pool:
        waiter = pool.submit(first.await_sync)
        first.ended()
        assert waiter.result(10) is True
    assert first.pending is False
    assert "first reading callback failed" in caplog.text


def test_a_wait_that_cannot_end_is_not_made() -> None:
    """No watcher thread to end the first turn (never started, or stopped): no wait at all."""
    from failopen.engine.first_reading import FirstReading

    first = FirstReading(wait=30.0, running=lambda: False)
    assert first.under_way() is False
    assert first.await_sync() is False
    assert asyncio.run(first.await_async()) is False
    with pytest.raises(ValueError, match="zero or more seconds"):
        FirstReading(wait=float("nan"))
