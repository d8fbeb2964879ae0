"""What the audit file (FAILOPEN_AUDIT_FILE) costs a bypassed request, side by side in one run.

    python tests/benchmarks/bench_audit_file.py      # prints a Markdown table

One bypass decision (flag off, the audit logger silenced) without the file, and with it while its
writer thread runs (formatting and writing compete for the GIL, as in a server), and the
request's own share (``AuditFile.record`` with the writer held back). Also: how many lines the
writer kept up with during the flood, and how many it dropped rather than make a request wait.
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from failopen import Config, FailOpen
from failopen.observe.audit_file import AuditFile

ROUNDS = 5
CALLS = 100_000


def _ns(fn: Callable[[], object]) -> float:
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        for _ in range(CALLS):
            fn()
        samples.append((time.perf_counter_ns() - start) / CALLS)
    return statistics.median(samples)


def main() -> int:
    for name in ("failopen.audit", "failopen.flag"):
        logger = logging.getLogger(name)
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
        logger.setLevel(logging.CRITICAL)
    directory = Path(tempfile.mkdtemp())
    # No outage rate limit: one client address, whose 21st call would be a 429 refusal, which
    # writes no audit line, instead of the bypass this measures.
    plain = FailOpen(Config(outage_rate="none"))
    audited = FailOpen(Config(audit_file=str(directory / "audit.jsonl"), outage_rate="none"))
    for fo in (plain, audited):
        fo.flag.force_off("benchmark", ttl=3600)

    def bypass(fo: FailOpen) -> Callable[[], object]:
        return lambda: fo.guard.bypass(path="/login", client="203.0.113.9",
                                       user_agent="Mozilla/5.0 (bench)")

    without = _ns(bypass(plain))
    with_file = _ns(bypass(audited))
    assert audited.guard.audit.file is not None
    audited.guard.audit.file.drain(60)
    stats = audited.guard.audit.file.stats()
    held = AuditFile(str(directory / "held.jsonl"), queue_size=10**8)
    held.ensure_running = lambda: None  # type: ignore[method-assign]
    record = _ns(lambda: held.record("/login", "203.0.113.9", "Mozilla/5.0", "bypassed_flag_off",
                                     "reason", "watcher:2026-01-01T00:00:00Z"))
    for fo in (plain, audited):  # every call measured was the bypass the rows name
        if fo.guard.counts() != {"bypassed_flag_off": ROUNDS * CALLS}:
            raise SystemExit(f"not only bypasses: {fo.guard.counts()}")
    print("| measurement | ns per bypass | ratio |")
    print("|---|---:|---:|")
    print(f"| bypass, no audit file | {without:.0f} | 1.00 |")
    print(f"| bypass, audit file (writer running) | {with_file:.0f} | {with_file / without:.2f} |")
    print(f"| `AuditFile.record` alone (the request's share) | {record:.0f} | "
          f"{record / without:.2f} |")
    print(f"\nflood of {ROUNDS * CALLS} bypasses: {stats['written']} written, "
          f"{stats['dropped']} dropped (never waited for), {stats['failed']} failed")
    plain.stop()
    audited.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
