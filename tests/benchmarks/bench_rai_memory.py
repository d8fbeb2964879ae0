"""Benchmark: peak memory of ``failopen rai`` with ``--parallel 1`` over 30 days vs 31 days.

    python tests/benchmarks/bench_rai_memory.py            # 1,000,000 sessions (about 2 minutes)
    python tests/benchmarks/bench_rai_memory.py --quick    # 100,000 sessions

A listing over more than 30 days is split into 30-day windows that share their boundary instant.
The emulator (its own process, 127.0.0.1, no simulated latency) serves 100 cohorts spread over 31
days. Each client runs in its own process and reports its peak RSS (``ru_maxrss``, the client
only): ``rai sync``, ``rai sessions`` and ``rai cohorts``, all ``--parallel 1 --page-size 1000``
JSONL, from the data's start to 30 days and to 31 days later, side by side, with the ratio.

On 2026-11-28 (2 shared cores), 1M sessions, ``rai sessions --parallel 1``: 46 MB over 30 days,
295 MB over 31 before the fix (load 2.3; the pager kept the id of every session of the first
window to drop the few the next window repeats), 46 / 46 MB after it (load 1.4); ``rai sync``
53-54 MB and ``rai cohorts`` 40 MB both ways.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_rai_export import SERVE  # noqa: E402
from bench_rai_sync import CLIENT, Emulator, _lines, _run  # noqa: E402

SPAN_DAYS = 31.0
COHORTS = 100
SERVE_SPAN = SERVE.replace("cohorts=100,", f"cohorts={COHORTS},").replace(
    "latency=latency)", f"latency=latency, span_days={SPAN_DAYS})")
assert SERVE_SPAN.count("span_days") == 1, "bench_rai_export.SERVE changed: pin span_days again"


class SpanEmulator(Emulator):
    """The benchmarks' emulator, its cohorts spread over 31 days."""

    def __init__(self, sessions: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVE_SPAN, str(sessions), "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.url, self.start, self.end, total = self.process.stdout.readline().split()
        self.total = int(total)


def _later(stamp: str, days: int) -> str:
    moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return (moment + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


def measure(emu: SpanEmulator, folder: str, verb: str, days: int) -> tuple[float, int, float]:
    """Peak RSS (MB), sessions or cohorts written, seconds of one client run."""
    out = tempfile.mkdtemp(dir=folder)
    until = _later(emu.start, days)
    common = ["--base-url", emu.url, "--public-key", "pk_live_test", "--parallel", "1",
              "--page-size", "1000", "--format", "jsonl"]  # fmt: skip
    if verb == "sync":
        argv = ["sync", *common, "--since", emu.start, "--until", until,
                "--state", os.path.join(out, "state.json"), "--out-dir", out]  # fmt: skip
        pattern = os.path.join(out, "sessions-*.jsonl")
    else:
        target = os.path.join(out, f"{verb}.jsonl")
        argv = [verb, *common, "--from", emu.start, "--to", until, "--out", target]
        pattern = target
    report = _run(CLIENT, argv, emu)
    return report["rss_kb"] / 1024, _lines(pattern), report["elapsed"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 sessions instead of 1M")
    parser.add_argument("--sessions", type=int, help="sessions (a multiple of 100)")
    options = parser.parse_args()
    sessions = options.sessions or (100_000 if options.quick else 1_000_000)
    print(f"{sessions:,} sessions in {COHORTS} cohorts over {SPAN_DAYS:g} days, no simulated "
          f"latency, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as folder, SpanEmulator(sessions) as emu:
        for verb in ("sync", "sessions", "cohorts"):
            # Interleaved, so a change of load touches both columns alike.
            a, b = measure(emu, folder, verb, 30), measure(emu, folder, verb, 31)
            print(f"  {verb}: {a[0]:.0f} / {b[0]:.0f} MB", file=sys.stderr)
            if verb != "cohorts" and b[1] != emu.total:
                raise SystemExit(f"{verb} over 31 days wrote {b[1]} sessions, not {emu.total}")
            rows.append((verb, a, b))
    print("\n| --parallel 1, JSONL | 30 days: peak RSS (MB) | 31 days: peak RSS (MB) | "
          "31 / 30 | records over 30 / 31 days | seconds over 30 / 31 days |")
    print("|---|---:|---:|---:|---:|---:|")
    for verb, a, b in rows:
        print(f"| rai {verb} | {a[0]:.0f} | {b[0]:.0f} | {b[0] / a[0]:.2f}x | "
              f"{a[1]:,} / {b[1]:,} | {a[2]:.1f} / {b[2]:.1f} |")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"\n(total {time.perf_counter() - started:.0f}s)", file=sys.stderr)
