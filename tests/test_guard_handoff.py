"""Where the outage gate's Redis calls run (issue 30, A4): off the event loop on every async path
(``abypass``, ``adecide`` with the flag off, ``adecide`` on a confirmed outage, the second
vendor's route), on the caller's thread on the sync ones, as before.

The rate limit and the used-solution record are failopen's own, on a real redis-server; each
records the thread its calls ran on. tests/integrations/test_asgi_redis_outage.py shows the same
through the ASGI middleware with a frozen Redis.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from _redis_kit import RedisServer, keys_back_since

from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard import Decision, Guard, OutageConfirmer
from failopen.engine.outage import OutageGate
from failopen.engine.watcher import StatusWatcher
from failopen.fallback import (
    FallbackChallenges,
    MemoryUsedSolutions,
    OutageRateLimit,
    RedisUsedSolutions,
)
from failopen.providers.status import StatusReport
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.secret import Secret
from failopen.testing.fallback import solve_challenge

PREFIX = "failopen:"
CLIENT = "203.0.113.9"


class Page:
    def fetch(self) -> StatusReport:
        return StatusReport(global_status="major_outage", global_component=None, regions=(),
                            fetched_at=0.0, source="components")


class Verifier:
    """The vendor's verify call: unavailable (an outage to confirm), or the second vendor's
    verdict: valid."""

    def __init__(self, outcome: VerifyOutcome, name: str = "") -> None:
        self.name = name
        self.result = VerifyResult(outcome, f"scripted {outcome.value}")

    def verify(self, token: str, **kwargs: Any) -> VerifyResult:
        return self.result

    async def averify(self, token: str, **kwargs: Any) -> VerifyResult:
        return self.result


class Threads:
    """The thread each Redis-backed call of the gate ran on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *parts: Any) -> None:
        self.seen: list[int] = []
        for part, method in ((p, m) for p in parts for m in ("test", "hit", "claim")):
            real = getattr(part, method, None)
            if real is not None:
                monkeypatch.setattr(part, method, self._spy(real))

    def _spy(self, real: Any) -> Any:
        def spied(*args: Any, **kwargs: Any) -> Any:
            self.seen.append(threading.get_ident())
            return real(*args, **kwargs)

        return spied


@pytest.fixture
def guard(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    keys_back_since(redis_server, ago=60)  # the fleet's record of used solutions is complete
    flag = EnforcementFlag()
    page = Page()
    confirmer = OutageConfirmer(page, StatusWatcher(page, flag), ttl=10.0, wait=10.0)
    made = Guard(flag, Verifier(VerifyOutcome.UNAVAILABLE), confirmer)  # type: ignore[arg-type]
    rate = OutageRateLimit("100/minute", redis_url=redis_server.url, prefix=PREFIX)
    used = RedisUsedSolutions(redis_server.url, password=None, prefix=PREFIX,
                              fallback=MemoryUsedSolutions())
    challenges = FallbackChallenges(Secret("handoff-secret-" + "s" * 32), cost=50, ttl=300.0)
    # The runtime's skew (poll interval + status timeout): the confirmed outage below turns the
    # flag off after the challenge was issued, as a browser's arrives during the confirmation.
    made.gate = OutageGate(rate=rate, challenges=challenges, used=used, issue_skew=35.0)
    made.threads = Threads(monkeypatch, rate, used)  # type: ignore[attr-defined]
    made.solve = lambda: solve_challenge(challenges.issue())  # type: ignore[attr-defined]
    yield made
    rate.close()
    used.close()


async def _ask(guard: Any, how: str) -> Decision | None:
    if how == "abypass, open":
        return await guard.abypass(path="/a", client=CLIENT, policy="open")
    if how == "abypass, fallback":
        return await guard.abypass(path="/a", client=CLIENT, policy="fallback",
                                   solution=guard.solve())
    if how in ("adecide, fallback", "adecide, confirmed outage"):
        return await guard.adecide(None if how.endswith("fallback") else "tok", path="/a",
                                   client=CLIENT, policy="fallback", solution=guard.solve())
    assert how == "adecide, second vendor"
    guard.gate.vendor = Verifier(VerifyOutcome.VALID, "hcaptcha")
    return await guard.adecide(None, path="/a", client=CLIENT, policy="fallback",
                               solution="a-second-vendor-token")


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["abypass, open", "abypass, fallback", "adecide, fallback",
                                 "adecide, confirmed outage", "adecide, second vendor"])
async def test_every_async_path_asks_redis_off_the_event_loop(guard: Any, how: str) -> None:
    if how != "adecide, confirmed outage":
        guard.flag.force_off("vendor outage")
    decision = await _ask(guard, how)
    assert decision is not None and decision.allow and decision.bypassed, decision
    loop_thread = threading.get_ident()
    # fallback: test, claim, hit; an open route and a second vendor's: one hit (the check in it)
    calls = {"abypass, open": 1, "adecide, second vendor": 2}.get(how, 3)
    assert len(guard.threads.seen) == calls
    assert loop_thread not in guard.threads.seen


@pytest.mark.parametrize("policy", ["open", "fallback"])
def test_the_sync_path_asks_redis_on_the_caller_s_thread_as_before(guard: Any,
                                                                   policy: str) -> None:
    guard.flag.force_off("vendor outage")
    solution = guard.solve() if policy == "fallback" else None
    assert guard.decide(None, path="/a", client=CLIENT, policy=policy, solution=solution).allow
    assert guard.bypass(path="/a", client=CLIENT, policy=policy,
                        solution=guard.solve() if solution else None).allow
    assert set(guard.threads.seen) == {threading.get_ident()}


@pytest.mark.anyio
async def test_a_gate_in_memory_takes_no_hand_off() -> None:
    flag = EnforcementFlag()
    guard = Guard(flag, Verifier(VerifyOutcome.VALID), None)  # type: ignore[arg-type]
    rate = OutageRateLimit("100/minute")
    guard.gate = OutageGate(rate=rate, used=MemoryUsedSolutions())
    threads = Threads(pytest.MonkeyPatch(), rate)
    flag.force_off("vendor outage")
    assert (await guard.abypass(path="/a", client=CLIENT)) is not None
    assert threads.seen == [threading.get_ident()]  # the open route's one hit


def test_the_gate_blocks_where_a_policy_asks_redis() -> None:
    url = "redis://127.0.0.1:9/0"  # never connected to: building a client makes no call
    redis_rate = OutageRateLimit("20/minute", redis_url=url)
    redis_used = RedisUsedSolutions(url, password=None, prefix=PREFIX,
                                    fallback=MemoryUsedSolutions())
    cases = {
        "nothing": OutageGate(),
        "memory": OutageGate(rate=OutageRateLimit("20/minute"), used=MemoryUsedSolutions()),
        "rate in Redis": OutageGate(rate=redis_rate, used=MemoryUsedSolutions()),
        "used in Redis": OutageGate(rate=OutageRateLimit("20/minute"), used=redis_used),
    }
    blocks = {name: tuple(gate.blocks(policy) for policy in ("open", "fallback", "closed", "?"))
              for name, gate in cases.items()}
    assert blocks == {"nothing": (False, False, False, False),
                      "memory": (False, False, False, False),
                      "rate in Redis": (True, True, False, False),
                      "used in Redis": (False, True, False, False)}


def test_the_hand_off_runs_a_call_on_another_thread_and_returns_its_answer() -> None:
    from failopen.fallback.handoff import off_loop

    async def main() -> tuple[int, int]:
        return threading.get_ident(), await off_loop(threading.get_ident)

    loop_thread, other = asyncio.run(main())
    assert loop_thread != other
