"""The outage rate limit in a process's memory (issue 31 A1): bounded whatever the number of
clients, exact at a window's edge, and safe under threads. Every test runs on a FakeClock: the
windows are the injected clock's, so time passes only when a test says so.

tests/fallback/test_rate.py covers what the limit means for one client and the fleet's Redis.
"""

from __future__ import annotations

import logging
import threading
import tracemalloc

import pytest

from failopen.fallback import OutageRateLimit
from failopen.testing import FakeClock

pytest.importorskip("limits")

ROUTE = "/signup"


def ipv4(n: int) -> str:
    return f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"


def ipv6_64(n: int) -> str:
    """A host in the n-th /64: each counts as its own client."""
    return f"2001:db8:{n >> 16 & 0xffff:x}:{n & 0xffff:x}::1"


def admit(limit: OutageRateLimit, client: str, route: str = ROUTE) -> int | None:
    """What the gate does for one request: test, and count it when it passes."""
    wait = limit.test(client, route)
    return wait if wait is not None else limit.hit(client, route)


# --- bounded -------------------------------------------------------------------------------------


def test_100000_clients_at_once_never_hold_more_than_the_cap() -> None:
    """A flood of distinct clients within one window: the table stops at its cap, and every
    client past it counts in one shared bucket."""
    clock = FakeClock()
    limit = OutageRateLimit("20/minute", clock=clock, max_clients=5_000)
    answers = [limit.hit(ipv6_64(n), ROUTE) for n in range(100_000)]
    assert len(limit.memory) == 5_000
    assert answers[:5_000] == [None] * 5_000, "under the cap, each client its own window"
    past = answers[5_000:]
    assert past.count(None) == 20, "the overflow admits the limit once, for all of them"


def test_clients_whose_windows_passed_are_forgotten() -> None:
    """The finding: 15,000 /64s admitted once each were held for ever. Once their window has
    passed, new clients take their place instead of adding to them."""
    clock = FakeClock()
    limit = OutageRateLimit("20/minute", clock=clock, max_clients=50_000)
    for n in range(15_000):
        limit.hit(ipv6_64(n), ROUTE)
    assert len(limit.memory) == 15_000
    clock.advance(61)
    for n in range(15_000, 30_000):
        limit.hit(ipv6_64(n), ROUTE)
    assert len(limit.memory) == 15_000, "the first 15,000 expired and were dropped"
    clock.advance(61)
    for n in range(100_000):
        clock.advance(0.001)  # 100 s in all: the table holds about one minute's clients
        limit.hit(ipv4(n), ROUTE)
    assert len(limit.memory) <= 60_001


def test_memory_stays_bounded_after_100000_clients() -> None:
    """Bytes, not only keys: 100,000 clients over ten minutes leave about one minute's worth."""
    clock = FakeClock()
    limit = OutageRateLimit("20/minute", clock=clock, max_clients=10_000)
    tracemalloc.start()
    try:
        for n in range(100_000):
            clock.advance(0.006)  # 600 s in all, 10,000 clients per window
            limit.hit(ipv6_64(n), ROUTE)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(limit.memory) <= 10_000
    # About 300 bytes per client kept (the key, its window, the table's slot); the old storage
    # kept all 100,000 (over 20 MB).
    assert held < 10_000 * 600


def test_a_client_already_counted_keeps_its_own_window_when_the_table_is_full() -> None:
    clock = FakeClock()
    limit = OutageRateLimit("3/minute", clock=clock, max_clients=10)
    for n in range(10):
        assert limit.hit(ipv4(n), ROUTE) is None
    assert [admit(limit, ipv4(n)) for n in range(100, 110)].count(None) == 3
    # Client 0 has used one of its three: two more are its own, whatever the overflow holds.
    assert [admit(limit, ipv4(0)) for _ in range(3)][:2] == [None, None]
    assert admit(limit, ipv4(0)) is not None


def test_the_overflow_never_admits_more_than_the_limit_per_window() -> None:
    clock = FakeClock()
    limit = OutageRateLimit("5/minute", clock=clock, max_clients=100)
    for n in range(100):
        limit.hit(ipv4(n), ROUTE)  # the table full of live clients
    admitted = 0
    for n in range(100, 3_100):  # 3,000 new clients over 59 s: one window
        clock.advance(59 / 3_000)
        admitted += admit(limit, ipv4(n)) is None
    assert admitted == 5
    # A new client's test already says what its hit would: the overflow's wait.
    wait = limit.test(ipv4(99_999), ROUTE)
    assert wait is not None and 1 <= wait <= 60


def test_the_overflow_ends_when_the_table_has_room_again() -> None:
    clock = FakeClock()
    limit = OutageRateLimit("1/minute", clock=clock, max_clients=10)
    for n in range(10):
        limit.hit(ipv4(n), ROUTE)
    assert admit(limit, ipv4(10)) is None  # the overflow's one
    assert admit(limit, ipv4(11)) is not None
    clock.advance(61)
    assert [admit(limit, ipv4(n)) for n in range(20, 30)] == [None] * 10, "each its own again"


def test_reaching_the_cap_is_logged_once_per_minute_with_the_event(
    caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    limit = OutageRateLimit("20/minute", clock=clock, max_clients=10)
    with caplog.at_level(logging.WARNING, logger="failopen.fallback"):
        for n in range(1_000):
            limit.hit(ipv4(n), ROUTE)
    lines = [r for r in caplog.records if getattr(r, "event", "") == "failopen.outage_rate_full"]
    assert len(lines) == 1
    assert "10 clients" in lines[0].getMessage()
    assert "FAILOPEN_OUTAGE_RATE_MAX_CLIENTS" in lines[0].getMessage()
    assert lines[0].max_clients == 10  # type: ignore[attr-defined]


def test_no_thread_is_started() -> None:
    before = threading.active_count()
    limit = OutageRateLimit("20/minute", clock=FakeClock())
    for n in range(1_000):
        admit(limit, ipv4(n))
    assert threading.active_count() == before


@pytest.mark.parametrize("cap", [0, -1, True, 1.5, "10"])
def test_a_cap_that_holds_nobody_is_refused(cap: object) -> None:
    with pytest.raises(ValueError, match="max_clients"):
        OutageRateLimit("20/minute", max_clients=cap)  # type: ignore[arg-type]


# --- exact moving window -------------------------------------------------------------------------


def test_no_burst_of_twice_the_rate_at_a_window_edge() -> None:
    """Three at the end of one minute: none more until each has been in for a whole minute
    (a fixed window would admit three more a moment later)."""
    clock = FakeClock()
    limit = OutageRateLimit("3/minute", clock=clock)
    clock.advance(59.5)
    assert [admit(limit, "203.0.113.5") for _ in range(3)] == [None] * 3
    clock.advance(1.0)  # into the next minute
    assert admit(limit, "203.0.113.5") == 59
    clock.advance(58.5)  # half a second before they leave
    assert admit(limit, "203.0.113.5") == 1
    clock.advance(0.5)  # exactly a minute after the three: they still count
    assert admit(limit, "203.0.113.5") == 1
    clock.advance(0.25)
    assert [admit(limit, "203.0.113.5") for _ in range(4)] == [None, None, None, 60]


def test_each_admission_leaves_the_window_a_minute_after_it_was_made() -> None:
    clock = FakeClock()
    limit = OutageRateLimit("3/minute", clock=clock)
    for _ in range(3):
        assert admit(limit, "203.0.113.5") is None
        clock.advance(10)
    # Admitted at 0, 10 and 20; now 30.
    assert limit.test("203.0.113.5", ROUTE) == 30
    clock.advance(29.5)  # 59.5: the first leaves in half a second, said as 1
    assert limit.test("203.0.113.5", ROUTE) == 1
    clock.advance(0.75)  # 60.25: the first has left, one more passes
    assert admit(limit, "203.0.113.5") is None
    assert limit.test("203.0.113.5", ROUTE) == 10, "then the one made at 10 is the oldest"
    assert limit.hit("203.0.113.5", ROUTE) == 10, "hit refuses with the same wait"


@pytest.mark.parametrize(("rate", "expected"), [
    ("1/second", 1), ("1/hour", 3600), ("2 per 10 minutes", 600), ("3/day", 86_400),
])
def test_retry_after_is_the_window_after_a_burst(rate: str, expected: int) -> None:
    clock = FakeClock()
    limit = OutageRateLimit(rate, clock=clock)
    while admit(limit, "198.51.100.1") is None:
        pass
    assert limit.test("198.51.100.1", ROUTE) == expected
    assert limit.hit("198.51.100.1", ROUTE) == expected


def test_refusals_count_nothing() -> None:
    """A client that keeps knocking while refused is admitted when its window allows, not
    later: only admissions are counted."""
    clock = FakeClock()
    limit = OutageRateLimit("2/minute", clock=clock)
    assert [admit(limit, "198.51.100.1") for _ in range(2)] == [None, None]
    for _ in range(100):
        clock.advance(0.5)
        assert limit.hit("198.51.100.1", ROUTE) is not None
    clock.advance(10.5)  # 60.5 s after both
    assert limit.hit("198.51.100.1", ROUTE) is None


# --- threads -------------------------------------------------------------------------------------


def test_threads_hitting_one_client_admit_exactly_the_limit() -> None:
    limit = OutageRateLimit("50/minute", clock=FakeClock())
    threads, calls = 8, 200
    start = threading.Barrier(threads)
    admitted: list[int] = []

    def hammer() -> None:
        start.wait(5)
        admitted.append(sum(limit.hit("203.0.113.9", ROUTE) is None for _ in range(calls)))

    workers = [threading.Thread(target=hammer) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert len(admitted) == threads and sum(admitted) == 50


def test_threads_flooding_new_clients_past_the_cap_admit_the_limit_once() -> None:
    limit = OutageRateLimit("5/minute", clock=FakeClock(), max_clients=200)
    threads, calls = 8, 500
    start = threading.Barrier(threads)
    admitted: list[int] = []

    def flood(first: int) -> None:
        start.wait(5)
        admitted.append(sum(limit.hit(ipv4(first + n), ROUTE) is None for n in range(calls)))

    workers = [threading.Thread(target=flood, args=(t * calls,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert len(limit.memory) == 200
    assert sum(admitted) == 200 + 5


# --- a fleet whose Redis is away -----------------------------------------------------------------


def test_a_fleet_without_its_redis_counts_in_the_same_bounded_memory() -> None:
    clock = FakeClock()
    # Nothing listens on port 1: every call falls back to memory at once.
    limit = OutageRateLimit("3/minute", redis_url="redis://127.0.0.1:1/0", timeout=0.1,
                            clock=clock, max_clients=50)
    try:
        for n in range(50):
            assert admit(limit, ipv4(n)) is None
        assert [admit(limit, ipv4(n)) for n in range(50, 1_050)].count(None) == 3
        assert len(limit.memory) == 50
    finally:
        limit.close()


def test_a_runtime_counts_with_the_configured_cap() -> None:
    from failopen import Config, FailOpen

    fo = FailOpen(Config(verify_url="http://127.0.0.1:9/verify", private_key="k",
                         protected_paths=("/login",), outage_rate="20/minute",
                         outage_rate_max_clients=500))
    try:
        rate = fo.guard.gate.rate
        assert rate is not None and rate.memory.max_keys == 500
    finally:
        fo.stop()


# --- what the gate asks --------------------------------------------------------------------------


class Counted(OutageRateLimit):
    """The real limit, noting which of its methods the gate calls."""

    def __init__(self, rate: str) -> None:
        super().__init__(rate, clock=FakeClock())
        self.calls: list[str] = []

    def test(self, client: str, route: str) -> int | None:
        self.calls.append("test")
        return super().test(client, route)

    def hit(self, client: str, route: str) -> int | None:
        self.calls.append("hit")
        return super().hit(client, route)


def test_an_open_route_asks_the_limit_once_a_request() -> None:
    """Nothing is checked between a test and the hit on an open route: the hit alone checks and
    counts (in a fleet, one Redis round trip instead of two)."""
    from failopen.engine.outage import OutageGate

    rate = Counted("2/minute")
    gate = OutageGate(rate=rate)

    def request() -> object:
        return gate.refuse("open", route=ROUTE, client="203.0.113.7", solution=None,
                           off_since=0.0)

    assert [request(), request()] == [None, None]
    refused = request()
    assert getattr(refused, "outcome", None) == "outage_rate_limited"
    assert getattr(refused, "retry_after", None) == 60
    assert rate.calls == ["hit"] * 3
    assert gate.refuse("closed", route=ROUTE, client="203.0.113.8", solution=None,
                       off_since=0.0) is not None
    assert rate.calls == ["hit"] * 3, "a closed route counts nothing"


def test_a_client_address_of_any_length_costs_a_bounded_key() -> None:
    """Found in review: the client is whatever the server reports, and uvicorn with
    ``--forwarded-allow-ips='*'`` (or a ProxyFix that trusts too much) reports the
    ``X-Forwarded-For`` entry as the client wrote it: 12 KB came through uvicorn unchanged. Each
    was kept whole, as the table's key and, with a ':' in it, in the /64 cache too: 4,000 such
    clients of 16 KB held 64 MB against the cap's promise of a few hundred bytes each."""
    clock = FakeClock()
    limit = OutageRateLimit("20/minute", clock=clock, max_clients=4_000)
    tracemalloc.start()
    try:
        for n in range(2_000):
            limit.hit(f"{n}:" + "z" * 16_000, ROUTE)  # a ':' takes the IPv6 reading first
            limit.hit(f"{n}-" + "y" * 16_000, ROUTE)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(limit.memory) == 4_000
    assert held < 4_000 * 600, f"{held:,} bytes held"
    # Still one window per client, whatever its length.
    clock.advance(61)  # the table's clients gone: these two count apart
    long_one, other = "q" * 20_000, "q" * 19_999 + "r"
    assert [admit(limit, long_one) for _ in range(21)][-1] is not None
    assert admit(limit, other) is None
