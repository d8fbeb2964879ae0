"""Benchmark: the sync's output formats on the same sessions, side by side.

    python tests/benchmarks/bench_rai_formats.py            # 1,000,000 sessions
    python tests/benchmarks/bench_rai_formats.py --quick    # 100,000 sessions

What a sync does with each page, without the network: the emulator's sessions (its default data,
with one field the schema does not know, as after a vendor's addition, when ``--new-field``)
are rendered as the API sends them, 1,000 a page; each format encodes every page into a spool
(what the fetching threads do) and finishes the spools into one file (the main thread). Each
format runs in its own process, interleaved over ``--rounds`` rounds; printed: encode and finish
seconds, the file's size, and the process's peak RSS, as a Markdown table with ratios to JSONL.
Settings pinned here: 1,000 sessions a page, 100 cohorts, seed 7, the formats' own defaults
(gzip level 6; Parquet zstd, row groups of 65,536 rows).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, resource, sys, time
from failopen.rai._formats import FORMATS
from failopen.testing._rai_data import Dataset

name, total, folder, new_field = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
fmt = FORMATS[name]
per_cohort = total // 100
data = Dataset(public_keys=("pk_a", "pk_b"), cohorts=100, sessions_per_cohort=(per_cohort,
               per_cohort), seed=7, start_ms=1_760_000_000_000, span_days=20,
               unknown_fields=new_field)
spools, encode = [], 0.0
for c in range(100):
    plan = data.plan(c)
    for first in range(0, per_cohort, 1000):
        lines = [plan.session_json(j) for j in range(first, min(first + 1000, per_cohort))]
        records = None if fmt.keeps_lines else [json.loads(line) for line in lines]
        began = time.perf_counter()
        chunk = fmt.encode("sessions", records or [], lines if fmt.keeps_lines else None)
        encode += time.perf_counter() - began
        path = os.path.join(folder, f"spool-{len(spools):05d}")
        with open(path, "wb") as f:
            f.write(chunk)
        spools.append(path)
target = os.path.join(folder, "out" + fmt.suffix)
began = time.perf_counter()
with open(target, "wb") as out:
    fmt.finish("sessions", spools, out, lambda f, b: f.write(b))
finish = time.perf_counter() - began
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"encode": encode, "finish": finish, "bytes": os.path.getsize(target),
                  "rss_kb": rss}))
"""

FORMAT_NAMES = ("jsonl", "jsonl.gz", "csv", "parquet")


def run(name: str, total: int, new_field: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, name, str(total), folder, "1" if new_field else "0"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 sessions")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--new-field", action="store_true",
                        help="every record carries a field the schema does not know")  # fmt: skip
    args = parser.parse_args()
    total = 100_000 if args.quick else 1_000_000
    results: dict[str, list[dict[str, float]]] = {name: [] for name in FORMAT_NAMES}
    for _ in range(args.rounds):
        for name in FORMAT_NAMES:  # interleaved: the machine's load falls on every format
            results[name].append(run(name, total, args.new_field))
    print(f"{total:,} sessions, {args.rounds} rounds, load {os.getloadavg()[0]:.2f}"
          f"{', a field the schema does not know' if args.new_field else ''}\n")  # fmt: skip
    print("| format | encode s | finish s | file MB | size vs JSONL | peak RSS MB |")
    print("|---|---|---|---|---|---|")
    base = min(r["bytes"] for r in results["jsonl"])
    for name, rows in results.items():
        def span(key: str, scale: float = 1.0, rows: list[dict[str, float]] = rows) -> str:
            low, high = min(r[key] for r in rows) / scale, max(r[key] for r in rows) / scale
            return f"{low:.2f}-{high:.2f}" if high - low >= 0.005 else f"{low:.2f}"

        ratio = min(r["bytes"] for r in rows) / base
        print(f"| {name} | {span('encode')} | {span('finish')} | {span('bytes', 1e6)} "
              f"| 1/{1 / ratio:.0f} | {span('rss_kb', 1024)} |")  # fmt: skip


if __name__ == "__main__":
    main()
