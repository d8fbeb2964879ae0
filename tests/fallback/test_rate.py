"""The outage rate limit (issue 20): per client address and route, in memory or shared by a
fleet through a real redis-server, with memory behind a Redis that is down or frozen."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Iterator

import pytest
from _redis_kit import RedisServer

from failopen.exceptions import ConfigError
from failopen.fallback import OutageRateLimit
from failopen.fallback._redis import RETRY_AFTER
from failopen.fallback.rate import _bucket
from failopen.testing import FakeClock

PREFIX = "site:failopen:"
TIMEOUT = 0.1
SLOW = 1.0  # only catches a call that waits on Redis for seconds; timings belong in benchmarks


def admit(limit: OutageRateLimit, client: str, route: str) -> int | None:
    """What the guard does for one request: test, and count it when it passes."""
    wait = limit.test(client, route)
    if wait is None:
        limit.hit(client, route)
    return wait


# --- memory --------------------------------------------------------------------------------------


def test_a_client_over_the_rate_gets_a_retry_after() -> None:
    limit = OutageRateLimit("3/minute")
    assert [admit(limit, "203.0.113.5", "/signup") for _ in range(3)] == [None] * 3
    wait = admit(limit, "203.0.113.5", "/signup")
    assert wait is not None and 55 <= wait <= 60


def test_the_limit_is_per_client_and_per_route() -> None:
    limit = OutageRateLimit("1/minute")
    assert admit(limit, "203.0.113.5", "/signup") is None
    assert admit(limit, "203.0.113.5", "/signup") is not None
    assert admit(limit, "203.0.113.6", "/signup") is None, "another client"
    assert admit(limit, "203.0.113.5", "/login") is None, "another route"
    assert admit(limit, "2001:db8::5", "/login") is None


@pytest.mark.parametrize(("rate", "low", "high"), [
    ("1/second", 1, 1), ("1/hour", 3590, 3600), ("2 per 10 minutes", 590, 600),
])
def test_retry_after_is_the_time_until_the_window_lets_one_more_in(
    rate: str, low: int, high: int
) -> None:
    limit = OutageRateLimit(rate)
    while admit(limit, "198.51.100.1", "/signup") is None:
        pass
    wait = limit.test("198.51.100.1", "/signup")
    assert wait is not None and low <= wait <= high


def test_test_alone_counts_nothing() -> None:
    limit = OutageRateLimit("1/minute")
    assert all(limit.test("198.51.100.1", "/signup") is None for _ in range(10))
    limit.hit("198.51.100.1", "/signup")
    assert limit.test("198.51.100.1", "/signup") is not None


@pytest.mark.parametrize(("rate", "message"), [
    ("none", "none counts nothing"), ("lots", "not one rate"), ("0/minute", "admits nobody"),
    ("20/minute;5/second", "not one rate"),
])
def test_a_rate_it_cannot_count_is_refused(rate: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        OutageRateLimit(rate)


def test_odd_clients_never_raise() -> None:
    limit = OutageRateLimit("1/minute")
    for client in ("", "a/b", "x" * 10_000, "\x00", "LIMITER/1/minute"):
        assert limit.test(client, "/signup") is None
        limit.hit(client, "/signup")
    assert limit.test(None, "/signup") is None  # type: ignore[arg-type]
    limit.hit(None, "/signup")  # type: ignore[arg-type]


@pytest.mark.parametrize(("client", "counted_as"), [
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"), ("2001:DB8:1:2::9", "2001:db8:1:2::/64"),
    ("2001:0db8:0000:0000:0001::", "2001:db8::/64"), ("0:0:0:1::5", "0:0:0:1::/64"),
    ("0:1:0:0:1::", "0:1::/64"), ("1::", "1::/64"), ("::1", "::/64"), ("::1.2.3.4", "::/64"),
    ("::ffff:203.0.113.5", "203.0.113.5"), ("::ffff:cb00:7105", "203.0.113.5"),
    ("64:ff9b::203.0.113.5", "64:ff9b::/64"), ("fe80::1%eth0", "fe80::/64"),
    ("203.0.113.5", "203.0.113.5"), ("1::2::3", "1::2::3"), ("[::1]", "[::1]"), ("", ""),
])
def test_each_client_counts_as_its_address_or_its_64(client: str, counted_as: str) -> None:
    """The bucket is written as ``ipaddress`` writes a network: a fleet's Redis keys hold it,
    so processes of two versions count one /64 under one key."""
    assert _bucket(client) == counted_as


# --- Redis: the fleet ----------------------------------------------------------------------------


@pytest.fixture
def fleet_limits(redis_server: RedisServer) -> Iterator[list[OutageRateLimit]]:
    made = [OutageRateLimit("2/minute", redis_url=redis_server.url, prefix=PREFIX,
                            timeout=TIMEOUT) for _ in range(2)]
    yield made
    for limit in made:
        limit.close()


def test_two_processes_share_the_limit_through_redis(
    fleet_limits: list[OutageRateLimit], redis_server: RedisServer
) -> None:
    first, second = fleet_limits
    assert admit(first, "203.0.113.5", "/signup") is None
    assert admit(second, "203.0.113.5", "/signup") is None
    wait = admit(first, "203.0.113.5", "/signup")
    assert wait is not None and 55 <= wait <= 60
    assert admit(second, "203.0.113.5", "/signup") is not None
    assert admit(second, "203.0.113.6", "/signup") is None
    keys = redis_server.client().keys("*")
    assert keys and all(k.startswith(f"{PREFIX}fallback:rate".encode()) for k in keys)


def test_a_stopped_redis_counts_in_memory_within_the_timeout(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    limit = OutageRateLimit("2/minute", redis_url=redis_server.url, prefix=PREFIX,
                            timeout=TIMEOUT)
    try:
        assert admit(limit, "203.0.113.5", "/signup") is None  # counted in Redis
        redis_server.kill()
        with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
            started = time.monotonic()
            assert admit(limit, "203.0.113.5", "/signup") is None
            assert time.monotonic() - started < SLOW
            # Memory counts on its own from here: two more, then the limit.
            assert admit(limit, "203.0.113.5", "/signup") is None
            assert admit(limit, "203.0.113.5", "/signup") is not None
        lines = [r for r in caplog.records
                 if getattr(r, "event", "") == "failopen.fallback_redis_failed"]
        assert len(lines) == 1 and redis_server.address in lines[0].getMessage()
        assert "rate limit" in lines[0].getMessage()
    finally:
        limit.close()


def test_a_frozen_redis_costs_one_call_the_timeout(redis_server: RedisServer) -> None:
    clock = FakeClock(start=time.time())
    limit = OutageRateLimit("2/minute", redis_url=redis_server.url, prefix=PREFIX,
                            timeout=TIMEOUT, clock=clock)
    process = redis_server.process
    assert process is not None
    try:
        assert admit(limit, "203.0.113.5", "/signup") is None  # connected, counted in Redis
        process.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        assert limit.test("203.0.113.5", "/signup") is None
        first = time.monotonic() - started
        started = time.monotonic()
        limit.hit("203.0.113.5", "/signup")
        assert limit.test("203.0.113.5", "/signup") is None
        second = time.monotonic() - started
        assert first < SLOW and second < TIMEOUT
        process.send_signal(signal.SIGCONT)
        clock.advance(RETRY_AFTER)
        # Redis again: it still holds the first hit, so one more passes there, then the limit.
        assert admit(limit, "203.0.113.5", "/signup") is None
        assert limit.test("203.0.113.5", "/signup") is not None
    finally:
        process.send_signal(signal.SIGCONT)
        limit.close()


def test_a_count_in_redis_that_breaks_counts_in_memory_and_says_so_once(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An error that is no Redis error (a bug, a broken ``limits``) admitted every request
    uncounted, with a traceback each: an ``open`` route then had no limit at all."""
    clock = FakeClock(start=time.time())
    limit = OutageRateLimit("2/minute", redis_url=redis_server.url, prefix=PREFIX,
                            timeout=TIMEOUT, clock=clock)

    def broken(*args: object, **kwargs: object) -> bool:
        raise TypeError("a limits release that takes other arguments")

    try:
        limit._shared.hit = limit._shared.test = broken
        with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
            answers = [limit.hit("203.0.113.5", "/signup") for _ in range(5)]
            assert limit.test("203.0.113.5", "/signup") is not None
        assert answers[:2] == [None, None] and all(a is not None for a in answers[2:])
        errors = [r for r in caplog.records if getattr(r, "event", "") == "failopen.fallback_error"]
        assert len(errors) == 1 and "counts in memory" in errors[0].getMessage()
        clock.advance(61)  # a minute on, a failure is told again
        limit.hit("203.0.113.6", "/signup")
        errors = [r for r in caplog.records if getattr(r, "event", "") == "failopen.fallback_error"]
        assert len(errors) == 2
    finally:
        limit.close()
