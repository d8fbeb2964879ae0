"""ASGI benchmark: what FailOpenMiddleware costs a request, in-process and under uvicorn.

    python tests/benchmarks/bench_asgi.py            # prints Markdown tables
    python tests/benchmarks/bench_asgi.py --quick    # fewer rounds, shorter load runs
    python tests/benchmarks/bench_asgi.py --instructions  # + callgrind's instruction ratios

1. Microseconds per request, driven straight into the ASGI callable (no sockets), interleaved
   round by round so every variant sees the same machine: a bare Starlette app; the app behind
   FailOpenMiddleware; and behind a BaseHTTPMiddleware doing the same job the way users usually
   write it (``await request.body()``, ``call_next``). Two routes: ``GET /health`` (not protected)
   and ``POST /login`` with a urlencoded log-in form and no token while the flag is forced off
   (the bypass path, audit log disabled as in bench_core.py).
2. Requests per second under uvicorn (one worker, access log off) on ``GET /health``: bare,
   wrapped, and behind the usual BaseHTTPMiddleware. The servers run at once and are loaded in
   turn, in alternating order, so a neighbour's load or a clock change hits all alike; each ratio
   is the median over runs of this run / the bare run next to it. The server's CPU time per
   request is shown too: it is what a middleware adds to. ``wrk`` when it is installed
   (``apt-get install wrk``), else a bounded Python load loop. With two or more cores the servers
   and the load generator are pinned to different cores.
3. With ``--instructions`` (needs ``valgrind``): instructions per in-process request counted by
   callgrind, bare and behind FailOpenMiddleware, on both routes (see ``_callgrind.py``): the
   same ratio as 1., unmoved by the load of a shared machine. Goal on ``GET /health``: ≤ 1.02.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _callgrind
from _servers import cpu_seconds, free_port, pin
from failopen.integrations.asgi import FailOpenMiddleware
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from failopen import Config, FailOpen
from failopen.web import rejection_headers, rejection_payload, token_from_body

HERE = Path(__file__).resolve().parent
FORM = b"username=ann%40example.com&password=correct+horse+battery+staple&remember=on"


# --- the apps ------------------------------------------------------------------------------------


async def health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def login(request: Request) -> JSONResponse:
    decision = getattr(request.state, "failopen", None)
    await request.body()
    return JSONResponse({"ok": True, "bypassed": bool(decision and decision.bypassed)})


def make_bare() -> Starlette:
    """The app without failopen (also a uvicorn ``--factory``)."""
    return Starlette(routes=[Route("/health", health), Route("/login", login, methods=["POST"])])


def bench_config() -> Config:
    # No status URL: no watcher polling in the background; the verify URL is never called. No
    # outage rate limit: every in-process request comes from one address, and the default
    # 20/minute would answer 429 after the 20th (bench_core.py measures the limit's cost).
    return Config(verify_url="http://127.0.0.1:9/verify", private_key="bench-key",
                  protected_paths=("/login",), outage_rate="none")


def make_wrapped() -> FailOpenMiddleware:
    """The app behind FailOpenMiddleware (also a uvicorn ``--factory``)."""
    return FailOpenMiddleware(make_bare(), config=bench_config())


class UsualMiddleware(BaseHTTPMiddleware):
    """The same job done the way it is usually written: BaseHTTPMiddleware and call_next."""

    def __init__(self, app: Any, runtime: FailOpen) -> None:
        super().__init__(app)
        self.runtime = runtime

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        config = self.runtime.config
        if config.is_protected(request.method, request.url.path):
            token = request.headers.get(config.token_header)
            if token is None:
                body = await request.body()
                token = token_from_body(request.headers.get("content-type"), body,
                                        config.token_field)
            client = request.client.host if request.client else ""
            decision = await self.runtime.adecide(token, path=request.url.path, client=client)
            request.state.failopen = decision
            if not decision.allow:
                return JSONResponse(rejection_payload(decision), status_code=decision.status_code,
                                    headers=dict(rejection_headers(decision, json_body=True)))
        return await call_next(request)


def make_usual() -> Starlette:
    """The app behind the usual BaseHTTPMiddleware (also a uvicorn ``--factory``)."""
    app = make_bare()
    app.add_middleware(UsualMiddleware, runtime=FailOpen(bench_config()))
    return app


# --- 1. in-process -------------------------------------------------------------------------------


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "headers": headers, "client": ("192.0.2.1", 50000),
            "server": ("bench", 80)}


async def _requests(app: Any, method: str, path: str, body: bytes, count: int) -> float:
    headers = [(b"host", b"bench")]
    if body:
        headers += [(b"content-type", b"application/x-www-form-urlencoded"),
                    (b"content-length", str(len(body)).encode())]
    template = _scope(method, path, headers)
    statuses: list[int] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    start = time.perf_counter_ns()
    for _ in range(count):
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                await asyncio.sleep(3600)  # a real server waits for a disconnect
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(dict(template), receive, send)
    elapsed = time.perf_counter_ns() - start
    assert set(statuses) == {200}, statuses[:3]
    return elapsed / count / 1000


def bench_in_process(rounds: int, count: int) -> list[tuple[str, str, float]]:
    audit = logging.getLogger("failopen.audit")
    audit.addHandler(logging.NullHandler())
    audit.propagate = False
    audit.setLevel(logging.CRITICAL)
    logging.getLogger("failopen").setLevel(logging.CRITICAL)
    runtime = FailOpen(bench_config())
    runtime.flag.force_off("benchmark")
    variants: dict[str, Any] = {
        "bare Starlette": make_bare(),
        "FailOpenMiddleware": FailOpenMiddleware(make_bare(), runtime=runtime),
        "BaseHTTPMiddleware (usual)": Starlette(routes=make_bare().routes),
    }
    variants["BaseHTTPMiddleware (usual)"].add_middleware(UsualMiddleware, runtime=runtime)
    routes = [("GET /health (not protected)", "GET", "/health", b""),
              ("POST /login, form, no token, flag off", "POST", "/login", FORM)]
    samples: dict[tuple[str, str], list[float]] = {}

    async def run() -> None:
        for app in variants.values():  # warm-up
            for _, method, path, body in routes:
                await _requests(app, method, path, body, 200)
        names = list(variants)
        for round_ in range(rounds):
            for route, method, path, body in routes:
                for name in names if round_ % 2 == 0 else names[::-1]:
                    app = variants[name]
                    gc.collect()
                    gc.disable()
                    try:
                        micros = await _requests(app, method, path, body, count)
                    finally:
                        gc.enable()
                    samples.setdefault((route, name), []).append(micros)

    asyncio.run(run())
    runtime.stop()
    return [(route, name, statistics.median(values)) for (route, name), values in samples.items()]


async def _plain_asgi(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def bench_own_cost(rounds: int, count: int) -> tuple[float, float]:
    """µs per request of a two-message ASGI app, alone and behind FailOpenMiddleware."""
    apps = [_plain_asgi, FailOpenMiddleware(_plain_asgi, config=bench_config())]
    samples: list[list[float]] = [[], []]

    async def run() -> None:
        for round_ in range(rounds):
            for index in (0, 1) if round_ % 2 == 0 else (1, 0):
                gc.collect()
                gc.disable()
                try:
                    micros = await _requests(apps[index], "GET", "/health", b"", count * 4)
                finally:
                    gc.enable()
                samples[index].append(micros)

    asyncio.run(run())
    return statistics.median(samples[0]), statistics.median(samples[1])


# --- 2. under uvicorn ----------------------------------------------------------------------------




def _serve(factory: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    process = subprocess.Popen(
        [*pin(0), sys.executable, "-m", "uvicorn", "--factory", f"bench_asgi:{factory}",
         "--app-dir", str(HERE), "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", "--no-access-log"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError(f"uvicorn {factory} did not start") from None
            time.sleep(0.05)
    return process, f"http://127.0.0.1:{port}/health"


def _wrk(url: str, seconds: float) -> tuple[float, int]:
    out = subprocess.run(
        [*pin(1), "wrk", "-t1", "-c32", f"-d{seconds:g}s", url],
        check=True, capture_output=True, text=True,
    ).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    rps = next(line for line in out.splitlines() if line.startswith("Requests/sec:"))
    done = next(line for line in out.splitlines() if " requests in " in line)
    return float(rps.split()[1]), int(done.split()[0])


def _python_load(url: str, seconds: float) -> tuple[float, int]:
    """A bounded load loop: 8 keep-alive connections for ``seconds``; requests/s and count."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    stop = time.monotonic() + seconds
    counts: list[int] = []

    def worker() -> None:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        done = 0
        while time.monotonic() < stop:
            connection.request("GET", parts.path)
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"status {response.status}")
            done += 1
        connection.close()
        counts.append(done)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.monotonic() - started), sum(counts)



def bench_uvicorn(runs: int, seconds: float) -> tuple[str, dict[str, list[tuple[float, float]]]]:
    """All servers up at once, loaded in turn (alternating order): other load hits all alike.

    Each run gives requests/s and the server's CPU time per request.
    """
    load: Callable[[str, float], tuple[float, int]] = (
        _wrk if shutil.which("wrk") else _python_load)
    tool = "wrk -t1 -c32" if load is _wrk else "Python loop, 8 keep-alive connections"
    factories = ["make_bare", "make_wrapped", "make_usual"]
    servers = {factory: _serve(factory) for factory in factories}
    results: dict[str, list[tuple[float, float]]] = {factory: [] for factory in factories}
    try:
        for _, url in servers.values():
            load(url, 1.0)  # warm-up
        for run in range(runs):
            for factory in factories if run % 2 == 0 else factories[::-1]:
                process, url = servers[factory]
                cpu = cpu_seconds(process.pid)
                rps, done = load(url, seconds)
                cpu_us = (cpu_seconds(process.pid) - cpu) / done * 1e6
                results[factory].append((rps, cpu_us))
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(10)
    return tool, results


ONE_ROUTES = {"health": ("GET", "/health", b""), "login": ("POST", "/login", FORM)}


def one(variant: str, key: str, count: int) -> None:
    """``--one``: warm up, then ``count`` in-process requests of one variant on one route (for
    callgrind): ``bare`` Starlette or ``failopen`` (the flag forced off, as in 1.)."""
    logging.getLogger("failopen").setLevel(logging.CRITICAL)
    runtime = FailOpen(bench_config())
    runtime.flag.force_off("benchmark")
    app = make_bare() if variant == "bare" else FailOpenMiddleware(make_bare(), runtime=runtime)
    method, path, body = ONE_ROUTES[key]

    async def run() -> None:
        await _requests(app, method, path, body, 200)
        if count:
            await _requests(app, method, path, body, count)

    asyncio.run(run())
    runtime.stop()


def instructions() -> None:
    """Per route, callgrind's instructions per in-process request, bare and failopen."""
    if not _callgrind.available():
        print("\n(--instructions: valgrind is not installed; apt-get install valgrind)")
        return
    count = 5000
    print(f"\ncallgrind, in-process, instructions per request ({count:,} requests minus none):\n")
    print("| route | bare Starlette | FailOpenMiddleware | × bare |")
    print("|---|---:|---:|---:|")
    for key, label in (("health", "`GET /health` (not protected)"),
                       ("login", "`POST /login`, form, no token, flag off")):
        bare, ours = (_callgrind.per_request(Path(__file__), variant, key, count)
                      for variant in ("bare", "failopen"))
        print(f"| {label} | {bare:,.0f} | {ours:,.0f} | {ours / bare:.3f} |")


def main() -> int:
    if "--one" in sys.argv:
        at = sys.argv.index("--one")
        one(sys.argv[at + 1], sys.argv[at + 2], int(sys.argv[sys.argv.index("--count") + 1]))
        return 0
    quick = "--quick" in sys.argv[1:]
    rounds, count = (3, 2000) if quick else (7, 5000)
    runs, seconds = (4, 2.0) if quick else (12, 3.0)
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, median of {rounds} rounds "
          f"of {count:,} requests\n")
    rows = bench_in_process(rounds, count)
    bare = {route: micros for route, name, micros in rows if name == "bare Starlette"}
    print("| in-process, per request | route | µs | × bare |")
    print("|---|---|---:|---:|")
    for route, name, micros in rows:
        print(f"| {name} | {route} | {micros:.1f} | {micros / bare[route]:.2f} |")
    alone, wrapped = bench_own_cost(rounds, count)
    print(f"\nWhat the middleware itself adds to a request it does not guard: "
          f"{(wrapped - alone) * 1000:,.0f} ns ({alone:.2f} µs for a bare two-message ASGI app, "
          f"{wrapped:.2f} µs behind FailOpenMiddleware).")
    tool, results = bench_uvicorn(runs, seconds)
    print(f"\nuvicorn, 1 worker, GET /health (not protected), {tool}, {runs} runs of "
          f"{seconds:g} s each, alternating order; medians; ratios are medians of paired runs\n")
    bare_runs = results["make_bare"]
    print("| app | requests/s | × bare | server CPU µs per request | bare ÷ this |")
    print("|---|---:|---:|---:|---:|")
    for name, factory in (("bare Starlette", "make_bare"),
                          ("FailOpenMiddleware", "make_wrapped"),
                          ("BaseHTTPMiddleware (usual)", "make_usual")):
        runs_ = results[factory]
        pairs = list(zip(runs_, bare_runs, strict=True))
        rps_ratio = statistics.median(r[0] / b[0] for r, b in pairs)
        cpu_ratio = statistics.median(b[1] / r[1] for r, b in pairs)
        rps = statistics.median(r for r, _ in runs_)
        micros = statistics.median(c for _, c in runs_)
        print(f"| {name} | {rps:,.0f} | {rps_ratio:.3f} | {micros:.1f} | {cpu_ratio:.3f} |")
    print("\nrequests/s per run: " + "; ".join(
        f"{factory}: {', '.join(f'{r:,.0f}' for r, _ in runs_)}"
        for factory, runs_ in results.items()))
    if "--instructions" in sys.argv[1:]:
        instructions()
    return 0


if __name__ == "__main__":
    sys.exit(main())
