"""Core benchmark: what failopen costs on the request path, and what a failing vendor costs it.

    python tests/benchmarks/bench_core.py            # prints two Markdown tables (about a minute)

1. Nanoseconds per call, measured side by side in one run: a bare function call, one flag read,
   one decision with the flag off (audit logger disabled, and enabled with a handler that drops
   records), and one decision with the flag on and a missing token (no I/O). Every runtime pins
   its outage rate limit (``FAILOPEN_OUTAGE_RATE``): it is on by default wherever ``limits`` is
   installed, and it decides what a flag-off row measures. The flag-off decision is shown with
   the limit ``none`` and with the default ``20/minute`` side by side, each over the same client
   addresses taken in turn, enough of them that none reaches 20 calls (so every call is an
   admitted ``bypassed_flag_off``), at three numbers of clients (a call's cost should not grow
   with them). Past ``FAILOPEN_OUTAGE_RATE_MAX_CLIENTS`` (20,000 by default) live clients, new
   ones share one window and would be refused: the 70,000-client rows pin it to 100,000, and say
   so. The refusal over the limit (429 ``outage_rate_limited``) is its own row. After each row
   the guard's outcome counts are checked: a row that measured another outcome than it names
   stops the run.
2. Status requests caused by 1,000 concurrent verifies that all fail (fake verify answering 503,
   fake status page on loopback), with threads and with asyncio tasks. The goal is one per
   ``confirm_ttl``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import statistics
import sys
import threading
import time
from collections.abc import Callable

from failopen import Config, FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI

ROUNDS = 7
CALLS = 200_000
# Written out rather than taken from failopen: a Config given the default's own object treats
# the limit as unset (and turns it off with a warning when ``limits`` is missing), while a value
# given here must be counted, or Config refuses to start.
DEFAULT_RATE = "20/minute"
PER_CLIENT = 20  # calls DEFAULT_RATE admits per client and route in a minute
DEFAULT_MAX_CLIENTS = 20_000  # FAILOPEN_OUTAGE_RATE_MAX_CLIENTS' default, written out as the rate
FLAG_OFF = "bypassed_flag_off"
RATE_LIMITED = "outage_rate_limited"

Row = tuple[str, float, float | None]  # name, ns per call, × its `none` row (or None)


def _ns_per_call(fn: Callable[[], object], calls: int = CALLS) -> float:
    """Median over ROUNDS of the mean time per call, in nanoseconds."""
    samples = []
    for _ in range(ROUNDS):
        gc.disable()
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter_ns() - start) / calls)
        gc.enable()
    return statistics.median(samples)


def _runtime(rate: str, *, flag_off: bool = True, max_clients: int = DEFAULT_MAX_CLIENTS
             ) -> FailOpen:
    """A runtime with its outage rate limit pinned to ``rate`` (counting ``max_clients`` apart
    in memory), the flag forced off."""
    fo = FailOpen(Config(verify_url="http://127.0.0.1:9/verify", private_key="k",
                         protected_paths=("/login",), outage_rate=rate,
                         outage_rate_max_clients=max_clients))
    # A limit that silently did not count (no ``limits``) would make every row a `none` row.
    if (fo.guard.gate.rate is None) != (rate == "none"):
        raise SystemExit(f"outage rate {rate!r} was not applied: {fo.guard.gate!r}")
    if flag_off:
        fo.flag.force_off("benchmark")
    fo.ensure_started()
    return fo


def _expect(fo: FailOpen, name: str, expected: dict[str, int]) -> None:
    """Stop the run when the row's decisions were not the outcome its name says."""
    counts = fo.guard.counts()
    if counts != expected:
        raise SystemExit(f"{name}: measured {counts}, expected {expected}")


def _clients(calls: int) -> tuple[int, Callable[[], str]]:
    """For a row of ``calls`` per round: how many client addresses keep every one of its
    ROUNDS × ``calls`` calls under DEFAULT_RATE, and a function giving the next address. The
    addresses are taken in turn (interleaved, as many clients' requests arrive), each at most
    PER_CLIENT times in the whole run, so it cannot exceed the limit whatever the run's length."""
    total = calls * ROUNDS
    count = math.ceil(total / PER_CLIENT)
    addresses = [f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}" for n in range(count)]
    return count, iter([addresses[i % count] for i in range(total)]).__next__


def _decide(fo: FailOpen, next_client: Callable[[], str]) -> Callable[[], object]:
    return lambda: fo.decide(None, path="/login", client=next_client())


def bench_request_path() -> list[Row]:
    audit = logging.getLogger("failopen.audit")
    audit.addHandler(logging.NullHandler())
    audit.propagate = False
    audit.setLevel(logging.CRITICAL)
    logging.getLogger("failopen.flag").setLevel(logging.CRITICAL)

    def bare() -> None:
        return None

    fo = _runtime("none", flag_off=False)
    flag, guard = fo.flag, fo.guard
    rows: list[Row] = [("bare function call", _ns_per_call(bare), None),
                       ("flag read (`flag.state.enforce`)",
                        _ns_per_call(lambda: flag.state.enforce), None)]
    flag.force_off("benchmark")
    name = "`Guard.decide`, flag off, outage rate `none`, audit disabled"
    rows.append((name, _ns_per_call(lambda: guard.decide(None, path="/login",
                                                         client="192.0.2.1")), None))
    _expect(fo, name, {FLAG_OFF: CALLS * ROUNDS})
    fo.stop()

    # The `none` row and the 429 row with one client: the decision the manual quoted before the
    # outage rate limit existed, and what a client over the limit costs.
    fo = _runtime("none")
    name = "`FailOpen.decide`, flag off, outage rate `none`, one client (what adapters call)"
    one_none = _ns_per_call(lambda: fo.decide(None, path="/login", client="192.0.2.1"))
    _expect(fo, name, {FLAG_OFF: CALLS * ROUNDS})
    rows.append((name, one_none, 1.0))
    fo.stop()

    for calls in (CALLS // 100, CALLS // 10, CALLS):
        count, _ = _clients(calls)
        ns: dict[str, float] = {}
        # Enough room for every client: past the cap they would share one window (refused).
        cap = DEFAULT_MAX_CLIENTS if count <= DEFAULT_MAX_CLIENTS else 100_000
        pinned = "" if cap == DEFAULT_MAX_CLIENTS else \
            f" (`FAILOPEN_OUTAGE_RATE_MAX_CLIENTS={cap}`)"
        for rate in ("none", DEFAULT_RATE):
            fo = _runtime(rate, max_clients=cap)
            label = "`none`" if rate == "none" else f"`{rate}` (default), admitted"
            name = f"`FailOpen.decide`, flag off, outage rate {label}, {count:,} clients in " \
                   f"turn{pinned if rate != 'none' else ''}"
            ns[rate] = _ns_per_call(_decide(fo, _clients(calls)[1]), calls)
            _expect(fo, name, {FLAG_OFF: calls * ROUNDS})
            rows.append((name, ns[rate], ns[rate] / ns["none"]))
            fo.stop()

    fo = _runtime(DEFAULT_RATE)
    for _ in range(PER_CLIENT):  # the client's allowance, spent before the clock starts
        fo.decide(None, path="/login", client="192.0.2.1")
    calls = CALLS // 10
    name = "`FailOpen.decide`, flag off, over the outage rate limit (refused 429), one client"
    refused = _ns_per_call(lambda: fo.decide(None, path="/login", client="192.0.2.1"), calls)
    # All within one window: a run slower than a minute would admit again, and say so here.
    _expect(fo, name, {FLAG_OFF: PER_CLIENT, RATE_LIMITED: calls * ROUNDS})
    rows.append((name, refused, refused / one_none))
    fo.stop()

    fo = _runtime("none")
    guard = fo.guard
    audit.setLevel(logging.NOTSET)
    name = "`Guard.decide`, flag off, outage rate `none`, audit logged to a handler"
    rows.append((name, _ns_per_call(lambda: guard.decide(None, path="/login",
                                                         client="192.0.2.1"), CALLS // 10),
                 None))
    _expect(fo, name, {FLAG_OFF: CALLS // 10 * ROUNDS})
    fo.stop()

    fo = _runtime("none", flag_off=False)
    guard = fo.guard
    name = "`Guard.decide`, flag on, missing token (no I/O)"
    rows.append((name, _ns_per_call(lambda: guard.decide(None, path="/login")), None))
    _expect(fo, name, {"missing_token": CALLS * ROUNDS})
    fo.stop()
    return rows


def _flood(fo: FailOpen, kind: str, concurrency: int) -> list[int]:
    """``concurrency`` decisions at once, all with a token the failing vendor cannot verify."""
    if kind == "asyncio":
        async def run() -> list[int]:
            decisions = await asyncio.gather(
                *(fo.guard.adecide("some-token") for _ in range(concurrency)))
            return [d.status_code for d in decisions]

        return asyncio.run(run())
    outcomes: list[int] = []
    barrier = threading.Barrier(min(concurrency, 200))

    def worker(n: int) -> None:
        if n < 200:
            barrier.wait()
        outcomes.append(fo.guard.decide("some-token").status_code)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def bench_failing_verifies(concurrency: int = 1000) -> list[tuple[str, int, int, float]]:
    logging.getLogger("failopen").setLevel(logging.CRITICAL)
    results = []
    for kind in ("threads", "asyncio"):
        page, verify = FakeStatusPage(), FakeVerifyAPI()
        page.set_global("operational")
        verify.set_fault("503")
        with page.serve() as status_server, verify.serve() as verify_server:
            # The status page reads operational, so enforcement stays on: the outage rate limit
            # is never asked, and pinned only so no setting is left to the install.
            fo = FailOpen(Config(
                status_url=status_server.url, verify_url=verify_server.url + verify.path,
                private_key=verify.private_key, protected_paths=("/login",),
                confirm_ttl=10.0, poll_interval=3600, outage_rate="none",
            ))
            started = time.perf_counter()
            outcomes = _flood(fo, kind, concurrency)
            elapsed = time.perf_counter() - started
            fo.stop()
            assert outcomes == [503] * concurrency, "no outage: every request is refused"
            results.append((kind, concurrency, page.requests, elapsed))
    return results


def main() -> int:
    print(f"Python {sys.version.split()[0]}, {ROUNDS} rounds, median\n")
    rows = bench_request_path()
    bare = rows[0][1]
    print("| request path | ns per call | × bare call | × `none` (same clients) |")
    print("|---|---:|---:|---:|")
    for name, ns, versus_none in rows:
        shown = "" if versus_none is None else f"{versus_none:.1f}"
        print(f"| {name} | {ns:,.0f} | {ns / bare:.1f} | {shown} |")
    print("\n| 1,000 concurrent failing verifies | status requests | confirm TTL | wall time |")
    print("|---|---:|---:|---:|")
    for kind, n, requests, elapsed in bench_failing_verifies():
        print(f"| {n:,} {kind} | {requests} | 10 s | {elapsed:.2f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
