"""Single use (issue 20): a solution admits one request, in one process or across a fleet sharing
a real redis-server, and a Redis that is down or frozen costs at most its timeout."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from _redis_kit import REDIS_PASSWORD, RedisServer

from failopen.fallback import MemoryUsedSolutions, RedisUsedSolutions
from failopen.fallback._redis import RETRY_AFTER
from failopen.fallback.used import CLOCK_SKEW
from failopen.testing import FakeClock

PREFIX = "site:failopen:"
TIMEOUT = 0.1
# Timed assertions belong in benchmarks: this bound only catches a call that waits on a frozen
# Redis for seconds (retries, a socket without a timeout) instead of the timeout.
SLOW = 1.0


def key(n: int) -> str:
    return f"{n:064x}"


# --- memory --------------------------------------------------------------------------------------


def test_a_key_is_claimed_once() -> None:
    clock = FakeClock()
    used = MemoryUsedSolutions(clock=clock)
    expires = clock.time() + 300
    assert used.claim(key(1), expires) is True
    assert used.claim(key(1), expires) is False
    assert used.claim(key(1), expires + 100) is False, "a later expiry is the same solution"
    assert used.claim(key(2), expires) is True


def test_an_expired_key_is_never_claimed_and_is_dropped() -> None:
    clock = FakeClock()
    used = MemoryUsedSolutions(clock=clock)
    assert used.claim(key(1), clock.time()) is False, "expiring now: the check refuses it too"
    assert used.claim(key(2), clock.time() + 10) is True
    assert used.claim(key(3), clock.time() + 20) is True
    assert len(used) == 2
    clock.advance(10)
    assert used.claim(key(4), clock.time() + 30) is True
    assert len(used) == 2, "key 2 expired and was dropped"
    assert used.holds(key(3)) and not used.holds(key(2))


def test_full_of_unexpired_keys_it_forgets_the_earliest_issued_and_refuses_up_to_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 31, item 5: full, the record neither refuses everyone (as it did) nor forgets a
    solution that could then be replayed."""
    clock = FakeClock()
    used = MemoryUsedSolutions(max_entries=3, clock=clock)
    t0 = clock.time()
    expires = t0 + 300
    with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
        assert all(used.claim(key(n), expires, issued_at=t0 + n) for n in range(3))
        assert used.forgotten_before == float("-inf")
        assert used.claim(key(3), expires, issued_at=t0 + 3) is True  # key(0) forgotten
        assert used.forgotten_before == t0 and len(used) == 3
        assert used.claim(key(4), expires, issued_at=t0 + 4) is True  # key(1) forgotten
        # Nothing forgotten passes again, nor does anything issued before what was forgotten.
        assert not any(used.claim(key(n), expires, issued_at=t0 + n) for n in range(5))
        assert used.claim(key(5), expires, issued_at=t0 + 0.5) is False, "issued before key(1)"
        assert used.claim(key(6), expires) is True, "no issue time: read as issued at expiry"
    full = [r for r in caplog.records if getattr(r, "event", "") == "failopen.fallback_memory_full"]
    assert len(full) == 1, "one line a minute, not one per solution forgotten"
    clock.advance(61)
    with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
        assert used.claim(key(7), expires + 1) is True
    full = [r for r in caplog.records if getattr(r, "event", "") == "failopen.fallback_memory_full"]
    assert len(full) == 2 and full[1].suppressed == 2  # type: ignore[attr-defined]
    forgotten = used.forgotten_before
    clock.advance(300)
    assert used.claim(key(8), clock.time() + 300, issued_at=clock.time()) is True
    assert len(used) == 2, "two expired ones dropped by a claim, no more"
    assert used.claim(key(9), clock.time() + 300, issued_at=clock.time()) is True
    assert len(used) == 2, "the third by the next"
    assert used.forgotten_before == forgotten, "expired ones are dropped, not forgotten"


def test_an_expired_entry_makes_room_without_refusing_anything() -> None:
    """A shorter-lived solution (another TTL) under one issued earlier expires first: dropping
    it when full forgets nothing that could be accepted."""
    clock = FakeClock()
    used = MemoryUsedSolutions(max_entries=2, clock=clock)
    t0 = clock.time()
    assert used.claim(key(1), t0 + 10, issued_at=t0 - 1)  # issued first, expires first
    assert used.claim(key(2), t0 + 300, issued_at=t0)
    clock.advance(20)
    assert used.claim(key(3), clock.time() + 300, issued_at=clock.time())
    assert used.forgotten_before == float("-inf")


def test_a_backlog_of_expired_solutions_drains_a_few_per_claim() -> None:
    """A flood that has passed leaves many expired solutions: no one claim pays to drop them
    all, and a full record of expired ones makes room without forgetting anything."""
    clock = FakeClock()
    used = MemoryUsedSolutions(max_entries=1_000, clock=clock)
    t0 = clock.time()
    assert all(used.claim(key(n), t0 + 300, issued_at=t0 + n / 1e4) for n in range(1_000))
    clock.advance(301)
    assert used.claim(key(5_000), clock.time() + 300, issued_at=clock.time())
    assert 995 <= len(used) <= 1_000
    for n in range(999):  # the record's worth with the one above: every expired one goes
        assert used.claim(key(6_000 + n), clock.time() + 300, issued_at=clock.time())
    assert used.forgotten_before == float("-inf"), "only expired ones were dropped"
    assert len(used) <= 1_000


def test_many_threads_claiming_one_key_admit_one() -> None:
    used = MemoryUsedSolutions()
    expires = time.time() + 300
    start = threading.Barrier(8)
    results: list[bool] = []

    def claim() -> None:
        start.wait()
        results.extend(used.claim(key(n), expires) for n in range(200))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 200 and len(results) == 1600


@pytest.mark.parametrize(("given_key", "expires"), [
    (None, 1e12), (key(1), float("nan")), (key(1), float("inf")), (b"bytes", 1e12),
    (key(1), "soon"),
])
def test_odd_arguments_are_refused_without_raising(given_key: object, expires: object) -> None:
    used = MemoryUsedSolutions()
    assert used.claim(given_key, expires) is False  # type: ignore[arg-type]


def test_max_entries_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        MemoryUsedSolutions(max_entries=0)


# --- Redis: the fleet ----------------------------------------------------------------------------


@pytest.fixture
def workers(redis_server: RedisServer) -> Iterator[list[RedisUsedSolutions]]:
    """Two workers' records on one real redis-server."""
    made = [RedisUsedSolutions(redis_server.url, password=None, prefix=PREFIX, timeout=TIMEOUT,
                               fallback=MemoryUsedSolutions()) for _ in range(2)]
    yield made
    for used in made:
        used.close()


def test_a_solution_used_on_one_worker_is_refused_on_another(
    workers: list[RedisUsedSolutions], redis_server: RedisServer
) -> None:
    first, second = workers
    expires = time.time() + 300
    assert first.claim(key(1), expires) is True
    assert second.claim(key(1), expires) is False
    assert first.claim(key(1), expires) is False
    assert second.claim(key(2), expires) is True
    client = redis_server.client()
    stored = f"{PREFIX}fallback:used:{key(1)}"
    assert client.get(stored) == b"1"
    # The key lives until the challenge expires (and CLOCK_SKEW for a server behind), not forever.
    assert 0 < client.pttl(stored) <= 300_000 + CLOCK_SKEW * 1000
    # Each worker also remembers what it admitted, for a replay while Redis is away.
    assert first.fallback.holds(key(1)) and not second.fallback.holds(key(1))


def test_redis_keeps_a_key_only_as_long_as_its_solution_can_be_accepted(
    workers: list[RedisUsedSolutions], redis_server: RedisServer
) -> None:
    first, _second = workers
    assert first.claim(key(1), time.time() + 0.05) is True
    pttl = redis_server.client().pttl(f"{PREFIX}fallback:used:{key(1)}")
    assert CLOCK_SKEW * 1000 - 1_000 < pttl <= 50 + CLOCK_SKEW * 1000


def test_the_password_opens_a_redis_that_wants_one(
    redis_server_with_password: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_with_password
    bare = f"redis://{server.address}/0"
    for url, password in ((server.url, None), (bare, REDIS_PASSWORD)):
        used = RedisUsedSolutions(url, password=password, prefix=PREFIX,
                                  fallback=MemoryUsedSolutions())
        try:
            with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
                assert used.claim(key(hash(url) % 1000), time.time() + 300) is True
            assert len(used.fallback) == 1  # admitted through Redis, remembered too
            assert REDIS_PASSWORD not in repr(used)
        finally:
            used.close()
    assert caplog.records == []
    wrong = RedisUsedSolutions(bare, password="not-" + REDIS_PASSWORD, prefix=PREFIX,
                               fallback=MemoryUsedSolutions())
    try:
        with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
            assert wrong.claim(key(7), time.time() + 300) is True  # in memory
        assert len(wrong.fallback) == 1
    finally:
        wrong.close()
    text = caplog.text
    assert "authentication failed" in text and REDIS_PASSWORD not in text


def test_a_stopped_redis_falls_back_to_memory_within_the_timeout(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(start=time.time())
    used = RedisUsedSolutions(redis_server.url, password=None, prefix=PREFIX, timeout=TIMEOUT,
                              fallback=MemoryUsedSolutions(clock=clock), clock=clock)
    try:
        expires = clock.time() + 300
        assert used.claim(key(1), expires) is True
        redis_server.kill()
        with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
            started = time.monotonic()
            assert used.claim(key(2), expires) is True
            assert time.monotonic() - started < SLOW
            assert used.claim(key(2), expires) is False, "remembered in memory"
            assert used.claim(key(3), expires) is True
        assert len(used.fallback) == 3  # key(1) through Redis, key(2) and key(3) in memory alone
        lines = [r for r in caplog.records
                 if getattr(r, "event", "") == "failopen.fallback_redis_failed"]
        assert len(lines) == 1, "one line a minute"
        assert redis_server.address in lines[0].getMessage()
    finally:
        used.close()


def test_a_frozen_redis_costs_one_request_the_timeout_then_none(redis_server: RedisServer) -> None:
    """SIGSTOP: the server accepts connections and never answers, the worst kind of slow."""
    clock = FakeClock(start=time.time())
    used = RedisUsedSolutions(redis_server.url, password=None, prefix=PREFIX, timeout=TIMEOUT,
                              fallback=MemoryUsedSolutions(clock=clock), clock=clock)
    process = redis_server.process
    assert process is not None
    expires = clock.time() + 300
    try:
        assert used.claim(key(1), expires) is True  # connected, and Redis answered
        process.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        assert used.claim(key(2), expires) is True  # waited for the timeout, then memory
        first = time.monotonic() - started
        started = time.monotonic()
        assert used.claim(key(3), expires) is True  # Redis is skipped for a while: no wait
        second = time.monotonic() - started
        assert first < SLOW
        assert second < TIMEOUT, "after a failure the next calls do not wait on Redis again"
        assert len(used.fallback) == 3
        process.send_signal(signal.SIGCONT)
        clock.advance(RETRY_AFTER)
        # Back: a new key goes to Redis; one claimed in memory meanwhile stays refused.
        assert used.claim(key(4), expires) is True
        assert used.claim(key(2), expires) is False
        assert len(used.fallback) == 4  # key(1) and key(4) claimed in Redis, remembered too
        assert redis_server.client().exists(f"{PREFIX}fallback:used:{key(4)}")
    finally:
        process.send_signal(signal.SIGCONT)
        used.close()


def test_a_solution_admitted_through_redis_is_refused_while_redis_is_away(
    redis_server: RedisServer,
) -> None:
    """Review of issue 20: a replay on the same worker must not pass just because Redis froze
    after the first use."""
    used = RedisUsedSolutions(redis_server.url, password=None, prefix=PREFIX, timeout=TIMEOUT,
                              fallback=MemoryUsedSolutions())
    process = redis_server.process
    assert process is not None
    try:
        expires = time.time() + 300
        assert used.claim(key(1), expires) is True  # through Redis
        process.send_signal(signal.SIGSTOP)
        assert used.claim(key(1), expires) is False, "replayed while Redis does not answer"
    finally:
        process.send_signal(signal.SIGCONT)
        used.close()
