"""A slow status page holds one request thread per process, not all of them (issue 31, item 8).

A fresh worker's first status poll is a check under way. Before the fix every ``?confirm=1`` (and
every token-less request to a protected route) waited for it whole, up to the status timeout:
a flood of them held every thread of a ``gunicorn --threads 4`` worker, and an unprotected page
stalled behind them. Now, for any check under way, at most one request thread per process waits,
a confirmation for at most :data:`CONFIRM_WAIT`, a refused request for at most the status timeout;
every other caller is answered at once from the flag as it is, which before any reading is
"enforce": nothing is bypassed without evidence.

The page is held (not timed out) in these tests, so a call that returns before the test opens
the gate cannot have waited for the page; how long each waiter may wait is recorded, not timed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from failopen import Config
from failopen.engine.confirm import CONFIRM_WAIT
from failopen.runtime import FailOpen
from failopen.testing import FakeRequest, FakeStatusPage, Reply, as_transport

THREADS = 8
#: Far above anything a test waits for: a call that waited for the page would not return.
STATUS_TIMEOUT = 60.0


class HeldPage:
    """The fake page in-process, each request held until the test opens the gate."""

    def __init__(self, page: FakeStatusPage) -> None:
        self.page = page
        self.gate = threading.Event()
        self.asked = threading.Event()
        self.count = 0  # requests received, held or answered

    def handle(self, request: FakeRequest) -> Reply:
        self.count += 1
        self.asked.set()
        self.gate.wait(STATUS_TIMEOUT)
        return self.page.handle(request)

    def transport(self) -> httpx.MockTransport:
        return as_transport(self.handle)


class Waits:
    """Records each wait made on it (its bound, and how many waited at once); waits for real."""

    def __init__(self) -> None:
        self.bounds: list[float | None] = []
        self.most = 0
        self._now = 0
        self._lock = threading.Lock()

    def waiting(self, bound: float | None, wait: Callable[[], bool]) -> bool:
        with self._lock:
            self.bounds.append(bound)
            self._now += 1
            self.most = max(self.most, self._now)
        try:
            return wait()
        finally:
            with self._lock:
                self._now -= 1


class RecordedEvent(threading.Event):
    """The first reading's end, with every wait on it recorded."""

    def __init__(self, waits: Waits) -> None:
        super().__init__()
        self.waits = waits

    def wait(self, timeout: float | None = None) -> bool:
        return self.waits.waiting(timeout, lambda: super(RecordedEvent, self).wait(timeout))


class RecordedLock:
    """The confirmer's single-flight lock, with every blocking acquire recorded."""

    def __init__(self, waits: Waits) -> None:
        self.waits = waits
        self._lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not blocking:
            return self._lock.acquire(blocking=False)
        return self.waits.waiting(timeout, lambda: self._lock.acquire(timeout=timeout))

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()


@pytest.fixture
def outage(fake_status_page: FakeStatusPage) -> FakeStatusPage:
    fake_status_page.set_global("major_outage")
    return fake_status_page


@pytest.fixture
def fresh(failopen_config: Config, outage: FakeStatusPage) -> Iterator[tuple[FailOpen, HeldPage]]:
    """A fresh worker's runtime whose first poll (and every status request) the page holds."""
    held = HeldPage(outage)
    runtime = FailOpen(failopen_config.replace(
        poll_interval=30.0, status_timeout=STATUS_TIMEOUT, outage_rate="none", confirm_ttl=30.0),
        status_transport=held.transport())
    try:
        yield runtime, held
    finally:
        held.gate.set()
        runtime.stop()


def recorded_first_reading(runtime: FailOpen) -> Waits:
    waits = Waits()
    first = runtime.watcher.first_reading
    assert first is not None
    first._ended = RecordedEvent(waits)
    return waits


def until(condition: Callable[[], bool]) -> None:
    """Wait (at most 10 s) for ``condition``, which another thread makes true."""
    for _ in range(10_000):
        if condition():
            return
        threading.Event().wait(0.001)
    raise AssertionError("the condition never came true")


def all_answered(futures: list[Any], held: HeldPage) -> list[Any]:
    """Every result, each within 10 s; on a failure the page lets go (a failing run ends)."""
    try:
        return [future.result(10) for future in futures]
    except BaseException:
        held.gate.set()
        raise


# --- ?confirm=1 on a fresh worker ----------------------------------------------------------------


def test_confirmations_on_a_fresh_worker_are_answered_while_its_first_poll_is_held(
    fresh: tuple[FailOpen, HeldPage],
) -> None:
    """A flood of ``?confirm=1`` while the first poll hangs: one caller waits, for at most
    CONFIRM_WAIT; every answer comes while the page still holds the poll, and says enforce."""
    runtime, held = fresh
    waits = recorded_first_reading(runtime)
    runtime.ensure_started()
    assert held.asked.wait(10), "the watcher never asked the page"
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(runtime.confirm) for _ in range(THREADS * 4)]
        states = all_answered(futures, held)  # the page still holds the poll: nobody waited for it
        assert not held.gate.is_set()
    assert {state.enforce for state in states} == {True}, "a bypass without a reading"
    assert waits.most == 1, f"{waits.most} threads waited at once"
    assert waits.bounds and all(b is not None and b <= CONFIRM_WAIT for b in waits.bounds), \
        waits.bounds
    assert held.count == 1, "one status request: the watcher's first poll"


@pytest.mark.anyio
async def test_async_confirmations_wait_at_most_confirm_wait_for_the_first_poll(
    fresh: tuple[FailOpen, HeldPage],
) -> None:
    runtime, held = fresh
    runtime.ensure_started()
    while not held.asked.is_set():
        await asyncio.sleep(0.005)
    try:
        states = await asyncio.wait_for(
            asyncio.gather(*(runtime.aconfirm() for _ in range(THREADS))), 10)
    finally:
        answered_while_held = not held.gate.is_set()
        held.gate.set()
    assert answered_while_held
    assert {state.enforce for state in states} == {True}


# --- the confirmer's own check -----------------------------------------------------------------


def test_while_a_confirmers_check_hangs_at_most_one_other_thread_waits_for_it(
    fresh: tuple[FailOpen, HeldPage],
) -> None:
    """After the first reading: one caller makes the check (held by the page); of the others,
    at most one waits, for at most CONFIRM_WAIT, and the rest answer at once."""
    runtime, held = fresh
    first = runtime.watcher.first_reading
    assert first is not None
    first.ended()  # the first turn is over (it timed out): the next confirm checks itself
    confirmer = runtime.confirmer
    assert confirmer is not None
    waits = Waits()
    confirmer._lock = RecordedLock(waits)  # type: ignore[assignment]
    with ThreadPoolExecutor(THREADS + 1) as pool:
        checking = pool.submit(runtime.confirm)
        # (The watcher's poll is held too: the page being asked does not say the check began.)
        until(confirmer._lock.locked)
        states = all_answered([pool.submit(runtime.confirm) for _ in range(THREADS * 4)], held)
        assert not held.gate.is_set() and not checking.done()
        held.gate.set()
        assert checking.result(10).enforce is False
    assert {state.enforce for state in states} == {True}
    assert waits.most <= 1, f"{waits.most} threads waited at once"
    assert all(b is not None and b <= CONFIRM_WAIT for b in waits.bounds), waits.bounds


# --- token-less requests to a protected route on a fresh worker -------------------------------


def test_tokenless_requests_on_a_fresh_worker_hold_one_thread_for_the_first_poll(
    fresh: tuple[FailOpen, HeldPage],
) -> None:
    """A flood of token-less POSTs while the first poll hangs: one thread waits for it (at most
    the status timeout); the others are refused at once, as without a reading (never a bypass
    without evidence). Once the reading shows the outage, the one that waited is admitted."""
    runtime, held = fresh
    waits = recorded_first_reading(runtime)
    runtime.ensure_started()
    assert held.asked.wait(10)
    with ThreadPoolExecutor(THREADS) as pool:
        waiter = pool.submit(runtime.decide, None, path="/login")
        until(lambda: bool(waits.bounds))  # the first caller holds the one waiting place
        decisions = all_answered([pool.submit(runtime.decide, None, path="/login")
                                  for _ in range(THREADS * 4)], held)
        assert not held.gate.is_set() and not waiter.done()
        held.gate.set()
        assert waiter.result(10).outcome == "bypassed_flag_off"
    assert {d.outcome for d in decisions} == {"missing_token"}, decisions
    assert waits.most == 1, f"{waits.most} threads waited at once"
    assert all(b is not None and b <= STATUS_TIMEOUT for b in waits.bounds), waits.bounds
    assert runtime.decide(None, path="/login").outcome == "bypassed_flag_off"
    assert held.page.requests == 1


def test_a_tokenless_wait_is_bounded_by_the_status_timeout(
    fresh: tuple[FailOpen, HeldPage],
) -> None:
    runtime, held = fresh
    waits = recorded_first_reading(runtime)
    runtime.ensure_started()
    assert held.asked.wait(10)
    with ThreadPoolExecutor(1) as pool:
        waiter = pool.submit(runtime.decide, None, path="/login")
        until(lambda: bool(waits.bounds))
        held.gate.set()
        waiter.result(10)
    assert waits.bounds == [STATUS_TIMEOUT]
