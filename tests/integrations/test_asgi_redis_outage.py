"""During an outage the ASGI middleware asks the fleet's Redis off its event loop (issue 30, A4).

A ``fallback`` or rate-limited ``open`` request makes up to three Redis round trips (the outage
rate limit's test, the used-solution claim, the rate limit's count). Here a real redis-server is
frozen (SIGSTOP) while such a request is under way, and another request on the same event loop
must be served meanwhile: that one then thaws Redis (SIGCONT), so the guarded request's call is
answered. Made on the loop (as before), the call held the loop until its timeout, the other
request was served only after it, and the guarded request was counted in memory (with a
``failopen.fallback_redis_failed`` warning).

Then what must not change on the new path: single use and the rate limit stay exact fleet-wide
under concurrent requests over two middleware instances sharing one Redis, and a Redis that is
gone costs no request an error (memory counts instead).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from _asgi_kit import Stack
from _redis_kit import RedisServer, keys_back_since

from failopen.engine.outage import OutageGate
from failopen.fallback import MemoryUsedSolutions, OutageRateLimit, RedisUsedSolutions
from failopen.testing import solve_challenge

pytestmark = pytest.mark.anyio

Make = Callable[..., Stack]
SECRET = "s" * 40
PREFIX = "failopen:"
# Long enough that a call made on a free loop is answered before it (the thawing request runs
# as soon as the loop is free); a call made on the loop itself waits it out.
TIMEOUT = 5.0


def fleet_stack(make_asgi: Make, redis_server: RedisServer, *, rate: str,
                timeout: float = TIMEOUT) -> Stack:
    """A middleware in fleet mode during an outage: ``/login`` is a fallback route, ``/raw``
    an open one, both under the outage rate ``rate`` counted in Redis."""
    stack = make_asgi(store=redis_server.url, outage_policy_routes="/login=fallback",
                      fallback_secret=SECRET, fallback_cost=2000, outage_rate=rate)
    gate = stack.runtime.guard.gate
    # The runtime's own, but with a timeout a busy test machine never reaches.
    for part in (gate.rate, gate.used):
        part.close()  # type: ignore[union-attr]
    gate.rate = OutageRateLimit(rate, redis_url=redis_server.url, password=None, prefix=PREFIX,
                                timeout=timeout)
    gate.used = RedisUsedSolutions(redis_server.url, password=None, prefix=PREFIX,
                                   timeout=timeout, fallback=MemoryUsedSolutions())
    return stack


def outage(*stacks: Stack) -> None:
    """Enforcement off in every worker (an override another one placed counts too)."""
    for stack in stacks:
        if stack.runtime.state.enforce:
            stack.runtime.flag.force_off("vendor outage", ttl=600)


def close_gate(gate: OutageGate) -> None:
    for part in (gate.rate, gate.used):
        getattr(part, "close", lambda: None)()


@pytest.fixture
def frozen(redis_server: RedisServer) -> Iterator[Callable[[], None]]:
    """Freezes the redis-server when called (it answers nothing until thawed); thawed after."""
    process = redis_server.process
    assert process is not None
    yield lambda: process.send_signal(signal.SIGSTOP)
    process.send_signal(signal.SIGCONT)


def redis_failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if getattr(r, "event", None) == "failopen.fallback_redis_failed"]


async def solution(stack: Stack) -> str:
    answer = await stack.client.get("/failopen/challenge")
    assert answer.status_code == 200, answer.text
    return solve_challenge(answer.json())


@pytest.mark.parametrize("policy", ["open", "fallback", "fallback, solution in the body"])
async def test_a_frozen_redis_holds_the_request_not_the_event_loop(
    make_asgi: Make, redis_server: RedisServer, frozen: Callable[[], None],
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, policy: str,
) -> None:
    stack = fleet_stack(make_asgi, redis_server, rate="20/minute")
    outage(stack)
    keys_back_since(redis_server, ago=60)  # the fleet's record of used solutions is complete
    gate = stack.runtime.guard.gate
    solved = await solution(stack) if policy != "open" else ""
    # In a header the middleware decides before the body (Guard.abypass); in the body, with
    # the token (Guard.adecide).
    headers = {"X-Altcha": solved} if policy == "fallback" else {}
    body = {"altcha": solved} if policy.endswith("body") else None
    path = "/raw" if policy == "open" else "/login"
    asked = threading.Event()  # the guarded request has begun asking Redis
    rate: Any = gate.rate

    def spy(name: str) -> None:
        # Whichever call asks first: a fallback route tests, an open route only hits.
        call = getattr(rate, name)

        def spied(client: str, route: str) -> int | None:
            asked.set()
            return call(client, route)  # type: ignore[no-any-return]

        monkeypatch.setattr(rate, name, spied)

    spy("test")
    spy("hit")
    served: list[int] = []
    process = redis_server.process
    assert process is not None

    async def meanwhile() -> None:
        # Another request on the same loop, while the guarded one waits on the frozen Redis.
        for _ in range(20_000):  # 20 s at most: a request that never asks must not hang
            if asked.is_set():
                break
            await asyncio.sleep(0.001)
        assert asked.is_set(), "the guarded request never asked the rate limit"
        served.append((await stack.client.get("/health")).status_code)
        process.send_signal(signal.SIGCONT)

    frozen()
    with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
        guarded, _ = await asyncio.gather(stack.client.post(path, headers=headers, data=body),
                                     meanwhile())
    assert served == [200]
    assert redis_failures(caplog) == [], "the call was held past its timeout: made on the loop"
    assert guarded.status_code == 200, guarded.text
    if policy != "open":
        assert guarded.json()["decision"]["outcome"] == "bypassed_fallback"
        assert redis_server.client().keys(f"{PREFIX}fallback:used:*"), "claimed in Redis"
    assert redis_server.client().keys(f"{PREFIX}fallback:rate*"), "counted in Redis"


async def test_one_solution_sent_at_once_to_two_workers_admits_one_request(
    make_asgi: Make, redis_server: RedisServer,
) -> None:
    stacks = [fleet_stack(make_asgi, redis_server, rate="1000/minute") for _ in range(2)]
    outage(*stacks)
    keys_back_since(redis_server, ago=60)
    solved = await solution(stacks[0])
    answers = await asyncio.gather(*(
        stacks[i % 2].client.post("/login", headers={"X-Altcha": solved}) for i in range(24)))
    assert sorted(a.status_code for a in answers) == [200] + [403] * 23
    refused = {a.json()["error"]["code"] for a in answers if a.status_code == 403}
    assert refused == {"fallback_invalid"}
    # Both workers asked Redis: neither fell back to memory, which would admit one each.
    for stack in stacks:
        assert stack.runtime.guard.gate.used.link.usable()  # type: ignore[union-attr]


@pytest.mark.parametrize("path", ["/raw", "/login"])
async def test_the_outage_rate_limit_holds_across_two_workers_under_a_burst(
    make_asgi: Make, redis_server: RedisServer, path: str,
) -> None:
    stacks = [fleet_stack(make_asgi, redis_server, rate="5/minute") for _ in range(2)]
    outage(*stacks)
    keys_back_since(redis_server, ago=60)

    async def one(i: int) -> httpx.Response:
        stack = stacks[i % 2]
        # Every fallback request with a fresh solution: only the rate limit can refuse it.
        headers = {"X-Altcha": await solution(stack)} if path == "/login" else {}
        return await stack.client.post(path, headers=headers)

    answers = await asyncio.gather(*(one(i) for i in range(30)))
    assert sorted(a.status_code for a in answers) == [200] * 5 + [429] * 25
    assert {a.json()["error"]["code"] for a in answers if a.status_code == 429} == {
        "outage_rate_limited"}


async def test_a_redis_that_is_gone_costs_no_request_an_error(
    make_asgi: Make, redis_server: RedisServer, caplog: pytest.LogCaptureFixture,
) -> None:
    stack = fleet_stack(make_asgi, redis_server, rate="2/minute", timeout=0.5)
    outage(stack)
    keys_back_since(redis_server, ago=60)
    solved = await solution(stack)
    redis_server.kill()
    with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
        first = await stack.client.post("/login", headers={"X-Altcha": solved})
        replayed = await stack.client.post("/login", headers={"X-Altcha": solved})
        other = await stack.client.post("/login", headers={"X-Altcha": await solution(stack)})
        over = await stack.client.post("/login", headers={"X-Altcha": await solution(stack)})
    # Counted and claimed in this process's memory: single use and the limit still hold here.
    assert first.status_code == 200, first.text
    assert (replayed.status_code, replayed.json()["error"]["code"]) == (403, "fallback_invalid")
    assert other.status_code == 200
    assert (over.status_code, over.json()["error"]["code"]) == (429, "outage_rate_limited")
    assert redis_failures(caplog), "said once a minute that Redis is away"
