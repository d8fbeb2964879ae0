"""WSGI benchmark: a Flask app called in-process, bare and wrapped by failopen's WSGI middleware.

    python tests/benchmarks/bench_wsgi.py            # prints a Markdown table (~1 min)
    python tests/benchmarks/bench_wsgi.py --quick    # fewer rounds

The same Flask app (a log-in page at ``GET /`` and a log-in handler at ``POST /login``) is called
through its WSGI entry point with a prepared environ, bare and with
``failopen.integrations.wsgi.FailOpenMiddleware`` around ``app.wsgi_app`` (``/login`` protected,
the flag forced off, so every log-in is admitted as a bypass without a verify call; no status
page, so no thread polls during the run). The outage rate limit is pinned to ``none``: the
default ``20/minute`` per client would refuse every log-in after the 20th with 429 (all come
from one address), and ``bench_core.py`` measures that limit's cost on its own. A third variant
adds ``FAILOPEN_AUDIT_FILE``. Runs of the variants alternate every ``CHUNK`` requests, so drift
(CPU frequency, other load) hits them alike; the table shows the median time per request over
the rounds and the ratio to bare.

What the middleware adds on ``POST /login`` is the path check, reading the flag, the guard's
bypass decision with its counters and audit tally, and ``environ["failopen.decision"]``; the body
is not read while enforcement is off.
"""

from __future__ import annotations

import io
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from failopen.integrations.wsgi import FailOpenMiddleware
from flask import Flask, Response, jsonify, request

from failopen import Config
from failopen.runtime import FailOpen

CHUNK = 200
FORM = b"username=ann&password=secret"


def flask_app() -> Flask:
    """The example's shape: a form page, and a log-in handler that reads the form."""
    app = Flask("bench")

    @app.get("/")
    def page() -> str:
        return '<form method="post" action="/login"><input name="username"></form>'

    @app.post("/login")
    def login() -> Response:
        decision = request.environ.get("failopen.decision")
        return jsonify(ok=True, user=request.form.get("username", ""),
                       bypassed=bool(decision is not None and decision.bypassed))

    return app


def wrapped(audit_file: str | None) -> tuple[Flask, FailOpen]:
    """The app with failopen's middleware, ``/login`` protected, no outage rate limit and the
    flag forced off."""
    config = Config(protected_paths=("/login",), verify_url="http://127.0.0.1:9/api/v4/verify/",
                    private_key="bench-private-key", audit_file=audit_file, outage_rate="none")
    runtime = FailOpen(config)
    runtime.flag.force_off("benchmark", ttl=3600)
    app = flask_app()
    app.wsgi_app = FailOpenMiddleware(app.wsgi_app, runtime=runtime)  # type: ignore[method-assign]
    return app, runtime


def environ(method: str, path: str) -> dict[str, Any]:
    body = FORM if method == "POST" else b""
    env: dict[str, Any] = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "SCRIPT_NAME": "", "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_USER_AGENT": "bench/1.0", "wsgi.version": (1, 0), "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr, "wsgi.multithread": False, "wsgi.multiprocess": True,
        "wsgi.run_once": False, "CONTENT_LENGTH": str(len(body)),
    }
    if body:
        env["CONTENT_TYPE"] = "application/x-www-form-urlencoded"
    return env


def one_chunk(app: Callable[..., Iterable[bytes]], method: str, path: str) -> float:
    """Seconds per request over ``CHUNK`` requests, each answered 200 and read whole."""
    template = environ(method, path)
    body = FORM if method == "POST" else b""
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        statuses.append(status)
        return None

    started = time.perf_counter()
    for _ in range(CHUNK):
        env = dict(template)
        env["wsgi.input"] = io.BytesIO(body)
        result = app(env, start_response)
        for _part in result:
            pass
        close = getattr(result, "close", None)
        if close is not None:
            close()
    elapsed = time.perf_counter() - started
    if any(not status.startswith("200") for status in statuses):
        raise SystemExit(f"{method} {path}: not every answer was 200: {set(statuses)}")
    return elapsed / CHUNK


def main() -> None:
    rounds = 8 if "--quick" in sys.argv else 30
    logging.getLogger("failopen").setLevel(logging.ERROR)  # the audit summary, not the console
    with tempfile.TemporaryDirectory() as tmp:
        ours, runtime = wrapped(None)
        audited, audited_runtime = wrapped(str(Path(tmp) / "audit.jsonl"))
        variants = {"bare": flask_app(), "failopen": ours, "failopen + audit file": audited}
        print("| route | variant | µs per request | × bare |")
        print("|---|---|---:|---:|")
        for method, path, label in (
                ("GET", "/", "`GET /` (not protected)"),
                ("POST", "/login", "`POST /login` (protected, flag off, outage rate `none`)")):
            times: dict[str, list[float]] = {name: [] for name in variants}
            for app in variants.values():  # warm-up
                one_chunk(app, method, path)
            for index in range(rounds):
                names = list(variants) if index % 2 == 0 else list(reversed(variants))
                for name in names:
                    times[name].append(one_chunk(variants[name], method, path))
            bare = statistics.median(times["bare"])
            for name in variants:
                median = statistics.median(times[name])
                print(f"| {label} | {name} | {median * 1e6:,.1f} | {median / bare:.3f} |")
        # Every protected request was the bypass the rows name (a 429 would have stopped the run
        # already; this also catches a decision that was never made).
        for guarded in (runtime, audited_runtime):
            counts = guarded.guard.counts()
            if set(counts) != {"bypassed_flag_off"}:
                raise SystemExit(f"the protected route was not only bypassed: {counts}")
        runtime.stop()
        audited_runtime.stop()


if __name__ == "__main__":
    main()
