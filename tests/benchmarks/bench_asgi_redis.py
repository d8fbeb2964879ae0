"""How long the ASGI event loop is held by the fallback's Redis calls during an outage, before/now.

    .venv/bin/python tests/benchmarks/bench_asgi_redis.py            # Markdown table (~1 min)
    .venv/bin/python tests/benchmarks/bench_asgi_redis.py --quick    # fewer rounds

In fleet mode a protected request during an outage asks the fleet's Redis: an ``open`` route the
outage rate limit (its test, then its count: two round trips), a ``fallback`` route that and the
used-solution claim (three). Each row sends a burst of 200 concurrent such requests through
FailOpenMiddleware on one event loop, every one admitted (each from its own client address, so
none reaches the rate; each ``fallback`` one with a solution of its own in ``X-Altcha``), while
a heartbeat task on the same loop records the longest gap between its turns: how long every
other request of that worker waited. Also requests per second for the whole burst.

"Before" is failopen's path until now, the gate's Redis calls made on the event loop (the sync
gate, ``Guard.bypass``: selected by telling the gate that nothing of it blocks); "now" hands them
to the fallback's pool of ``HANDOFF_THREADS`` threads (:mod:`failopen.fallback.handoff`). Both
variants alternate in every round; the figures are medians of the rounds. Redis is a real
``redis-server`` on a free loopback port:

- none: the rate limit and the used solutions in memory (not fleet mode), the floor: what the
  burst itself holds the loop for, with no Redis call to make (and no hand-off either way);
- local: asked directly;
- slow: through a proxy (its own process) that holds each reply 2 ms, as a Redis on another
  host or a busy one would;
- frozen: stopped with SIGSTOP for the burst, as a Redis that hangs: each link's first call waits
  its timeout (0.1 s), then skips Redis for a second and counts in memory.

Pinned: ``FAILOPEN_OUTAGE_RATE=20/minute`` (the default), ``/open`` ``open`` and ``/fallback``
``fallback`` (ALTCHA, cost 1,000: the server's check is one hash whatever the cost), the store
the redis-server (fleet mode), the links' timeout 0.1 s (the default), enforcement off by an
override. Needs ``redis-server`` on PATH.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from _loop_watch import LoopWatch
from _servers import free_port
from bench_fallback import redis_server
from failopen.integrations.asgi import FailOpenMiddleware

from failopen import Config, FailOpen
from failopen.engine.outage import OutageGate
from failopen.fallback import (
    FallbackChallenges,
    MemoryUsedSolutions,
    OutageRateLimit,
    RedisUsedSolutions,
)
from failopen.fallback.handoff import HANDOFF_THREADS
from failopen.providers.verify import VerifyResult
from failopen.secret import Secret
from failopen.testing import FakeStatusPage, solve_challenge

BURST = 200
RATE = "20/minute"
COST = 1000
TIMEOUT = 0.1
DELAY = 0.002
SECRET = "bench-asgi-redis-" + "s" * 32
PREFIX = "failopen:"

# A TCP proxy in a process of its own (not on the measured loop, nor under its GIL) that holds
# every reply DELAY seconds.
PROXY = """
import socket, sys, threading, time
listen, upstream, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
def pipe(src, dst, wait):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if wait:
                time.sleep(wait)
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
server = socket.create_server(("127.0.0.1", listen))
print("ready", flush=True)
while True:
    client, _ = server.accept()
    up = socket.create_connection(("127.0.0.1", upstream))
    for s in (client, up):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=pipe, args=(client, up, 0), daemon=True).start()
    threading.Thread(target=pipe, args=(up, client, delay), daemon=True).start()
"""


@contextmanager
def slow_proxy(url: str) -> Iterator[str]:
    """The URL of a proxy in front of ``url``'s Redis that holds each reply DELAY seconds."""
    upstream = int(url.rsplit(":", 1)[1].split("/")[0])
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", PROXY, str(port), str(upstream), str(DELAY)],
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


class _NeverCalled:
    def verify(self, token: str) -> VerifyResult:
        raise AssertionError("enforcement is off: no verify call")

    async def averify(self, token: str) -> VerifyResult:
        raise AssertionError("enforcement is off: no verify call")


class Addresses:
    """A client address never used before: each request is its client's first."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"10.{self.n >> 16 & 255}.{self.n >> 8 & 255}.{self.n & 255}"


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def burst(app: Any, scopes: list[dict[str, Any]]) -> tuple[float, float, list[int]]:
    """The longest the loop was held (ms), requests per second, and every answer's status."""
    statuses: list[int] = []

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async with LoopWatch() as watch:
        started = time.perf_counter()
        await asyncio.gather(*(app(scope, receive, send) for scope in scopes))
        took = time.perf_counter() - started
    return watch.worst * 1e3, len(scopes) / took, statuses


def scope(path: str, client: str, solution: str | None) -> dict[str, Any]:
    headers = [(b"x-altcha", solution.encode())] if solution else []
    return {"type": "http", "method": "POST", "path": path, "root_path": "", "query_string": b"",
            "client": (client, 1), "http_version": "1.1", "headers": headers}


def main() -> int:
    rounds = 2 if "--quick" in sys.argv[1:] else 5
    logging.getLogger("failopen").setLevel(logging.CRITICAL)  # a frozen Redis is logged a lot
    logging.getLogger("failopen.audit").disabled = True
    with redis_server() as url:
        if url is None:
            print("redis-server is not on PATH: nothing to measure (apt-get install redis-server)")
            return 0
        with slow_proxy(url) as slow_url:
            return run(url, slow_url, rounds)


def run(url: str, slow_url: str, rounds: int) -> int:
    import redis

    page = FakeStatusPage()
    config = Config(status_url="https://status.test", protected_paths=("/open", "/fallback"),
                    store=url, outage_policy="open", outage_policy_routes="/fallback=fallback",
                    outage_rate=RATE, fallback_secret=SECRET, fallback_cost=COST,
                    fallback_ttl=600.0, poll_interval=3600.0)
    # Enforcement is off for the whole run: the verify call is never made.
    runtime = FailOpen(config, verifier=_NeverCalled(), status_transport=page.transport())
    runtime.flag.force_off("bench: vendor outage", ttl=3600)
    direct = redis.Redis.from_url(url)
    seconds, micros = direct.time()  # the fleet's record of used solutions began long ago
    direct.set(f"{PREFIX}fallback:since", str(seconds * 1000 + micros // 1000 - 600_000))
    gate = runtime.guard.gate
    app = FailOpenMiddleware(_app, runtime=runtime)
    challenges = FallbackChallenges(Secret(SECRET), cost=COST, ttl=600.0)
    pieces: dict[str, tuple[OutageRateLimit, MemoryUsedSolutions | RedisUsedSolutions]] = {
        # The floor: the same burst with nothing in Redis (no hand-off either way).
        "none (memory, not fleet mode)": (OutageRateLimit(RATE), MemoryUsedSolutions())}
    pieces.update({
        where: (OutageRateLimit(RATE, redis_url=where_url, prefix=PREFIX, timeout=TIMEOUT),
                RedisUsedSolutions(where_url, password=None, prefix=PREFIX, timeout=TIMEOUT,
                                   fallback=MemoryUsedSolutions()))
        for where, where_url in (("local", url), ("slow (+2 ms a reply)", slow_url),
                                 ("frozen (SIGSTOP)", url))})
    redis_pid = int(direct.info("server")["process_id"])
    addresses = Addresses()
    rows: dict[tuple[str, str], dict[str, list[tuple[float, float]]]] = {}
    for _ in range(rounds):
        for where, (rate, used) in pieces.items():
            for route in ("open", "fallback"):
                for variant in ("before", "now"):
                    scopes = [scope(f"/{route}", addresses(),
                                    solve_challenge(challenges.issue()) if route == "fallback"
                                    else None) for _ in range(BURST)]
                    held, per_second = measure(app, gate, rate, used, scopes, variant,
                                               redis_pid if where.startswith("frozen") else None)
                    rows.setdefault((where, route), {}).setdefault(variant, []).append(
                        (held, per_second))
    runtime.stop()
    for rate, used in pieces.values():
        rate.close()
        getattr(used, "close", lambda: None)()
    direct.close()
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}; {BURST} concurrent requests a burst, medians of {rounds} "
          f"rounds; hand-off pool {HANDOFF_THREADS} threads\n")
    print("| Redis | route | loop held before ms | loop held now ms | before/now | "
          "req/s before | req/s now | now/before |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (where, route), by in rows.items():
        held_b = statistics.median(h for h, _ in by["before"])
        held_n = statistics.median(h for h, _ in by["now"])
        rps_b = statistics.median(r for _, r in by["before"])
        rps_n = statistics.median(r for _, r in by["now"])
        print(f"| {where} | `{route}` | {held_b:,.1f} | {held_n:,.2f} | "
              f"{held_b / held_n:,.0f}× | {rps_b:,.0f} | {rps_n:,.0f} | {rps_n / rps_b:.2f}× |")
    return 0


def measure(app: Any, gate: OutageGate, rate: OutageRateLimit,
            used: MemoryUsedSolutions | RedisUsedSolutions, scopes: list[dict[str, Any]],
            variant: str, frozen: int | None) -> tuple[float, float]:
    gate.rate, gate.used = rate, used
    for link in (rate.link, getattr(used, "link", None)):
        if link is not None:  # each burst finds Redis usable, as a fresh one would
            link._skip_until = float("-inf")
    if variant == "before":
        gate.blocks = lambda policy: False  # type: ignore[method-assign]  # the sync path, on the loop
    else:
        gate.__dict__.pop("blocks", None)
    if frozen is not None:
        os.kill(frozen, signal.SIGSTOP)
    try:
        held, per_second, statuses = asyncio.run(burst(app, scopes))
    finally:
        if frozen is not None:
            os.kill(frozen, signal.SIGCONT)
    # Every request admitted: the figures are those of the path they name.
    assert statuses == [204] * len(scopes), sorted(set(statuses))
    return held, per_second


if __name__ == "__main__":
    raise SystemExit(main())
