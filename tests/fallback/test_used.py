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


def test_full_of_unexpired_keys_it_refuses_rather_than_forgets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    used = MemoryUsedSolutions(max_entries=3, clock=clock)
    expires = clock.time() + 300
    with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
        assert all(used.claim(key(n), expires) for n in range(3))
        assert used.claim(key(3), expires) is False
        assert used.claim(key(4), expires) is False
        # Nothing was forgotten to make room: every claimed key is still refused.
        assert not any(used.claim(key(n), expires) for n in range(3))
    full = [r for r in caplog.records if getattr(r, "event", "") == "failopen.fallback_memory_full"]
    assert len(full) == 1, "one line a minute, not one per refusal"
    clock.advance(61)
    with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
        assert used.claim(key(5), expires) is False
    full = [r for r in caplog.records if getattr(r, "event", "") == "failopen.fallback_memory_full"]
    assert len(full) == 2 and full[1].suppressed == 1  # type: ignore[attr-defined]
    clock.advance(300)
    assert used.claim(key(6), clock.time() + 300) is True, "room again once they expired"


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
    # The key lives until the challenge expires (PXAT), not forever.
    assert 0 < client.pttl(stored) <= 300_000
    # Each worker also remembers what it admitted, for a replay while Redis is away.
    assert first.fallback.holds(key(1)) and not second.fallback.holds(key(1))


def test_redis_keeps_a_key_only_until_its_challenge_expires(
    workers: list[RedisUsedSolutions], redis_server: RedisServer
) -> None:
    first, _second = workers
    assert first.claim(key(1), time.time() + 0.05) is True
    client = redis_server.client()
    deadline = time.monotonic() + 5
    while client.exists(f"{PREFIX}fallback:used:{key(1)}") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not client.exists(f"{PREFIX}fallback:used:{key(1)}")


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
