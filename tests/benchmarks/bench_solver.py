"""The fallback challenge: what a person's browser pays to solve it, and what an attacker pays.

    .venv/bin/python tests/benchmarks/bench_solver.py      # Markdown table (about 3 minutes)
    .venv/bin/python tests/benchmarks/bench_solver.py --quick --costs 20000,100000

For each cost (the challenge's ``maxnumber``), 20 random ALTCHA v1 challenges from the
``altcha`` package (the hidden number uniform in ``[0, cost]``, as the server makes them):

- **Chromium**: failopen-solver.js as failopen.js runs it, a Web Worker in Debian's headless
  Chromium (Playwright), timed in the page from ``new Worker`` to the answer (worker start,
  the challenge fetched over loopback, WebCrypto SHA-256). Median and p90.
- **Python**: the same challenges solved natively with ``hashlib``, CPU seconds per solve:
  ``altcha.solve_challenge_v1`` as shipped, and a tighter loop that hashes the salt once and copies
  the state (what an attacker would write in an afternoon). Compiled code or a GPU is faster
  again: these are an attacker's ceiling, not floor.

The recommended default is the largest cost whose Chromium median is at most about a second.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import platform
import re
import statistics
import subprocess
import sys
import time
from typing import Any

import altcha

from failopen.testing import LoopbackServer
from failopen.testing._server import FakeRequest, Reply
from failopen.web import SOLVER_PATH

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SECRET = "bench-secret-of-at-least-thirty-two-characters"
COSTS = [20_000, 50_000, 100_000, 200_000, 500_000]
#: One solve as failopen.js starts it: a worker per solve, the challenge URL, no retries.
SOLVE = """async () => {
  const started = performance.now();
  const answer = await new Promise((done, failed) => {
    const w = new Worker('/failopen-solver.js');
    w.onmessage = e => { w.terminate(); done(e.data); };
    w.onerror = e => { w.terminate(); failed(String(e.message)); };
    w.postMessage([location.origin + '/challenge', 0, 0]);
  });
  return [performance.now() - started, answer];
}"""


class Bench:
    """The page, the solver and a queue of challenges, on loopback."""

    def __init__(self, solver: bytes) -> None:
        self.solver = solver
        self.queue: list[dict[str, Any]] = []

    def handler(self, request: FakeRequest) -> Reply:
        if request.path == "/":
            return Reply(body=b"<!doctype html><title>bench</title>",
                         headers=[("Content-Type", "text/html")])
        if request.path == "/failopen-solver.js":
            return Reply(body=self.solver, headers=[("Content-Type", "text/javascript")])
        if request.path == "/challenge":
            return Reply.json(self.queue.pop(0), headers=[("Cache-Control", "no-store")])
        return Reply(status=404)


def challenge(cost: int) -> dict[str, Any]:
    """A challenge as the contract spells it (``maxnumber``), its number random in [0, cost]."""
    made = altcha.create_challenge_v1(hmac_key=SECRET, max_number=cost).to_dict()
    made["maxnumber"] = made.pop("maxNumber")
    return made


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def native_tight(c: dict[str, Any]) -> int:
    """The attacker's loop: the salt hashed once, its state copied for each number."""
    prefix, want = hashlib.sha256(c["salt"].encode()), bytes.fromhex(c["challenge"])
    for number in range(c["maxnumber"] + 1):
        h = prefix.copy()
        h.update(str(number).encode())
        if h.digest() == want:
            return number
    raise AssertionError("no solution")


def cpu(fn: Any, *args: Any) -> tuple[float, Any]:
    started = time.process_time()
    result = fn(*args)
    return time.process_time() - started, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--costs", default=",".join(map(str, COSTS)))
    parser.add_argument("--solves", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="5 solves per cost")
    parser.add_argument("--batch", type=int, help="try another BATCH in the solver")
    args = parser.parse_args()
    costs = [int(c) for c in args.costs.split(",")]
    solves = 5 if args.quick else args.solves
    solver = SOLVER_PATH.read_bytes()
    if args.batch:
        solver = re.sub(rb"const BATCH = \d+;", f"const BATCH = {args.batch};".encode(), solver)
    from playwright.sync_api import sync_playwright

    bench = Bench(solver)
    version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True,
                             check=False).stdout.strip()
    rows = []
    with LoopbackServer(bench.handler) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        page.goto(server.url + "/")
        bench.queue.append(challenge(1000))
        page.evaluate(SOLVE)  # warm up: the worker script compiled and cached
        for cost in costs:
            made = [challenge(cost) for _ in range(solves)]
            browser_ms, tried = [], 0
            for c in made:
                bench.queue.append(c)
                ms, answer = page.evaluate(SOLVE)
                ok, _ = altcha.verify_solution_v1(answer, SECRET)
                assert ok, f"the browser's answer did not verify: {answer!r}"
                browser_ms.append(ms)
                tried += json.loads(base64.b64decode(answer))["number"] + 1
            shipped, tight = [], []
            for c in made:
                seconds, solution = cpu(altcha.solve_challenge_v1, c["challenge"], c["salt"],
                                        c["algorithm"], c["maxnumber"])
                shipped.append(seconds)
                seconds, number = cpu(native_tight, c)
                assert solution is not None and number == solution.number
                tight.append(seconds)
            rows.append((cost, browser_ms, shipped, tight, tried / sum(browser_ms)))
            print(f"cost {cost:,}: done", file=sys.stderr)
        browser.close()

    print(f"{solves} random challenges per cost; {platform.machine()}, "
          f"{len(__import__('os').sched_getaffinity(0))} cores; {version}; "
          f"Python {platform.python_version()}\n")
    print("| cost (`maxnumber`) | Chromium median | Chromium p90 | Chromium hashes/s | "
          "Python `altcha` CPU s/solve (median) | Python tight loop CPU s/solve (median) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for cost, browser_ms, shipped, tight, rate in rows:
        print(f"| {cost:,} | {statistics.median(browser_ms) / 1e3:.2f} s | "
              f"{p90(browser_ms) / 1e3:.2f} s | {rate * 1e3:,.0f} | "
              f"{statistics.median(shipped):.3f} | {statistics.median(tight):.3f} |")
    fits = [row[0] for row in rows if statistics.median(row[1]) <= 1100]
    if fits:
        print(f"\nRecommended default cost: {max(fits):,} (the largest whose Chromium median is "
              "about a second or less)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
