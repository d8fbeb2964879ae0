"""Benchmark: ``failopen rai sessions`` export vs a naive sequential client, same run.

    python tests/benchmarks/bench_rai_export.py            # 1,000,000 sessions (several minutes)
    python tests/benchmarks/bench_rai_export.py --quick    # 100,000 sessions

The emulator runs in its own process on 127.0.0.1 with simulated network latency per request
(``--latency``, default 20 ms). Each client runs in its own process, writes JSONL to a file, and
reports its wall time and peak RSS (``ru_maxrss``). Clients:

* naive: a plain loop, httpx + stdlib ``json``, the service's default page size, no prefetch;
* failopen: the ``failopen rai sessions --out`` code path (page size 1000, prefetch one page:
  the next request leaves once the current page's cursor is decoded; raw pages, no models);
* failopen, no prefetch: the same with ``prefetch=False`` (what prefetch is worth);
* failopen + orjson: the same with orjson decoding and encoding (whether orjson earns a place);
* naive, large pages: the naive loop asking for 1000 records a page (what page size alone gives).

Peak RSS of the failopen export is measured at 10k, 100k (and 1M) sessions: it must stay flat.
Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

SERVE = r"""
import sys
from failopen.testing.rai_emulator import RaiEmulator
sessions, latency = int(sys.argv[1]), float(sys.argv[2])
emulator = RaiEmulator(cohorts=100, sessions_per_cohort=sessions // 100, latency=latency)
server = emulator.serve()
start, end = emulator.data_window
print(server.url, start, end, emulator.total_sessions, flush=True)
sys.stdin.read()  # serve until the benchmark closes our stdin
server.stop()
"""

NAIVE = r"""
import json, os, resource, sys, time
import httpx
url, start, end, out, page_size = sys.argv[1:6]
began = time.perf_counter()
with httpx.Client(base_url=url, timeout=60) as http, open(out, "w") as f:
    token = http.post("/api/rai/v1/authorize", json={
        "client_id": os.environ["FAILOPEN_RAI_CLIENT_ID"],
        "client_secret": os.environ["FAILOPEN_RAI_CLIENT_SECRET"]}).json()["access_token"]
    params = {"from": start, "to": end, "public_key": "pk_live_test"}
    if page_size != "default":
        params["page_size"] = page_size
    page_token = None
    while True:
        query = dict(params, page_token=page_token) if page_token else params
        reply = http.get("/api/rai/v1/sessions", params=query,
                         headers={"Authorization": "Bearer " + token})
        reply.raise_for_status()
        body = json.loads(reply.content)
        for record in body["sessions"]:
            f.write(json.dumps(record) + "\n")
        page_token = body.get("next_page_token")
        if not page_token:
            break
elapsed = time.perf_counter() - began
print(json.dumps({"code": 0, "elapsed": elapsed,
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

FAILOPEN = r"""
import argparse, functools, json, resource, sys, time
from failopen.rai import _output, cli
variant, argv = sys.argv[1], sys.argv[2:]
if variant == "no-prefetch":
    cli.Client = functools.partial(cli.Client, prefetch=False)
elif variant == "orjson":
    import orjson
    from failopen.rai import _base
    _base._decode_json = orjson.loads
    def write(self, records):
        dumps = orjson.dumps
        self._out.write(b"".join([dumps(r) + b"\n" for r in records]))
    _output.JsonLines.write = write
parser = argparse.ArgumentParser()
cli.register_rai(parser.add_subparsers())
args = parser.parse_args(["rai", "sessions", *argv])
began = time.perf_counter()
code = args.func(args)
elapsed = time.perf_counter() - began
print(json.dumps({"code": code, "elapsed": elapsed,
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

ENV = {**os.environ, "FAILOPEN_RAI_CLIENT_ID": "test-client",
       "FAILOPEN_RAI_CLIENT_SECRET": "test-secret"}  # fmt: skip


@dataclass
class Result:
    name: str
    page_size: str
    prefetch: str
    codec: str
    records: int
    seconds: float
    rss_mb: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds


class Emulator:
    """The emulator in a child process, for as long as the ``with`` block lasts."""

    def __init__(self, sessions: int, latency: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(sessions), str(latency)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.url, self.start, self.end, total = self.process.stdout.readline().split()
        self.total = int(total)

    def __enter__(self) -> Emulator:
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def _run(code: str, argv: list[str], out: str) -> tuple[float, float, int]:
    done = subprocess.run([sys.executable, "-c", code, *argv], env=ENV, capture_output=True,
                          text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"client failed ({done.returncode}):\n{done.stderr}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if report["code"] != 0:
        raise SystemExit(f"export failed with exit code {report['code']}:\n{done.stderr}")
    with open(out, "rb") as f:
        lines = sum(1 for _ in f)
    return report["elapsed"], report["rss_kb"] / 1024, lines


def naive(emulator: Emulator, folder: str, page_size: str = "default") -> Result:
    out = os.path.join(folder, f"naive-{page_size}.jsonl")
    argv = [emulator.url, emulator.start, emulator.end, out, page_size]
    seconds, rss, lines = _run(NAIVE, argv, out)
    if page_size == "default":
        return Result("naive sequential", "100 (default)", "no", "json", lines, seconds, rss)
    return Result("naive, large pages", page_size, "no", "json", lines, seconds, rss)


def ours(emulator: Emulator, folder: str, variant: str = "default") -> Result:
    out = os.path.join(folder, f"failopen-{variant}.jsonl")
    argv = [variant, "--base-url", emulator.url, "--from", emulator.start, "--to", emulator.end,
            "--public-key", "pk_live_test", "--out", out]  # fmt: skip
    seconds, rss, lines = _run(FAILOPEN, argv, out)
    name = {"default": "failopen rai sessions", "no-prefetch": "failopen, no prefetch",
            "orjson": "failopen + orjson"}[variant]  # fmt: skip
    return Result(name, "1000", "no" if variant == "no-prefetch" else "yes",
                  "orjson" if variant == "orjson" else "json", lines, seconds, rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 sessions instead of 1M")
    parser.add_argument("--sessions", type=int, help="sessions to export (multiple of 100)")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per request")
    parser.add_argument("--no-naive", action="store_true", help="skip the slow naive client")
    options = parser.parse_args()
    sessions = options.sessions or (100_000 if options.quick else 1_000_000)
    has_orjson = importlib.util.find_spec("orjson") is not None

    print(f"Exporting {sessions:,} sessions, {options.latency * 1000:g} ms simulated latency per "
          f"request, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs", flush=True)
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as folder, Emulator(sessions, options.latency) as emu:
        variants = ["default", "no-prefetch"] + (["orjson"] if has_orjson else [])
        for variant in variants:
            results.append(ours(emu, folder, variant))
            print(f"  {results[-1].name}: {results[-1].seconds:.1f}s", file=sys.stderr)
        results.append(naive(emu, folder, "1000"))
        print(f"  {results[-1].name}: {results[-1].seconds:.1f}s", file=sys.stderr)
        if not options.no_naive:
            results.append(naive(emu, folder))
            print(f"  {results[-1].name}: {results[-1].seconds:.1f}s", file=sys.stderr)
    for result in results:
        if result.records != sessions:
            raise SystemExit(f"{result.name} exported {result.records}, expected {sessions}")
    baseline = next((r for r in results if r.name == "naive sequential"), None)

    print("\n| client | page size | prefetch | JSON | records | seconds | records/s | "
          "peak RSS (MB) | vs naive |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|")
    for r in results:
        ratio = f"{r.rate / baseline.rate:.1f}x" if baseline else "-"
        print(f"| {r.name} | {r.page_size} | {r.prefetch} | {r.codec} | {r.records:,} | "
              f"{r.seconds:.1f} | {r.rate:,.0f} | {r.rss_mb:.0f} | {ratio} |")
    if has_orjson:
        print(f"\norjson vs stdlib json, end to end: {results[2].rate / results[0].rate:.2f}x "
              "(a compiled dependency must reach 1.5x)")

    sizes = sorted({10_000, 100_000, sessions})
    print("\n| sessions exported (failopen) | seconds | peak RSS (MB) |")
    print("|---:|---:|---:|")
    for size in sizes:
        if size == sessions:
            r = results[0]
        else:
            with tempfile.TemporaryDirectory() as folder, Emulator(size, options.latency) as emu:
                r = ours(emu, folder)
        print(f"| {size:,} | {r.seconds:.1f} | {r.rss_mb:.0f} |", flush=True)


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"\n(total {time.perf_counter() - started:.0f}s)", file=sys.stderr)
