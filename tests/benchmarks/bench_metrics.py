"""What Prometheus metrics cost the request path: the guard with and without them, side by side.

    python tests/benchmarks/bench_metrics.py            # prints a Markdown table (about 30 s)

Two runtimes built alike, one with ``metrics="off"`` and one counting into a Prometheus
registry; each round times every variant once, in alternating order, and the table shows the
median over the rounds of the mean per call, and the ratio with / without. A third column is
the design not taken: the plain guard plus one pre-bound ``Counter.inc()`` per call (what
counting each decision as it happens would add; failopen instead hands the guard's own
per-outcome counts to the counters at scrape time and on each watcher turn). The audit log is
disabled as in bench_core.py (its record, not the counter, is what a bypass costs when logged).
"""

from __future__ import annotations

import gc
import logging
import statistics
import sys
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter

from failopen import Config, FailOpen
from failopen.observe.metrics import PrometheusMetrics

ROUNDS = 15
CALLS = 100_000


def _ns(fn: Callable[[], object], calls: int = CALLS) -> float:
    gc.disable()
    try:
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        return (time.perf_counter_ns() - start) / calls
    finally:
        gc.enable()


def _runtime(metrics: bool) -> FailOpen:
    # No outage rate limit: one client address, whose 21st flag-off call would be a 429.
    config = Config(verify_url="http://127.0.0.1:9/verify", private_key="k",
                    protected_paths=("/login",), metrics="off", outage_rate="none")
    return FailOpen(config, metrics=PrometheusMetrics(CollectorRegistry()) if metrics else None)


def _force_off(fo: FailOpen) -> None:
    fo.flag.force_off("benchmark")


def main() -> int:
    for name in ("failopen.audit", "failopen.flag", "failopen.guard"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    plain, counted = _runtime(False), _runtime(True)
    cases: list[tuple[str, Callable[[FailOpen], Callable[[], object]], Callable[[FailOpen], None]]]
    cases = [
        ("`Guard.decide`, flag on, missing token (no I/O)",
         lambda fo: lambda: fo.guard.decide(None, path="/login"), lambda fo: None),
        ("`Guard.bypass`, flag off (what adapters call first)",
         lambda fo: lambda: fo.guard.bypass(path="/login", client="192.0.2.1"),
         lambda fo: _force_off(fo)),
        ("`Guard.decide`, flag off",
         lambda fo: lambda: fo.guard.decide(None, path="/login", client="192.0.2.1"),
         lambda fo: None),
    ]
    print(f"Python {sys.version.split()[0]}, {ROUNDS} interleaved rounds of {CALLS:,} calls, "
          "median\n")
    inc = Counter("bench", "per-call counter", ["outcome"],
                  registry=CollectorRegistry()).labels(outcome="valid").inc
    print("| request path | metrics off, ns | metrics on, ns (× off) | "
          "off + `Counter.inc()` per call, ns (× off) |")
    print("|---|---:|---:|---:|")
    for name, make, prepare in cases:
        prepare(plain)
        prepare(counted)
        base = make(plain)

        def per_call(base: Callable[[], object] = base) -> None:
            base()
            inc()

        fns = {"off": base, "on": make(counted), "inc": per_call}
        samples: dict[str, list[float]] = {key: [] for key in fns}
        for round_ in range(ROUNDS):
            order = list(fns) if round_ % 2 == 0 else list(reversed(fns))
            for variant in order:
                samples[variant].append(_ns(fns[variant]))
        off, on, each = (statistics.median(samples[k]) for k in ("off", "on", "inc"))
        ratio = statistics.median(w / o for w, o in zip(samples["on"], samples["off"],
                                                          strict=True))
        ratio_inc = statistics.median(w / o for w, o in zip(samples["inc"], samples["off"],
                                                              strict=True))
        print(f"| {name} | {off:,.0f} | {on:,.0f} ({ratio:.2f}×) | {each:,.0f} "
              f"({ratio_inc:.2f}×) |")
    # The flag-off rows measured bypasses, not refusals of some limit.
    for fo in (plain, counted):
        if set(fo.guard.counts()) != {"missing_token", "bypassed_flag_off"}:
            raise SystemExit(f"not the outcomes the rows name: {fo.guard.counts()}")
    plain.stop()
    counted.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
