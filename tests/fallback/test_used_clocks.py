"""Single use does not depend on Redis's clock agreeing with the servers' (issue 31, item 4).

Redis's clock is not ours to set, ours is: a server clock behind Redis's stands for Redis's clock
ahead, and the other way round. A key written to expire at a moment on Redis's clock
(``SET NX PXAT``) was stored already expired when Redis's clock was ahead by more than the
solution had left to live, and every other worker then admitted the solution again; the record's
start (``fallback:since``, Redis's clock) read too early when Redis's clock was behind, and a
solution used before Redis lost its keys passed on another worker."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from _redis_kit import RedisServer

from failopen.fallback import MemoryUsedSolutions, RedisUsedSolutions
from failopen.fallback.used import CLOCK_SKEW
from failopen.testing import FakeClock

PREFIX = "clocks:failopen:"
#: How far the servers' clocks are from Redis's: minutes, as the finding had it.
APART = 600.0


def key(n: int) -> str:
    return f"{n:064x}"


@pytest.fixture
def fleet(redis_server: RedisServer) -> Iterator[Callable[[float], list[RedisUsedSolutions]]]:
    """Two workers whose clocks (which agree with each other) are ``offset`` seconds from
    Redis's, on a record that began an hour ago by Redis's clock (a fleet long running)."""
    made: list[RedisUsedSolutions] = []

    def build(offset: float) -> list[RedisUsedSolutions]:
        seconds, micros = redis_server.client().time()
        redis_now_ms = seconds * 1000 + micros // 1000
        redis_server.client().set(PREFIX + "fallback:since", str(redis_now_ms - 3_600_000))
        clock = FakeClock(start=time.time() + offset)
        workers = [RedisUsedSolutions(redis_server.url, password=None, prefix=PREFIX,
                                      timeout=1.0, fallback=MemoryUsedSolutions(clock=clock),
                                      clock=clock) for _ in range(2)]
        made.extend(workers)
        return workers

    yield build
    for used in made:
        used.close()


@pytest.mark.parametrize("offset", [-APART, APART], ids=["redis-ahead", "redis-behind"])
def test_a_solution_near_its_expiry_is_used_once_in_the_fleet(
    fleet: Callable[[float], list[RedisUsedSolutions]], redis_server: RedisServer,
    offset: float,
) -> None:
    first, second = fleet(offset)
    now = first.fallback._clock.time()
    expires = now + 5  # 5 s left: far less than the clocks are apart
    assert first.claim(key(1), expires, issued_at=expires - 300) is True
    assert second.claim(key(1), expires, issued_at=expires - 300) is False, \
        "another worker admitted a used solution again"
    assert first.claim(key(1), expires, issued_at=expires - 300) is False
    # Kept for what is left of the solution's life, on our clock, and the skew the fleet's
    # servers may have between them: never an instant on Redis's clock.
    pttl = redis_server.client().pttl(f"{PREFIX}fallback:used:{key(1)}")
    assert 5_000 + CLOCK_SKEW * 1000 - 2_000 < pttl <= 5_000 + CLOCK_SKEW * 1000


def test_a_solution_with_less_than_a_millisecond_left_is_still_kept(
    fleet: Callable[[float], list[RedisUsedSolutions]], redis_server: RedisServer,
) -> None:
    first, second = fleet(-APART)
    expires = first.fallback._clock.time() + 0.0004
    assert first.claim(key(2), expires, issued_at=expires - 300) is True
    assert second.claim(key(2), expires, issued_at=expires - 300) is False
    assert redis_server.client().pttl(f"{PREFIX}fallback:used:{key(2)}") > 1_000


def test_an_expired_solution_is_refused_before_any_claim(
    fleet: Callable[[float], list[RedisUsedSolutions]], redis_server: RedisServer,
) -> None:
    first, _second = fleet(-APART)
    expired = first.fallback._clock.time() - 0.001
    assert first.claim(key(3), expired, issued_at=expired - 300) is False
    assert not redis_server.client().exists(f"{PREFIX}fallback:used:{key(3)}")


def test_redis_behind_does_not_date_the_record_before_the_lost_keys(
    fleet: Callable[[float], list[RedisUsedSolutions]], redis_server: RedisServer,
) -> None:
    """Redis's clock 10 minutes behind: the record's start it writes after a FLUSHALL reads, on
    the servers' clocks, 10 minutes before the loss. A solution used a minute before the loss
    must still be refused on another worker."""
    first, second = fleet(APART)
    clock = first.fallback._clock
    assert isinstance(clock, FakeClock)
    now = clock.time()
    assert first.claim(key(4), now + 240, issued_at=now - 60) is True
    redis_server.client().flushall()  # the record and its start are gone: no fleet epoch either
    assert second.claim(key(4), now + 240, issued_at=now - 60) is False, \
        "a solution used before the keys were lost was admitted again"
    # One issued after the loss, by the servers' clocks, is admitted as before.
    clock.advance(1.0)
    later = clock.time()
    assert second.claim(key(5), later + 300, issued_at=later) is True
    assert first.claim(key(5), later + 300, issued_at=later) is False


def test_redis_ahead_refuses_what_was_issued_before_the_record_began(
    fleet: Callable[[float], list[RedisUsedSolutions]], redis_server: RedisServer,
) -> None:
    """The other direction stays on the safe side: the record's start on Redis's clock ahead of
    ours refuses solutions issued before it, as long as the clocks are apart (the browser solves
    a new challenge; no solution that may have been used passes)."""
    first, second = fleet(-APART)
    now = first.fallback._clock.time()
    assert first.claim(key(6), now + 240, issued_at=now - 60) is True
    redis_server.client().flushall()
    assert second.claim(key(6), now + 240, issued_at=now - 60) is False
