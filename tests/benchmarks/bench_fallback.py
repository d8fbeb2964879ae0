"""Server cost of a fallback request: what each step of the outage fallback costs the server.

    .venv/bin/python tests/benchmarks/bench_fallback.py           # Markdown table (about 1 min)
    .venv/bin/python tests/benchmarks/bench_fallback.py --quick   # fewer calls, for a look

Microseconds per request, side by side in one run, each the median of several rounds of a
loop timed with ``time.perf_counter_ns`` (wall) and ``time.thread_time_ns`` (this thread's CPU:
not the time spent waiting for Redis, for a core or for the GIL; on a shared machine the wall
figure moves with the load, the CPU one much less). The loop's own cost, ~0.1 µs a turn, is
included:

- challenge issue (``FallbackChallenges.issue``, what ``GET <prefix>/challenge`` does);
- solution check of a valid solution (``FallbackChallenges.check``: HMAC, one SHA-256, the salt);
- used-solution claim, in memory and in a real ``redis-server`` on a free loopback port; and in
  a memory record that is full, where each claim forgets one solution (issue 31, item 5);
- outage rate limit, ``test`` then ``hit`` as the gate calls them on a fallback route (an open
  route's request asks only ``hit``), in memory and in Redis;
- the whole ``Guard.decide`` with the flag off: a ``fallback`` route with a fresh valid solution
  (rate limit, check, claim, audit), the same without the rate limit, an ``open`` route with the
  default rate limit, and an ``open`` route with no rate limit (the decision before issue 20);
  in memory, and in fleet mode (``FAILOPEN_STORE`` the Redis: used solutions and the rate limit
  shared there).

Every request is admitted: each solution is used once, and the clients are spread over enough
addresses that none reaches the default ``20/minute``. The solutions are found ahead of time for
challenges of cost 1,000: the server's check is one hash whatever the cost, so the figures hold
for the default 100,000. The audit logger is disabled, as in ``bench_core.py``. Redis rows need
``redis-server`` on PATH; without it they say so and the memory rows still run.
"""

from __future__ import annotations

import argparse
import base64
import gc
import hashlib
import json
import logging
import math
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from failopen import Config, FailOpen
from failopen.fallback import (
    FallbackChallenges,
    MemoryUsedSolutions,
    OutageRateLimit,
    RedisUsedSolutions,
)
from failopen.secret import Secret
from failopen.testing import free_port

SECRET = "bench-secret-of-at-least-thirty-two-characters"
SOLVE_COST = 1_000  # the check is one hash whatever the cost: cheap to prepare, same to check
GOAL_US = 100.0
HITS = 4  # requests per client address in a round
#: The full used-solution record's size in its row (the default is 100,000: a heap's depth more
#: or less, the same work a claim).
FULL_ENTRIES = 1_000
#: Issue times of the full record's solutions: an hour ahead, so all are unexpired.
BASE = time.time() + 3600 - 300


def _solve(challenge: dict[str, Any]) -> str:
    """The payload for ``challenge``: a tight loop (the salt hashed once, its state copied)."""
    salt, target = str(challenge["salt"]), bytes.fromhex(str(challenge["challenge"]))
    base = hashlib.sha256(salt.encode())
    for number in range(int(challenge["maxnumber"]) + 1):
        state = base.copy()
        state.update(str(number).encode())
        if state.digest() == target:
            solved = {**challenge, "number": number}
            solved.pop("maxnumber")
            return base64.b64encode(json.dumps(solved).encode()).decode("ascii")
    raise ValueError("unsolvable challenge")


class Timing(NamedTuple):
    """µs per call: ``wall`` (``perf_counter_ns``) and ``cpu``, this thread's own CPU time
    (``thread_time_ns``: not the time it waited for Redis, for a core, or for the GIL)."""

    wall: float
    cpu: float


def _us_per_call(make: Callable[[int], Callable[[], object]], calls: int,
                 rounds: int) -> Timing:
    """Medians over ``rounds`` of the mean µs per call; ``make(round)`` builds a fresh call for
    each round (its own inputs, so a single-use step never sees an input twice)."""
    walls, cpus = [], []
    for number in range(rounds):
        call = make(number)
        gc.collect()
        gc.disable()
        cpu, start = time.thread_time_ns(), time.perf_counter_ns()
        for _ in range(calls):
            call()
        walls.append((time.perf_counter_ns() - start) / calls / 1000)
        cpus.append((time.thread_time_ns() - cpu) / calls / 1000)
        gc.enable()
    return Timing(statistics.median(walls), statistics.median(cpus))


def _cycle(items: Sequence[Any]) -> Callable[[], Any]:
    """Each call the next item (a list iterator's ``__next__``: no index arithmetic)."""
    return iter(items).__next__


def _clients(block: int, count: int) -> list[str]:
    """``count`` requests' client addresses for round ``block``: each address HITS times (a
    client retrying), and new addresses every round, so no address nears 20/minute."""
    first = block * (count // HITS + 1)
    return [f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"
            for n in (first + i // HITS for i in range(count))]


@contextmanager
def redis_server() -> Iterator[str | None]:
    """A redis-server on a free loopback port (nothing saved), its URL; None without one."""
    server = shutil.which("redis-server")
    if server is None:
        yield None
        return
    import redis

    port = free_port()
    with tempfile.TemporaryDirectory() as directory:
        proc = subprocess.Popen(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", directory,
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client = redis.Redis(port=port)
            for _ in range(500):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.02)
            client.close()
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(10)


def bench(calls: int, rounds: int,
          redis_url: str | None) -> list[tuple[str, Timing, float | None]]:
    """(step, µs in memory, µs with Redis) per row: None where Redis plays no part, NaN when
    there is no redis-server to measure it."""
    logging.getLogger("failopen").setLevel(logging.CRITICAL)  # no paced WARNING mid-loop
    audit = logging.getLogger("failopen.audit")
    audit.setLevel(logging.CRITICAL)
    audit.propagate = False
    challenges = FallbackChallenges(Secret(SECRET), cost=100_000, ttl=300)
    rows: list[tuple[str, Timing, float | None]] = []

    rows.append(("challenge issue (`FallbackChallenges.issue`)",
                 _us_per_call(lambda _r: challenges.issue, calls, rounds), None))

    cheap = FallbackChallenges(Secret(SECRET), cost=SOLVE_COST, ttl=300)
    payload = _solve(cheap.issue())
    assert cheap.check(payload, issued_after=0).ok
    rows.append(("solution check, valid (`FallbackChallenges.check`)",
                 _us_per_call(lambda _r: lambda: cheap.check(payload, issued_after=0),
                              calls, rounds), None))

    expires = time.time() + 3600
    # Claim keys as check() makes them: a SHA-256 hex digest each, new every call.
    def keys(count: int) -> list[str]:
        return [secrets.token_hex(32) for _ in range(count)]

    def memory_claim(_round: int) -> Callable[[], object]:
        used, key = MemoryUsedSolutions(max_entries=calls + 1), _cycle(keys(calls))
        return lambda: used.claim(key(), expires)

    redis_calls = max(200, calls // 10)  # a loopback round trip each: fewer calls, same median
    redis_claim_us = math.nan  # nan: a Redis row, without a redis-server to measure it
    if redis_url is not None:
        def redis_claim(number: int) -> Callable[[], object]:
            used = RedisUsedSolutions(redis_url, password=None, prefix=f"bench{number}:",
                                      fallback=MemoryUsedSolutions())
            key = _cycle(keys(redis_calls))
            return lambda: used.claim(key(), expires)

        redis_claim_us = _us_per_call(redis_claim, redis_calls, rounds).wall
    rows.append(("used-solution claim (`claim`)", _us_per_call(memory_claim, calls, rounds),
                 redis_claim_us))

    def memory_claim_full(_round: int) -> Callable[[], object]:
        """Memory full (issue 31, item 5): each claim forgets the solution issued earliest.
        Issue times rise by a microsecond a claim, as a flood's do; every claim is admitted."""
        used = MemoryUsedSolutions(max_entries=FULL_ENTRIES)
        issued = iter(range(calls + FULL_ENTRIES)).__next__
        for held in keys(FULL_ENTRIES):
            used.claim(held, expires, issued_at=BASE + issued() / 1e6)
        key = _cycle(keys(calls))

        def claim() -> None:
            if not used.claim(key(), expires, issued_at=BASE + issued() / 1e6):
                raise AssertionError("refused: the benchmark measures admissions")
        return claim

    rows.append((f"used-solution claim, memory full ({FULL_ENTRIES:,} held: forgets one a claim)",
                 _us_per_call(memory_claim_full, calls, rounds), None))

    def rate_call(limit: OutageRateLimit, number: int, count: int) -> Callable[[], object]:
        client = _cycle(_clients(number, count))

        def test_and_hit() -> None:
            who = client()
            if limit.test(who, "/signup") is not None:
                raise AssertionError("over the limit: the benchmark measures admissions")
            limit.hit(who, "/signup")
        return test_and_hit

    # One limiter for all rounds, as a process keeps one: it holds every round's addresses.
    redis_rate_us = math.nan
    if redis_url is not None:
        shared = OutageRateLimit("20/minute", redis_url=redis_url, prefix="bench:")
        redis_rate_us = _us_per_call(lambda number: rate_call(shared, number, redis_calls),
                                     redis_calls, rounds).wall
        shared.close()
    memory = OutageRateLimit("20/minute")
    rows.append(("outage rate limit, `test` + `hit` (20/minute)",
                 _us_per_call(lambda number: rate_call(memory, number, calls), calls, rounds),
                 redis_rate_us))

    rows += _decisions(calls, rounds, redis_url)
    return rows


def _runtime(**settings: Any) -> FailOpen:
    fo = FailOpen(Config(verify_url="http://127.0.0.1:9/verify", private_key="k",
                         protected_paths=("/login", "/signup"), **settings))
    fo.flag.force_off("benchmark")
    fo.ensure_started()
    return fo


def _decisions(calls: int, rounds: int,
               redis_url: str | None) -> list[tuple[str, Timing, float | None]]:
    """The whole ``Guard.decide`` with the flag off, per route policy: in memory, and in fleet
    mode (``FAILOPEN_STORE`` the Redis, so used solutions and the rate limit are shared)."""
    redis_calls = max(200, calls // 10)
    # A fresh solution for every call of every round, each used once; the addresses as for the
    # rate limit: every request is admitted.
    needed = 2 * (calls * rounds + (redis_calls * rounds if redis_url is not None else 0))
    print(f"solving {needed:,} challenges of cost {SOLVE_COST:,} for the fallback decisions ...",
          file=sys.stderr)

    def runtimes(**store: Any) -> tuple[FailOpen, FailOpen, FailOpen, FailOpen]:
        fallback = {"outage_policy_routes": "/signup=fallback", "fallback_secret": SECRET,
                    "fallback_cost": SOLVE_COST, **store}
        # The default rate written out: Config counts a value it is given (or refuses to start
        # without ``limits``), where the implicit default would turn off with a warning.
        return (_runtime(outage_rate="20/minute", **fallback),
                _runtime(outage_rate="none", **fallback),
                _runtime(outage_rate="20/minute", **store), _runtime(outage_rate="none", **store))

    def fallback_decide(fo: FailOpen, count: int) -> Callable[[int], Callable[[], object]]:
        issuer, guard = fo.challenges, fo.guard
        assert issuer is not None

        def make(number: int) -> Callable[[], object]:
            client = _cycle(_clients(number, count))
            solution = _cycle([_solve(issuer.issue()) for _ in range(count)])

            def decide() -> None:
                d = guard.decide(None, path="/signup", client=client(), policy="fallback",
                                 route="/signup", solution=solution())
                if d.outcome != "bypassed_fallback":
                    raise AssertionError(f"not admitted: {d.outcome} {d.reason}")
            return decide
        return make

    def open_decide(fo: FailOpen, count: int) -> Callable[[int], Callable[[], object]]:
        def make(number: int) -> Callable[[], object]:
            client, guard = _cycle(_clients(number, count)), fo.guard

            def decide() -> None:
                d = guard.decide(None, path="/login", client=client(), route="/login")
                if d.outcome != "bypassed_flag_off":
                    raise AssertionError(f"not admitted: {d.outcome} {d.reason}")
            return decide
        return make

    memory = runtimes()
    shared = runtimes(store=redis_url) if redis_url is not None else None
    kinds = (fallback_decide, fallback_decide, open_decide, open_decide)
    local = [_us_per_call(kind(fo, calls), calls, rounds)
             for kind, fo in zip(kinds, memory, strict=True)]
    fleet = [math.nan] * 4
    if shared is not None:
        fleet = [_us_per_call(kind(fo, redis_calls), redis_calls, rounds).wall
                 for kind, fo in zip(kinds, shared, strict=True)]
    for fo in (*memory, *(shared or ())):
        fo.stop()
    names = ("**`Guard.decide`, `fallback` route, flag off** (rate limit + check + claim)",
             "`Guard.decide`, `fallback` route, flag off, no rate limit (check + claim)",
             "`Guard.decide`, `open` route, flag off, default rate limit (20/minute)",
             "`Guard.decide`, `open` route, flag off, no rate limit (`none`)")
    return list(zip(names, local, fleet, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    args = parser.parse_args(argv)
    calls, rounds = (500, 3) if args.quick else (4_000, 7)
    with redis_server() as url:
        rows = bench(calls, rounds, url)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    redis_calls = max(200, calls // 10)
    print(f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores "
          f"(load average {load}), {rounds} rounds of {calls:,} calls (Redis: {redis_calls:,}), "
          "median µs per request\n")
    quick = " --quick" if args.quick else ""
    print(f"`.venv/bin/python tests/benchmarks/bench_fallback.py{quick}`\n")
    print("| server step, per request | memory: wall | memory: CPU | Redis (loopback): wall |")
    print("|---|---:|---:|---:|")
    for name, memory, redis_us in rows:
        shown = "—" if redis_us is None else "no redis-server" if math.isnan(redis_us) \
            else f"{redis_us:.1f} µs"
        print(f"| {name} | {memory.wall:.1f} µs | {memory.cpu:.1f} µs | {shown} |")
    whole = next(timing for name, timing, _redis in rows if "`fallback` route" in name)
    print(f"\nGoal: the whole fallback check under {GOAL_US:.0f} µs in memory: "
          f"{whole.wall:.1f} µs wall ({'met' if whole.wall < GOAL_US else 'NOT met'}), "
          f"{whole.cpu:.1f} µs CPU ({'met' if whole.cpu < GOAL_US else 'NOT met'}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
