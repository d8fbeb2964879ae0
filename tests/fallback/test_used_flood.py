"""A flood of solutions does not lock everyone out of the fallback (issue 31, item 5).

Without Redis, a process remembered at most ``max_entries`` unexpired used solutions and, full,
refused every new one: 100,000 solutions within one TTL from 5,000 IPv6 /64s (20 each, the
outage rate limit's allowance) and every person's correct solution was refused on every fallback
route until they expired. Full now, the record forgets the solutions issued earliest and refuses
every solution issued at or before the last one it forgot: a replay is never admitted, and a
challenge fetched after the flood's is admitted unless the flood fills the whole record with
solutions issued after it before it is sent back."""

from __future__ import annotations

import logging
import signal
import time

import pytest
from _redis_kit import RedisServer

from failopen.engine.outage import OutageGate
from failopen.fallback import (
    FallbackChallenges,
    MemoryUsedSolutions,
    OutageRateLimit,
    RedisUsedSolutions,
)
from failopen.fallback._redis import RETRY_AFTER
from failopen.secret import Secret
from failopen.testing import FakeClock
from failopen.testing.fallback import solve_challenge

SECRET = "flood-" + "s" * 32
ROUTE = "/signup"
#: The record's size here (100,000 by default): 5,000 /64s fill it with one solution each.
CAP = 5_000
NETWORKS = 5_000
PREFIX = "flood:failopen:"
TIMEOUT = 0.1


def key(n: int) -> str:
    return f"{n:064x}"


def slash64(n: int) -> str:
    """An address in the n-th /64 (the rate limit counts each /64 as one client)."""
    return f"2001:db8:{n // 65536:x}:{n % 65536:x}::7"


class Site:
    """The outage gate as a site without Redis builds it: the rate limit in memory (20/minute per
    /64 and route), ALTCHA challenges, and the record of used solutions in memory."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.challenges = FallbackChallenges(Secret(SECRET), cost=1, ttl=300, clock=self.clock)
        self.used = MemoryUsedSolutions(max_entries=CAP, clock=self.clock)
        self.gate = OutageGate(rate=OutageRateLimit("20/minute", clock=self.clock),
                               challenges=self.challenges, used=self.used)
        self.off_since = self.clock.time()

    def fetch(self) -> dict[str, object]:
        """A challenge, issued a millisecond after the last (as the endpoint issues them)."""
        self.clock.advance(0.001)
        return self.challenges.issue()

    def submit(self, client: str, solution: str) -> str:
        refused = self.gate.refuse("fallback", route=ROUTE, client=client, solution=solution,
                                   off_since=self.off_since)
        return "admitted" if refused is None else f"{refused.outcome}: {refused.reason}"

    def flood(self, networks: int) -> list[tuple[str, str]]:
        """One fresh solution from each of ``networks`` /64s; all admitted."""
        sent = []
        for n in range(networks):
            solution = solve_challenge(self.fetch())
            assert self.submit(slash64(n), solution) == "admitted"
            sent.append((slash64(n), solution))
        return sent


def test_a_flood_of_slash64s_does_not_lock_out_a_fresh_client(
    caplog: pytest.LogCaptureFixture,
) -> None:
    site = Site()
    admitted = site.flood(NETWORKS)  # the record is full of unexpired solutions
    assert len(site.used) == CAP
    # The flood goes on: each /64's second solution, all but one fetched after the person's.
    person_challenge = site.fetch()
    with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
        admitted += site.flood(CAP - 1)
        person = solve_challenge(person_challenge)
        assert site.submit("198.51.100.23", person) == "admitted", \
            "a person's correct solution was refused because others filled the record"
    admitted.append(("198.51.100.23", person))
    assert len(site.used) == CAP, "memory stays bounded"
    full = [r for r in caplog.records if getattr(r, "event", "") == "failopen.fallback_memory_full"]
    assert len(full) == 1, "said once a minute, not once a request"
    # No admitted solution passes twice: neither the ones remembered nor the ones forgotten.
    site.clock.advance(60)  # a fresh minute: the replays are judged, not rate limited
    for client, solution in admitted:
        assert site.submit(client, solution) == \
            "fallback_invalid: fallback solution refused: already used"


def test_a_flood_that_outruns_a_person_refuses_them_and_never_a_replay() -> None:
    """The bound, shown: a person is refused only when, between fetching their challenge and
    sending the solution, others had the whole record's worth of solutions admitted (at the
    default 100,000, in the second or two a browser takes); they then solve a new challenge."""
    site = Site()
    person_challenge = site.fetch()
    site.flood(NETWORKS)
    site.flood(1)
    person = solve_challenge(person_challenge)
    assert site.submit("198.51.100.23", person) == \
        "fallback_invalid: fallback solution refused: already used"
    again = solve_challenge(site.fetch())
    assert site.submit("198.51.100.23", again) == "admitted"


def test_one_client_without_a_rate_limit_cannot_lock_out_the_rest() -> None:
    """FAILOPEN_OUTAGE_RATE=none: one client sends as many solutions as it can solve."""
    clock = FakeClock()
    used = MemoryUsedSolutions(max_entries=100, clock=clock)
    claimed = []
    for n in range(1_000):
        clock.advance(0.001)
        claimed.append((key(n), clock.time() + 300, clock.time()))
        assert used.claim(*claimed[-1][:2], issued_at=claimed[-1][2]) is True
    assert len(used) == 100
    clock.advance(0.001)
    assert used.claim(key(10_000), clock.time() + 300, issued_at=clock.time()) is True
    assert not any(used.claim(k, expires, issued_at=issued) for k, expires, issued in claimed)


def test_in_a_fleet_what_memory_forgets_of_redis_claims_costs_redis_nothing(
    redis_server: RedisServer,
) -> None:
    """Memory keeps a copy of what Redis admitted (for a replay while Redis is away): forgetting
    those copies refuses nothing while Redis answers, since Redis holds them."""
    redis_server.client().set(PREFIX + "fallback:since", "0")  # a record complete from the start
    clock = FakeClock(start=time.time())
    used = RedisUsedSolutions(redis_server.url, password=None, prefix=PREFIX, timeout=TIMEOUT,
                              fallback=MemoryUsedSolutions(max_entries=2, clock=clock),
                              clock=clock)
    try:
        for n in range(5):
            clock.advance(0.001)
            assert used.claim(key(n), clock.time() + 300, issued_at=clock.time()) is True
        assert len(used.fallback) == 2
        assert used.claim(key(0), clock.time() + 300, issued_at=clock.time() - 0.004) is False
        clock.advance(0.001)
        assert used.claim(key(9), clock.time() + 300, issued_at=clock.time() - 0.003) is True, \
            "issued before what memory forgot, but Redis holds all it admitted"
    finally:
        used.close()


def test_a_solution_claimed_while_redis_was_away_and_forgotten_stays_refused(
    redis_server: RedisServer,
) -> None:
    """Claimed in memory alone (Redis frozen), then forgotten by a full memory: when Redis is
    back, which never heard of it, the solution must still be refused."""
    redis_server.client().set(PREFIX + "fallback:since", "0")  # a record complete from the start
    clock = FakeClock(start=time.time())
    used = RedisUsedSolutions(redis_server.url, password=None, prefix=PREFIX, timeout=TIMEOUT,
                              fallback=MemoryUsedSolutions(max_entries=2, clock=clock),
                              clock=clock)
    process = redis_server.process
    assert process is not None
    claimed = []
    try:
        assert used.claim(key(99), clock.time() + 300, issued_at=clock.time()) is True  # connect
        process.send_signal(signal.SIGSTOP)
        # In memory alone (key(0)'s command waited for the timeout, and reaches Redis when it
        # wakes up; the others are never sent): key(0) and key(1) are forgotten.
        for n in range(4):
            clock.advance(0.001)
            claimed.append((key(n), clock.time() + 300, clock.time()))
            assert used.claim(*claimed[-1][:2], issued_at=claimed[-1][2]) is True
        process.send_signal(signal.SIGCONT)
        clock.advance(RETRY_AFTER)
        assert used.link.usable()
        for k, expires, issued in claimed:
            assert used.claim(k, expires, issued_at=issued) is False, "replayed once Redis is back"
        assert not redis_server.client().exists(f"{PREFIX}fallback:used:{key(1)}"), \
            "Redis never heard of key(1): memory alone refused it"
        assert used.claim(key(7), clock.time() + 300, issued_at=clock.time()) is True
    finally:
        process.send_signal(signal.SIGCONT)
        used.close()
