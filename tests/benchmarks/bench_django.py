"""Django benchmark: requests/s of the example site with and without FailOpenMiddleware.

    python tests/benchmarks/bench_django.py          # prints a Markdown table

The example site (``examples/django_site``) is served in-process by Django's own WSGIHandler and
ASGIHandler, bare (FailOpenMiddleware removed from MIDDLEWARE) and with the middleware, on two
routes: ``GET /`` (not protected: the log-in form) and ``POST /login/`` (protected, with the
flag forced off, so every request is admitted as a bypass without a verify call). Runs of the two
variants alternate every 25 requests, so drift (CPU frequency, other load) hits both alike; the
table shows the median over the rounds and the ratio with/bare (goal: >= 0.97).

On the protected route the guard writes an audit record for every bypass (the operator's record
of who got in without a verified token); the last row shows the route with that logger disabled,
to tell the audit's cost from the middleware's.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SITE = Path(__file__).resolve().parents[2] / "examples" / "django_site"
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


def main() -> int:
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
