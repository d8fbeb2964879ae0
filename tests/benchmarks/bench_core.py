"""Core benchmark: what failopen costs on the request path, and what a failing vendor costs it.

    python tests/benchmarks/bench_core.py            # prints a Markdown table

1. Nanoseconds per call, measured side by side in one run: a bare function call, one flag read,
   one decision with the flag off (audit logger enabled with a handler that drops records, and
   disabled), and one decision with the flag on and a missing token (no I/O).
2. Status requests caused by 1,000 concurrent verifies that all fail (fake verify answering 503,
   fake status page on loopback), with threads and with asyncio tasks. The goal is one per
   ``confirm_ttl``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import statistics
import sys
import threading
import time
from collections.abc import Callable

from failopen import Config, FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI

ROUNDS = 7
CALLS = 200_000


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


def bench_request_path() -> list[tuple[str, float]]:
    config = Config(verify_url="http://127.0.0.1:9/verify", private_key="k",
                    protected_paths=("/login",))
    fo = FailOpen(config)
    flag, guard = fo.flag, fo.guard
    audit = logging.getLogger("failopen.audit")
    audit.addHandler(logging.NullHandler())
    audit.propagate = False
    audit.setLevel(logging.CRITICAL)
    logging.getLogger("failopen.flag").setLevel(logging.CRITICAL)

    def bare() -> None:
        return None

    rows = [("bare function call", _ns_per_call(bare)),
            ("flag read (`flag.state.enforce`)", _ns_per_call(lambda: flag.state.enforce))]
    flag.force_off("benchmark")
    fo.ensure_started()
    rows.append(("`Guard.decide`, flag off, audit disabled",
                 _ns_per_call(lambda: guard.decide(None, path="/login", client="192.0.2.1"))))
    rows.append(("`FailOpen.decide`, flag off, audit disabled (what adapters call)",
                 _ns_per_call(lambda: fo.decide(None, path="/login", client="192.0.2.1"))))
    audit.setLevel(logging.NOTSET)
    rows.append(("`Guard.decide`, flag off, audit logged to a handler",
                 _ns_per_call(lambda: guard.decide(None, path="/login", client="192.0.2.1"),
                              CALLS // 10)))
    flag.automatic()
    rows.append(("`Guard.decide`, flag on, missing token (no I/O)",
                 _ns_per_call(lambda: guard.decide(None, path="/login"))))
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
            fo = FailOpen(Config(
                status_url=status_server.url, verify_url=verify_server.url + verify.path,
                private_key=verify.private_key, protected_paths=("/login",),
                confirm_ttl=10.0, poll_interval=3600,
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
    print("| request path | ns per call | × bare call |")
    print("|---|---:|---:|")
    for name, ns in rows:
        print(f"| {name} | {ns:,.0f} | {ns / bare:.1f} |")
    print("\n| 1,000 concurrent failing verifies | status requests | confirm TTL | wall time |")
    print("|---|---:|---:|---:|")
    for kind, n, requests, elapsed in bench_failing_verifies():
        print(f"| {n:,} {kind} | {requests} | 10 s | {elapsed:.2f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
