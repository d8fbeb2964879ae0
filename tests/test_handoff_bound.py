"""The fallback's hand-off pool is bounded (issue 31, item 8's review): a Redis that answers
slowly, but within its timeout, no longer lets a flood queue a job per request without end.

At most HANDOFF_PENDING jobs are in the pool at once; a request whose gate check finds it full is
refused at once (503 ``cannot_verify`` with ``Retry-After``), never admitted and never queued.
The rate limit runs on a real redis-server; its count is held back by the test (Redis slow
within its timeout) until the request beyond the bound has been answered.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _redis_kit import RedisServer

from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard import Guard
from failopen.engine.outage import OutageGate
from failopen.fallback import OutageRateLimit
from failopen.fallback.handoff import HANDOFF_PENDING, HANDOFF_THREADS
from failopen.providers.verify import VerifyOutcome, VerifyResult

PREFIX = "failopen:"


class Unavailable:
    def verify(self, token: str) -> VerifyResult:
        return VerifyResult(VerifyOutcome.UNAVAILABLE, "vendor down")

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


class SlowRedis:
    """The rate limit's count, held until the test lets go: Redis slow, within its timeout."""

    def __init__(self, rate: OutageRateLimit, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.entered = 0
        self._lock = threading.Lock()
        real = rate.hit

        def slow_hit(client: str, route: str) -> int | None:
            with self._lock:
                self.entered += 1
            self.release.wait(30)
            return real(client, route)

        monkeypatch.setattr(rate, "hit", slow_hit)


@pytest.fixture
def guard(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    flag = EnforcementFlag()
    made = Guard(flag, Unavailable(), None)
    rate = OutageRateLimit("100/minute", redis_url=redis_server.url, prefix=PREFIX)
    made.gate = OutageGate(rate=rate)
    made.slow = SlowRedis(rate, monkeypatch)  # type: ignore[attr-defined]
    flag.force_off("vendor outage")
    try:
        yield made
    finally:
        made.slow.release.set()  # type: ignore[attr-defined]
        rate.close()


def client(n: int) -> str:
    return f"198.51.100.{n % 250}" if n < 250 else f"2001:db8:{n}::1"


async def fill(guard: Any) -> list[asyncio.Task[Any]]:
    """HANDOFF_PENDING requests in the pool: its threads all in (slow) Redis, the rest queued."""
    slow: SlowRedis = guard.slow
    held = [asyncio.create_task(guard.adecide(None, path="/a", client=client(n), policy="open"))
            for n in range(HANDOFF_PENDING)]
    for _ in range(10_000):
        if slow.entered == HANDOFF_THREADS:
            break
        await asyncio.sleep(0.001)
    assert slow.entered == HANDOFF_THREADS
    return held


@pytest.mark.anyio
async def test_a_request_beyond_the_hand_off_bound_is_refused_at_once(guard: Any) -> None:
    slow: SlowRedis = guard.slow
    held = await fill(guard)
    try:
        beyond = await asyncio.wait_for(
            guard.adecide(None, path="/a", client=client(999), policy="open"), 10)
        fast_path = await asyncio.wait_for(
            guard.abypass(path="/a", client=client(998), policy="open"), 10)
    finally:
        answered_while_full = slow.entered == HANDOFF_THREADS
        slow.release.set()
    assert answered_while_full
    assert (beyond.allow, beyond.status_code, beyond.outcome) == (False, 503, "cannot_verify")
    assert beyond.retry_after is not None and "busy" in beyond.reason
    assert fast_path is not None and (fast_path.allow, fast_path.status_code) == (False, 503)
    decisions = await asyncio.wait_for(asyncio.gather(*held), 30)
    assert {d.outcome for d in decisions} == {"bypassed_flag_off"}
    # The jobs' slots came back as they ended: the next request is queued and admitted.
    after = await asyncio.wait_for(
        guard.adecide(None, path="/a", client=client(997), policy="open"), 10)
    assert after.outcome == "bypassed_flag_off"
    assert guard.counts().get("internal_error") is None


@pytest.mark.anyio
async def test_a_confirmed_outage_beyond_the_bound_is_refused_too(guard: Any) -> None:
    """The other async path to the gate: a verify unavailable, the outage confirmed for it."""
    from failopen.engine.guard import OutageConfirmer
    from failopen.engine.watcher import StatusWatcher
    from failopen.providers.status import StatusReport

    class Page:
        def fetch(self) -> StatusReport:
            return StatusReport(global_status="major_outage", global_component=None,
                                regions=(), fetched_at=0.0, source="components")

    slow: SlowRedis = guard.slow
    held = await fill(guard)
    guard.flag.automatic()  # enforcing again, no reading: the next request confirms the outage
    guard.confirmer = OutageConfirmer(Page(), StatusWatcher(Page(), guard.flag), ttl=10.0)
    try:
        beyond = await asyncio.wait_for(
            guard.adecide("tok", path="/a", client=client(999), policy="open"), 10)
    finally:
        answered_while_full = slow.entered == HANDOFF_THREADS
        slow.release.set()
    assert answered_while_full
    assert guard.confirmer.requests == 1, "the outage was confirmed for it"
    assert (beyond.allow, beyond.status_code, beyond.outcome) == (False, 503, "cannot_verify")
    await asyncio.wait_for(asyncio.gather(*held), 30)
