"""Django benchmark: requests/s of the example site with and without FailOpenMiddleware.

    python tests/benchmarks/bench_django.py              # prints Markdown tables (~7 min)
    python tests/benchmarks/bench_django.py --quick      # fewer rounds, shorter load runs
    python tests/benchmarks/bench_django.py --servers    # only the real-server table
    python tests/benchmarks/bench_django.py --in-process # only the in-process table
    python tests/benchmarks/bench_django.py --in-process --instructions  # + callgrind's ratios

The example site (``examples/django_site``) is served in-process by Django's own WSGIHandler and
ASGIHandler, bare (FailOpenMiddleware removed from MIDDLEWARE) and with the middleware, on two
routes: ``GET /`` (not protected: the log-in form) and ``POST /login/`` (protected, with the
flag forced off, so every request is admitted as a bypass without a verify call; the outage rate
limit ``none``, as every request comes from one address). Runs of the two variants alternate
every 25 requests, so drift (CPU frequency, other load) hits both alike; the table shows the
median over the rounds and the ratio with/bare (goal: >= 0.97).

On the protected route the guard writes an audit record for every bypass (the operator's record
of who got in without a verified token); the last row shows the route with that logger disabled,
to tell the audit's cost from the middleware's.

After the in-process table, the same comparison under real servers, side by side in one run:
gunicorn (sync worker, ``-w 1``, no access log) serving ``django_site.wsgi`` and uvicorn (one
worker, ``--no-access-log``, log level warning) serving ``django_site.asgi``, each bare and with
the middleware (``django_bench_settings.py``: the example's settings, FailOpenMiddleware removed
when ``FAILOPEN_BENCH_BARE=1``; the audit lines go to a file), plus, for ``POST /login/``, one
with the middleware and the ``failopen.audit`` logger disabled. The flag is forced off the way an
operator does it, ``failopen override off --ttl 1h --store file:///...``, in a shared file store
every server reads; the test kit's fake status page and verify API serve the URLs. All six
servers run at once (pinned to one core, ``wrk -t1 -c16`` to the other when there are two) and
are loaded in turn, the order rotating and reversing run by run; the ratio is the median over
runs of with / the bare run of the same round. Every run must answer 200 only (wrk's non-2xx and
socket-error counts are 0, else it stops with wrk's output), and before and after the runs each
server must answer both routes with 200 and, with the middleware, a ``bypassed_flag_off``
decision. The server's CPU time per request (its worker's /proc stat, all threads) is shown too:
it is steadier than requests/s on a shared machine. Every server is stopped on the way out.

``--instructions`` (needs ``valgrind``) adds instructions per in-process ``GET /`` counted by
callgrind, bare and with the middleware, through WSGIHandler and ASGIHandler (see
``_callgrind.py``): the unprotected route's ratio, unmoved by the load of a shared machine
(goal: ≤ 1.02).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _callgrind
from _servers import cpu_seconds, free_port, pin

HERE = Path(__file__).resolve().parent
SITE = HERE.parents[1] / "examples" / "django_site"
ROUNDS = {"wsgi": 11, "asgi": 15}
REQUESTS = {"wsgi": 1000, "asgi": 300}
CHUNK = 25
ROUTES = (
    ("GET", "/", "`GET /` (not protected)", True),
    ("POST", "/login/", "`POST /login/` (protected, flag off)", True),
    ("POST", "/login/", "`POST /login/` (protected, flag off, audit log disabled)", False),
)
OURS = "failopen.integrations.django.middleware.FailOpenMiddleware"
CSRF = "a" * 32  # an unmasked CSRF secret: cookie and form field alike
FORM = f"csrfmiddlewaretoken={CSRF}&username=ann".encode()


def setup() -> tuple[Any, Any]:
    """Django configured from the example's settings, the fakes served, the flag forced off."""
    from failopen.testing import FakeStatusPage, FakeVerifyAPI

    page, verify = FakeStatusPage(), FakeVerifyAPI()
    servers = (page.serve(), verify.serve())
    for server in servers:
        server.start()
    os.environ.update({
        "FAILOPEN_STATUS_URL": page.url, "FAILOPEN_VERIFY_URL": verify.verify_url,
        "FAILOPEN_PRIVATE_KEY": verify.private_key, "FAILOPEN_PUBLIC_KEY": "bench-public-key",
        # Every request comes from one address: the default 20/minute would refuse all but the
        # first 20 log-ins with 429 instead of the bypass the rows name.
        "FAILOPEN_OUTAGE_RATE": "none",
    })
    sys.path.insert(0, str(SITE))
    os.environ["DJANGO_SETTINGS_MODULE"] = "django_site.settings"
    import django

    django.setup()
    # The bypass audit line per request is the operator's record; a benchmark only drops it.
    logging.getLogger("failopen").handlers.clear()
    logging.getLogger("failopen").addHandler(logging.NullHandler())
    logging.getLogger("failopen").propagate = False
    from failopen.integrations.django import conf

    conf.runtime().flag.force_off("benchmark: protected route with the flag off")
    return servers, conf


def handlers(kind: str) -> dict[str, Any]:
    """``{"bare": handler, "failopen": handler}`` for ``wsgi`` or ``asgi``."""
    from django.conf import settings
    from django.core.handlers.asgi import ASGIHandler
    from django.core.handlers.wsgi import WSGIHandler
    from django.test import override_settings

    make = WSGIHandler if kind == "wsgi" else ASGIHandler
    built = {"failopen": make()}
    assert OURS in settings.MIDDLEWARE
    with override_settings(MIDDLEWARE=[m for m in settings.MIDDLEWARE if m != OURS]):
        built["bare"] = make()
    return built


def wsgi_request(handler: Any, method: str, path: str) -> int:
    body = FORM if method == "POST" else b""
    environ = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000", "HTTP_HOST": "127.0.0.1", "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/x-www-form-urlencoded", "REMOTE_ADDR": "127.0.0.1",
        "HTTP_COOKIE": f"csrftoken={CSRF}",
    }
    status: list[str] = []
    response = handler(environ, lambda s, h: status.append(s))
    b"".join(response)
    response.close()
    return int(status[0][:3])


async def asgi_request(handler: Any, method: str, path: str) -> int:
    body = FORM if method == "POST" else b""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "scheme": "http", "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000),
        "headers": [(b"host", b"127.0.0.1"), (b"cookie", f"csrftoken={CSRF}".encode()),
                    (b"content-type", b"application/x-www-form-urlencoded"),
                    (b"content-length", str(len(body)).encode())],
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    started: list[int] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()
        return {}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            started.append(message["status"])

    await handler(scope, receive, send)
    return started[0]


def elapsed(run: Callable[[int], None], n: int) -> float:
    start = time.perf_counter()
    run(n)
    return time.perf_counter() - start


def bench(kind: str, loop: asyncio.AbstractEventLoop) -> list[tuple[str, str, float, float]]:
    built = handlers(kind)
    n = REQUESTS[kind]
    rows = []
    for method, path, label, audit in ROUTES:
        # Enabled, each bypass makes a log record (dropped by a NullHandler here): the guard
        # audits every request admitted without a verified token.
        logging.getLogger("failopen.audit").disabled = not audit
        def runner(handler: Any, method: str = method, path: str = path) -> Callable[[int], None]:
            if kind == "wsgi":
                def call_wsgi(count: int) -> None:
                    for _ in range(count):
                        assert wsgi_request(handler, method, path) == 200

                return call_wsgi

            async def many(count: int) -> None:
                for _ in range(count):
                    assert await asgi_request(handler, method, path) == 200

            def call_asgi(count: int) -> None:
                loop.run_until_complete(many(count))

            return call_asgi

        runs = {variant: runner(handler) for variant, handler in built.items()}
        for warm_up in runs.values():
            warm_up(n // 5)
        samples: dict[str, list[float]] = {variant: [] for variant in runs}
        for round_ in range(ROUNDS[kind]):
            # Alternate every CHUNK requests: load that comes and goes hits both variants alike.
            spent = dict.fromkeys(runs, 0.0)
            for chunk in range(n // CHUNK):
                order = list(runs) if (round_ + chunk) % 2 == 0 else list(reversed(runs))
                for variant in order:
                    spent[variant] += elapsed(runs[variant], CHUNK)
            for variant in runs:
                samples[variant].append(n // CHUNK * CHUNK / spent[variant])
        bare = statistics.median(samples["bare"])
        ours = statistics.median(samples["failopen"])
        rows.append((kind.upper(), label, bare, ours))
    return rows


def in_process(quick: bool) -> None:
    if quick:
        ROUNDS.update(wsgi=5, asgi=5)
    servers, conf = setup()
    import django

    loop = asyncio.new_event_loop()
    try:
        rows = bench("wsgi", loop) + bench("asgi", loop)
        loop.run_until_complete(conf.runtime().aclose())
    finally:
        loop.close()
        for server in servers:
            server.stop()
    print(f"Python {sys.version.split()[0]}, Django {django.__version__}; "
          f"rounds: WSGI {ROUNDS['wsgi']} x {REQUESTS['wsgi']}, ASGI {ROUNDS['asgi']} x "
          f"{REQUESTS['asgi']} requests, variants alternating every {CHUNK}; median "
          "requests/s; handlers called in-process\n")
    print("| handler | route | bare app | with FailOpenMiddleware | ratio |")
    print("|---|---|---:|---:|---:|")
    for kind, label, bare, ours in rows:
        print(f"| {kind} | {label} | {bare:,.0f} | {ours:,.0f} | {ours / bare:.3f} |")


# --- under real servers: gunicorn (WSGI) and uvicorn (ASGI) --------------------------------------

# "quiet": with FailOpenMiddleware, the failopen.audit logger disabled (POST only): tells the
# audit line's cost from the middleware's, like the in-process table's last row.
VARIANTS = ("bare", "failopen", "quiet")
SERVER_ROUTES = (
    ("GET", "/", "`GET /` (not protected)"),
    ("POST", "/login/", "`POST /login/` (protected, flag off)"),
)
CONNECTIONS = 16


def variants(method: str) -> tuple[str, ...]:
    """The servers loaded on a route: the audit-disabled one only where there is a bypass."""
    return VARIANTS if method == "POST" else VARIANTS[:2]





class Server:
    """One server process (gunicorn or uvicorn) serving the example site, bare or with failopen."""

    def __init__(self, kind: str, variant: str, env: dict[str, str], workdir: Path) -> None:
        self.kind, self.variant = kind, variant
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"{kind}-{variant}.log"
        self.audit = workdir / f"audit-{kind}-{variant}.log"
        env = {**env, "FAILOPEN_BENCH_AUDIT": "off" if variant == "quiet" else str(self.audit),
               "FAILOPEN_BENCH_BARE": "1" if variant == "bare" else "0"}
        bind = ["--bind", f"127.0.0.1:{self.port}"]
        if kind == "wsgi":
            # gunicorn writes no access log unless --access-logfile is given.
            command = [sys.executable, "-m", "gunicorn", "--worker-class", "sync", "--workers",
                       "1", "--log-level", "warning", "--error-logfile", "-",
                       "--no-control-socket", *bind,
                       "django_site.wsgi:application"]
        else:
            command = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port",
                       str(self.port), "--log-level", "warning", "--no-access-log",
                       "--lifespan", "off", "django_site.asgi:application"]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen([*pin(0), *command], env=env, cwd=SITE,
                                            stdout=log, stderr=subprocess.STDOUT)
        self.pid = self.process.pid  # the worker's, from X-Worker-Pid, once it answers

    def name(self) -> str:
        return f"{'gunicorn' if self.kind == 'wsgi' else 'uvicorn'} {self.variant}"

    def wait_ready(self, deadline: float) -> None:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"{self.name()} did not start:\n"
                                       f"{self.log.read_text(errors='replace')}") from None
                time.sleep(0.05)

    def check(self) -> None:
        """Both routes answer 200; the POST was (bare) not seen or (failopen) bypassed."""
        for method, path, _ in SERVER_ROUTES:
            request = urllib.request.Request(
                self.base + path, method=method, data=FORM if method == "POST" else None,
                headers={"Cookie": f"csrftoken={CSRF}",
                         "Content-Type": "application/x-www-form-urlencoded"})
            with urllib.request.urlopen(request, timeout=10) as response:
                body = response.read()
                if response.status != 200:
                    raise RuntimeError(f"{self.name()} {method} {path}: {response.status}")
                self.pid = int(response.headers["X-Worker-Pid"])
            if method == "POST":
                answer = json.loads(body)
                decision = answer["decision"]
                if self.variant == "bare" and decision is not None:
                    raise RuntimeError(f"{self.name()}: the bare app ran the middleware")
                if self.variant != "bare" and not (
                        answer["bypassed"] and decision["outcome"] == "bypassed_flag_off"):
                    raise RuntimeError(f"{self.name()}: not bypassed with the flag off: {answer}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _lua(workdir: Path, method: str) -> Path:
    """A wrk script sending the request like the in-process bench: CSRF cookie (+ form field)."""
    script = workdir / f"{method.lower()}.lua"
    lines = [f'wrk.method = "{method}"', f'wrk.headers["Cookie"] = "csrftoken={CSRF}"']
    if method == "POST":
        lines += [f'wrk.body = "{FORM.decode()}"',
                  'wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"']
    script.write_text("\n".join(lines) + "\n")
    return script


def _wrk(url: str, script: Path, seconds: float) -> tuple[float, int]:
    """requests/s and requests done; RuntimeError on any non-2xx answer or socket error."""
    result = subprocess.run(
        [*pin(1), "wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds:g}s", "-s", str(script), url],
        capture_output=True, text=True, timeout=seconds + 30,
    )
    out = result.stdout
    if result.returncode != 0 or "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk {url} saw errors (exit {result.returncode}):\n{out}"
                           f"{result.stderr}")
    rps = next(line for line in out.splitlines() if line.startswith("Requests/sec:"))
    done = next(line for line in out.splitlines() if " requests in " in line)
    return float(rps.split()[1]), int(done.split()[0])


def _run_cli(*args: str, env: dict[str, str]) -> str:
    """The real ``failopen`` command (the venv's script, else ``python -m failopen.cli``)."""
    script = Path(sys.executable).parent / "failopen"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "failopen.cli"]
    command += args
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"failopen {' '.join(args)}: exit {result.returncode}\n"
                           f"{result.stdout}{result.stderr}")
    return result.stdout.strip()


Sample = tuple[float, float]  # requests/s, server CPU µs per request


def bench_servers(runs: int, seconds: float) -> None:
    import django
    import gunicorn
    import uvicorn

    from failopen.testing import FakeStatusPage, FakeVerifyAPI

    # SIGTERM ends the run through the finally below (servers stopped), like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    page, verify = FakeStatusPage(), FakeVerifyAPI()
    fakes = (page.serve(), verify.serve())
    servers: dict[tuple[str, str], Server] = {}
    workdir = Path(tempfile.mkdtemp(prefix="failopen-bench-"))  # mode 0700: the store trusts it
    started = time.monotonic()
    try:
        for fake in fakes:
            fake.start()
        store = f"file://{workdir}/override.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
        env.update({
            "FAILOPEN_STATUS_URL": page.url, "FAILOPEN_VERIFY_URL": verify.verify_url,
            "FAILOPEN_PRIVATE_KEY": verify.private_key, "FAILOPEN_PUBLIC_KEY": "bench-public-key",
            "FAILOPEN_STORE": store, "FAILOPEN_OUTAGE_RATE": "none",  # as in setup()
            "DJANGO_SETTINGS_MODULE": "django_bench_settings",
            "PYTHONPATH": os.pathsep.join([str(SITE), str(HERE), env.get("PYTHONPATH", "")]),
        })
        override = _run_cli("override", "off", "--ttl", "1h", "--reason", "benchmark",
                            "--store", store, env=env)
        for kind in ("wsgi", "asgi"):
            for variant in VARIANTS:
                servers[kind, variant] = Server(kind, variant, env, workdir)
        deadline = time.monotonic() + 60
        for server in servers.values():
            server.wait_ready(deadline)
            server.check()
        scripts = {method: _lua(workdir, method) for method, _, _ in SERVER_ROUTES}
        combos = [(kind, method, path) for kind in ("wsgi", "asgi")
                  for method, path, _ in SERVER_ROUTES]
        for kind, method, path in combos:  # warm-up
            for variant in variants(method):
                _wrk(servers[kind, variant].base + path, scripts[method], 1.0)
        results: dict[tuple[str, str, str], list[Sample]] = {}
        requests_done: dict[tuple[str, str], int] = {}
        for run in range(runs):
            for index, (kind, method, path) in enumerate(combos):
                # Rotate the order run by run: each variant precedes and follows the others.
                shift = (run + index) % len(variants(method))
                order = variants(method)[shift:] + variants(method)[:shift]
                if (run + index) // len(variants(method)) % 2:
                    order = order[::-1]
                for variant in order:
                    server = servers[kind, variant]
                    cpu = cpu_seconds(server.pid)
                    rps, done = _wrk(server.base + path, scripts[method], seconds)
                    cpu_us = (cpu_seconds(server.pid) - cpu) / done * 1e6
                    results.setdefault((kind, path, variant), []).append((rps, cpu_us))
                    if method == "POST":
                        requests_done[kind, variant] = requests_done.get((kind, variant), 0) + done
        for server in servers.values():
            server.check()  # still up, still the same answers
        audit_lines = {key: _count_lines(servers[key].audit) for key in servers}
        log_errors = {key: servers[key].log.read_text(errors="replace").strip()
                      for key in servers}
    finally:
        for server in servers.values():
            server.stop()
        for fake in fakes:
            fake.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    elapsed_s = time.monotonic() - started

    pinned = "servers on core 0, wrk on core 1" if pin(0) else "not pinned"
    print(f"\nReal servers, Django {django.__version__}, gunicorn {gunicorn.__version__} "
          f"(sync worker, -w 1, no access log), uvicorn {uvicorn.__version__} (1 worker, "
          f"--no-access-log, log level warning); wrk -t1 -c{CONNECTIONS}, {runs} runs of "
          f"{seconds:g} s per server and route, order rotating and reversing run by run; "
          f"{pinned}; "
          f"{os.cpu_count()} cores shared with other load. Flag forced off with `failopen "
          f"override off --ttl 1h` in a file store ({override}); the failopen.audit WARNING "
          "line per bypass goes to a file (logging.FileHandler, timestamped format). "
          "Medians; ratio = median of with / the adjacent bare run. "
          f"({elapsed_s:.0f} s)\n")
    print("| server | route | bare app req/s | with FailOpenMiddleware req/s | ratio "
          "| server CPU µs/request bare → with |")
    print("|---|---|---:|---:|---:|---:|")
    rows = [(kind, method, path, "failopen", text) for kind, method, path in combos
            for m, p, text in SERVER_ROUTES if (m, p) == (method, path)]
    quiet = "`POST /login/` (protected, flag off, audit log disabled)"
    rows += [(kind, "POST", "/login/", "quiet", quiet) for kind in ("wsgi", "asgi")]
    rows.sort(key=lambda row: row[0] != "wsgi")
    for kind, _, path, variant, label in rows:
        bare, ours = results[kind, path, "bare"], results[kind, path, variant]
        ratio = statistics.median(o[0] / b[0] for o, b in zip(ours, bare, strict=True))
        server = "gunicorn (WSGI)" if kind == "wsgi" else "uvicorn (ASGI)"
        print(f"| {server} | {label} | {statistics.median(r for r, _ in bare):,.0f} | "
              f"{statistics.median(r for r, _ in ours):,.0f} | {ratio:.3f} | "
              f"{statistics.median(c for _, c in bare):.0f} → "
              f"{statistics.median(c for _, c in ours):.0f} |")
    print("\nrequests/s per run (bare / with / with, audit log disabled):")
    for kind, method, path in combos:
        runs_ = zip(*(results[kind, path, v] for v in variants(method)), strict=True)
        print(f"- {kind} {path}: " + ", ".join("/".join(f"{r:,.0f}" for r, _ in run)
                                               for run in runs_))
    for kind in ("wsgi", "asgi"):
        lines, posted = audit_lines[kind, "failopen"], requests_done[kind, "failopen"]
        print(f"- {kind}: {lines:,} audit lines written by the server with the middleware "
              f"({posted:,} POSTs in the measured runs, plus warm-up and checks); "
              f"bare: {audit_lines[kind, 'bare']}; with, audit log disabled: "
              f"{audit_lines[kind, 'quiet']}")
    for key, text in log_errors.items():
        if text:
            print(f"- {' '.join(key)} server log: {text[:500]}")


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as file:
        return sum(1 for _ in file)


def one(variant: str, kind: str, count: int) -> None:
    """``--one``: warm up, then ``count`` in-process ``GET /`` of one variant through one
    handler (``wsgi`` or ``asgi``), for callgrind."""
    servers, conf = setup()
    handler = handlers(kind)[variant]
    loop = asyncio.new_event_loop()

    def run(n: int) -> None:
        for _ in range(n):
            status = (wsgi_request(handler, "GET", "/") if kind == "wsgi"
                      else loop.run_until_complete(asgi_request(handler, "GET", "/")))
            assert status == 200, status

    try:
        run(50)
        run(count)
    finally:
        loop.close()
        for server in servers:
            server.stop()


def instructions() -> None:
    """Callgrind's instructions per in-process ``GET /``, bare and with the middleware."""
    if not _callgrind.available():
        print("\n(--instructions: valgrind is not installed; apt-get install valgrind)")
        return
    counts = {"wsgi": 500, "asgi": 200}
    print("\ncallgrind, in-process `GET /` (not protected), instructions per request "
          f"(WSGI {counts['wsgi']}, ASGI {counts['asgi']} requests minus none):\n")
    print("| handler | bare app | with FailOpenMiddleware | × bare |")
    print("|---|---:|---:|---:|")
    for kind, count in counts.items():
        bare, ours = (_callgrind.per_request(Path(__file__), variant, kind, count)
                      for variant in ("bare", "failopen"))
        print(f"| {kind.upper()} | {bare:,.0f} | {ours:,.0f} | {ours / bare:.3f} |")


def main() -> int:
    if "--one" in sys.argv:
        at = sys.argv.index("--one")
        one(sys.argv[at + 1], sys.argv[at + 2], int(sys.argv[sys.argv.index("--count") + 1]))
        return 0
    args = set(sys.argv[1:])
    unknown = args - {"--quick", "--servers", "--in-process", "--instructions"}
    if unknown:
        print(f"unknown arguments: {' '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    quick = "--quick" in args
    started = time.monotonic()
    if "--servers" not in args:
        in_process(quick)
    if "--in-process" not in args:
        runs, seconds = (4, 2.0) if quick else (10, 3.0)
        bench_servers(runs, seconds)
    if "--instructions" in args:
        instructions()
    print(f"\nTotal: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
