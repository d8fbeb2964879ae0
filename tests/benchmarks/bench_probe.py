"""Verify probe benchmark: a scripted outage on a FakeClock, ``status`` vs ``status,probe``.

    python tests/benchmarks/bench_probe.py           # about 2 minutes; prints a Markdown table
    python tests/benchmarks/bench_probe.py --quick   # a fifth of the traffic (about a minute)

The real runtime (flag, watcher, guard, probe, HttpVerifier, StatusClient) over the in-process
fakes; the watcher is stepped once per simulated second, so 50 minutes replay in seconds.

Timeline (poll and probe interval 30 s, no outage rate limit, every other setting at its
default: the limit counts on the wall clock, which the replay outruns, so with it all but 20
requests of each real minute of bypass would be 429s, and the rows would count the limit's
refusals, not the evidence's):

* 0-5 min: healthy;
* 5 min: the verify API stops answering (timeouts); the status page still reads operational;
* 15 min: the status page flips to major_outage (ten minutes late);
* 35 min: the verify API answers again; 37 min: the page reads operational; 50 min: end.

Traffic every second: 2 real log-ins (fresh solved tokens) and a junk-token flood of 10 requests
(unknown tokens the vendor answers 400, and crafted ones a buggy vendor answers 500: requests
that look "unavailable"). Measured for each evidence setting: log-ins refused (503) and the
minutes with any log-in refused; seconds from the verify failure to the first bypass; bypasses
in the healthy periods (before 5 min, and after 38 min) (goal 0); probe verify calls (the cost).
A second run floods junk and crafted 500-tokens at 50 per second for 50 minutes with the vendor
healthy: bypasses (goal 0).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from failopen import Config
from failopen.runtime import FailOpen
from failopen.testing import FakeClock, FakeStatusPage, FakeVerifyAPI
from failopen.testing._server import FakeRequest, Reply, as_transport

INTERVAL = 30.0
VERIFY_DOWN, PAGE_OUTAGE, VERIFY_UP, PAGE_UP, END = 300, 900, 2100, 2220, 3000
HEALTHY_AGAIN = 2280  # the page read operational at 37 min; enforcement back within a minute
USERS, JUNK, FLOOD = 2, 10, 50
CRASH = "crash-"


@dataclass
class Tally:
    refused: int = 0
    refused_seconds: set[int] = field(default_factory=set)
    first_bypass: int | None = None
    back: int | None = None
    healthy_bypasses: int = 0
    bypasses: int = 0
    probes: int = 0
    decisions: int = 0
    wall: float = 0.0


def build(evidence: str, clock: FakeClock) -> tuple[FailOpen, FakeStatusPage, FakeVerifyAPI]:
    page = FakeStatusPage(clock=clock)
    api = FakeVerifyAPI(clock=clock)

    def handler(request: FakeRequest) -> Reply:
        try:
            token = request.json().get("session_token", "")
        except (ValueError, AttributeError):
            token = ""
        if isinstance(token, str) and token.startswith(CRASH):
            return Reply.json({"error": "internal"}, status=500)
        return api.handler(request)

    transport = as_transport(handler)
    config = Config.from_mapping(
        {"EVIDENCE": evidence},
        status_url="https://status.test", verify_url="https://verify.test" + api.path,
        private_key=api.private_key, protected_paths=("/login",), poll_interval=INTERVAL,
        poll_jitter=0.0, outage_rate="none")
    runtime = FailOpen(config, status_transport=page.transport(), verify_transport=transport,
                       verify_async_transport=transport, clock=clock)
    return runtime, page, api


def replay(evidence: str, *, users: int, junk: int, outage: bool) -> Tally:
    clock = FakeClock()
    runtime, page, api = build(evidence, clock)
    watcher, guard, tally = runtime.watcher, runtime.guard, Tally()
    next_poll = clock.monotonic()
    started = time.perf_counter()
    for second in range(END):
        if outage:
            if second == VERIFY_DOWN:
                api.set_fault("timeout")
            elif second == PAGE_OUTAGE:
                page.set_global("major_outage")
            elif second == VERIFY_UP:
                api.set_fault(None)
            elif second == PAGE_UP:
                page.set_global("operational")
        if clock.monotonic() >= next_poll:
            next_poll = clock.monotonic() + watcher.poll_once().next_delay
        elif runtime.probe is not None:
            runtime.probe.run_due()
        watcher.tick()
        healthy = not outage or second < VERIFY_DOWN or second >= HEALTHY_AGAIN
        tokens = [api.issue_token() for _ in range(users)] + [
            (CRASH if n % 2 else "junk-") + f"{second}-{n}" for n in range(junk)]
        for index, token in enumerate(tokens):
            decision = guard.decide(token, path="/login")
            tally.decisions += 1
            if decision.bypassed:
                tally.bypasses += 1
                if healthy:
                    tally.healthy_bypasses += 1
                if tally.first_bypass is None:
                    tally.first_bypass = second
            if index < users and decision.status_code == 503:
                tally.refused += 1
                tally.refused_seconds.add(second)
        if second >= VERIFY_UP and tally.back is None and runtime.flag.state.enforce:
            tally.back = second
        clock.advance(1.0)
    tally.wall = time.perf_counter() - started
    tally.probes = runtime.probe.sent if runtime.probe is not None else 0
    runtime.stop()
    return tally


def main(argv: list[str]) -> None:
    logging.disable(logging.WARNING)  # the replay logs every refusal otherwise
    quick = "--quick" in argv
    users, junk, rate = (USERS, 2, 10) if quick else (USERS, JUNK, FLOOD)
    settings = ("status", "status,probe")
    results = {e: replay(e, users=users, junk=junk, outage=True) for e in settings}
    flood = {e: replay(e, users=0, junk=rate, outage=False) for e in settings}
    minutes = {e: len(t.refused_seconds) / 60 for e, t in results.items()}
    rows: list[tuple[str, Any]] = [
        ("log-ins refused (503)", {e: t.refused for e, t in results.items()}),
        ("minutes with log-ins refused", {e: f"{m:.1f}" for e, m in minutes.items()}),
        ("verify failure to first bypass (s)", {
            e: "-" if t.first_bypass is None else t.first_bypass - VERIFY_DOWN
            for e, t in results.items()}),
        ("verify recovery to enforcement back (s)", {
            e: "-" if t.back is None else t.back - VERIFY_UP for e, t in results.items()}),
        ("bypasses in healthy periods, junk flood (goal 0)",
         {e: t.healthy_bypasses for e, t in results.items()}),
        (f"bypasses, 50 min of {rate}/s junk and crafted 500-tokens, vendor healthy (goal 0)",
         {e: t.bypasses for e, t in flood.items()}),
        ("probe verify calls in 50 min (cost)", {e: t.probes for e, t in results.items()}),
    ]
    print(f"Scripted outage, {users} log-ins/s + {junk} junk/s, poll and probe every "
          f"{INTERVAL:g}s, verify down at 5 min, page flips at 15 min, back at 35/37 min:\n")
    print("| measure | `FAILOPEN_EVIDENCE=status` | `status,probe` |")
    print("|---|---:|---:|")
    for name, values in rows:
        print(f"| {name} | {values['status']} | {values['status,probe']} |")
    total = sum(t.decisions for t in (*results.values(), *flood.values()))
    wall = sum(t.wall for t in (*results.values(), *flood.values()))
    print(f"\n{total} decisions replayed in {wall:.1f} s of wall time. Command: "
          f"python tests/benchmarks/bench_probe.py{' --quick' if quick else ''}")


if __name__ == "__main__":
    main(sys.argv[1:])
