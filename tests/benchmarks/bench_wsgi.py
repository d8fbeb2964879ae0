"""WSGI benchmark: a Flask app called in-process, bare and wrapped by failopen's WSGI middleware.

    python tests/benchmarks/bench_wsgi.py                 # prints Markdown tables (~2 min)
    python tests/benchmarks/bench_wsgi.py --quick         # fewer rounds
    python tests/benchmarks/bench_wsgi.py --instructions  # + callgrind's instruction ratios

The same Flask app (a log-in page at ``GET /`` and a log-in handler at ``POST /login``) is called
through its WSGI entry point with a prepared environ, bare and with
``failopen.integrations.wsgi.FailOpenMiddleware`` around ``app.wsgi_app`` (``/login`` protected;
no status page, so no thread polls during the run). Three routes:

- ``GET /``, not protected (goal: ≤ 1.02 × bare).
- ``POST /login`` with the flag forced off: every log-in is admitted as a bypass without a
  verify call, the body left unread. The outage rate limit is pinned to ``none``: the default
  ``20/minute`` per client would refuse every log-in after the 20th with 429 (all come from one
  address), and ``bench_core.py`` measures that limit's cost on its own. A third variant adds
  ``FAILOPEN_AUDIT_FILE``.
- ``POST /login`` with the flag on (enforcing), a fresh valid token in the form's
  ``enforcement-token`` field, verified by the test kit's ``FakeVerifyAPI`` in process (an httpx
  ``MockTransport``, ``FailOpen(verify_transport=...)``). The bare app verifies the same token
  itself, the way a site without failopen does: an ``httpx.Client`` on the same fake's transport,
  with the same headers, posts the same JSON and admits ``session_is_legit``. Goal: ≤ 1.03 ×.
  A third variant, bare with failopen's own ``HttpVerifier`` called in the handler, tells the
  verifier's cost from the middleware's.

Runs of the variants alternate every ``CHUNK`` requests, so drift (CPU frequency, other load)
hits them alike; the table shows the median time per request over the rounds and the ratio to
bare. Every answer must be 200, and every decision the one its row names.

``--instructions`` (needs ``valgrind``) adds, per route, instructions per request counted by
callgrind for bare and failopen (see ``_callgrind.py``): the same ratio, unmoved by the load of
a shared machine.
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

import _callgrind
import httpx
from failopen.integrations.wsgi import FailOpenMiddleware
from flask import Flask, Response, abort, jsonify, request

from failopen import Config
from failopen.providers.verify import HttpVerifier
from failopen.runtime import FailOpen
from failopen.testing import FakeVerifyAPI

CHUNK = 200
FORM = b"username=ann&password=secret"
KEY = "bench-private-key"
VERIFY_URL = "http://127.0.0.1:9/api/v4/verify/"  # never dialled: the fake's transport answers
FIELD = "enforcement-token"
# What failopen's verifier sends with each call (failopen.providers.verify): the bare app's too.
HEADERS = {"User-Agent": "failopen", "Accept": "application/json"}

Verify = Callable[[str], bool]


def flask_app(verify: Verify | None = None) -> Flask:
    """The example's shape: a form page, and a log-in handler that reads the form (and, given
    ``verify``, checks the token itself: the bare app of the flag-on row)."""
    app = Flask("bench")

    @app.get("/")
    def page() -> str:
        return '<form method="post" action="/login"><input name="username"></form>'

    @app.post("/login")
    def login() -> Response:
        if verify is not None and not verify(request.form.get(FIELD, "")):
            abort(403)
        decision = request.environ.get("failopen.decision")
        return jsonify(ok=True, user=request.form.get("username", ""),
                       bypassed=bool(decision is not None and decision.bypassed))

    return app


def own_verify(fake: FakeVerifyAPI) -> Verify:
    """A site's own check of the token: one POST to the vendor on the fake's transport."""
    client = httpx.Client(transport=fake.transport(), headers=HEADERS)

    def verify(token: str) -> bool:
        answer = client.post(VERIFY_URL, json={"private_key": KEY, "session_token": token},
                             timeout=5.0)
        details = answer.json().get("session_details") if answer.status_code == 200 else None
        return isinstance(details, dict) and details.get("session_is_legit") is True

    return verify


def failopen_verify(fake: FakeVerifyAPI) -> Verify:
    """failopen's own verifier called in the handler: the verify alone, without the guard."""
    verifier = HttpVerifier(VERIFY_URL, KEY, transport=fake.transport())
    return lambda token: verifier.verify(token).valid


def wrapped(audit_file: str | None = None, *, fake: FakeVerifyAPI | None = None
            ) -> tuple[Flask, FailOpen]:
    """The app with failopen's middleware, ``/login`` protected and no outage rate limit; the
    flag forced off, or with ``fake`` left on (enforcing) and the verify call answered by it."""
    config = Config(protected_paths=("/login",), verify_url=VERIFY_URL, private_key=KEY,
                    audit_file=audit_file, outage_rate="none")
    runtime = FailOpen(config, verify_transport=fake.transport() if fake else None)
    if fake is None:
        runtime.flag.force_off("benchmark", ttl=3600)
    app = flask_app()
    app.wsgi_app = FailOpenMiddleware(app.wsgi_app, runtime=runtime)  # type: ignore[method-assign]
    return app, runtime


def environ(method: str, path: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "SCRIPT_NAME": "", "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_USER_AGENT": "bench/1.0", "wsgi.version": (1, 0), "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr, "wsgi.multithread": False, "wsgi.multiprocess": True,
        "wsgi.run_once": False, "CONTENT_LENGTH": "0",
    }
    if method == "POST":
        env["CONTENT_TYPE"] = "application/x-www-form-urlencoded"
    return env


class Route:
    """One row group: a method and path, and what each request's body is."""

    def __init__(self, key: str, label: str, method: str, path: str,
                 fake: FakeVerifyAPI | None = None) -> None:
        self.key, self.label, self.method, self.path, self.fake = key, label, method, path, fake
        self.template = environ(method, path)

    def body(self) -> bytes:
        if self.method != "POST":
            return b""
        if self.fake is None:
            return FORM
        # A fresh token for each log-in: the vendor answers a token verified before as not legit.
        return FORM + f"&{FIELD}={self.fake.issue_token()}".encode()


def one_chunk(app: Callable[..., Iterable[bytes]], route: Route, count: int = CHUNK) -> float:
    """Seconds per request over ``count`` requests, each answered 200 and read whole."""
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        statuses.append(status)
        return None

    started = time.perf_counter()
    for _ in range(count):
        body = route.body()
        env = dict(route.template)
        env["CONTENT_LENGTH"] = str(len(body))
        env["wsgi.input"] = io.BytesIO(body)
        result = app(env, start_response)
        for _part in result:
            pass
        close = getattr(result, "close", None)
        if close is not None:
            close()
    elapsed = time.perf_counter() - started
    if any(not status.startswith("200") for status in statuses):
        raise SystemExit(f"{route.label}: not every answer was 200: {set(statuses)}")
    return elapsed / max(count, 1)


def setups(tmp: str) -> tuple[list[tuple[Route, dict[str, Any]]], dict[str, tuple[FailOpen, str]]]:
    """Each route with its variants' apps, and each failopen runtime with the one outcome its
    decisions must all have."""
    fake = FakeVerifyAPI(private_key=KEY)
    off, off_runtime = wrapped()
    audited, audited_runtime = wrapped(str(Path(tmp) / "audit.jsonl"))
    on, on_runtime = wrapped(fake=fake)
    routes = [
        (Route("get", "`GET /` (not protected)", "GET", "/"),
         {"bare": flask_app(), "failopen": off, "failopen + audit file": audited}),
        (Route("off", "`POST /login` (protected, flag off, outage rate `none`)", "POST", "/login"),
         {"bare": flask_app(), "failopen": off, "failopen + audit file": audited}),
        (Route("on", "`POST /login` (protected, flag on, token verified by an in-process fake)",
               "POST", "/login", fake),
         {"bare": flask_app(own_verify(fake)), "failopen": on,
          "bare + failopen's verifier": flask_app(failopen_verify(fake))}),
    ]
    runtimes = {"flag off": (off_runtime, "bypassed_flag_off"),
                "flag off, audit file": (audited_runtime, "bypassed_flag_off"),
                "flag on": (on_runtime, "valid")}
    return routes, runtimes


def check_outcomes(runtimes: dict[str, tuple[FailOpen, str]]) -> None:
    """Every protected request was the decision its row names (a 429 or 403 would have stopped
    the run already; this also catches a decision that was never made)."""
    for name, (runtime, outcome) in runtimes.items():
        counts = runtime.guard.counts()
        if set(counts) != {outcome}:
            raise SystemExit(f"{name}: the protected route was not only {outcome}: {counts}")


def one(variant: str, key: str, count: int) -> None:
    """``--one``: warm up, then ``count`` requests of one variant on one route (for callgrind)."""
    with tempfile.TemporaryDirectory() as tmp:
        routes, runtimes = setups(tmp)
        route, apps = next((route, apps) for route, apps in routes if route.key == key)
        one_chunk(apps[variant], route)
        one_chunk(apps[variant], route, count)
        check_outcomes({k: v for k, v in runtimes.items() if v[0].guard.counts()})
        for runtime, _ in runtimes.values():
            runtime.stop()


def main() -> None:
    logging.getLogger("failopen").setLevel(logging.CRITICAL)  # no start-up report, no summary
    if "--one" in sys.argv:
        at = sys.argv.index("--one")
        one(sys.argv[at + 1], sys.argv[at + 2], int(sys.argv[sys.argv.index("--count") + 1]))
        return
    rounds = 8 if "--quick" in sys.argv else 30
    with tempfile.TemporaryDirectory() as tmp:
        routes, runtimes = setups(tmp)
        print("| route | variant | µs per request | × bare |")
        print("|---|---|---:|---:|")
        for route, variants in routes:
            times: dict[str, list[float]] = {name: [] for name in variants}
            for app in variants.values():  # warm-up
                one_chunk(app, route)
            for index in range(rounds):
                names = list(variants) if index % 2 == 0 else list(reversed(variants))
                for name in names:
                    times[name].append(one_chunk(variants[name], route))
            bare = statistics.median(times["bare"])
            for name in variants:
                median = statistics.median(times[name])
                print(f"| {route.label} | {name} | {median * 1e6:,.1f} | {median / bare:.3f} |")
        check_outcomes(runtimes)
        for runtime, _ in runtimes.values():
            runtime.stop()
    if "--instructions" in sys.argv:
        instructions([route for route, _ in routes])


def instructions(routes: list[Route]) -> None:
    """Per route, callgrind's instructions per request for bare and failopen, and the ratio."""
    if not _callgrind.available():
        print("\n(--instructions: valgrind is not installed; apt-get install valgrind)")
        return
    count = 2000
    print(f"\ncallgrind, instructions per request ({count:,} requests minus none):\n")
    print("| route | bare | failopen | × bare |")
    print("|---|---:|---:|---:|")
    for route in routes:
        bare, ours = (_callgrind.per_request(Path(__file__), variant, route.key, count)
                      for variant in ("bare", "failopen"))
        print(f"| {route.label} | {bare:,.0f} | {ours:,.0f} | {ours / bare:.3f} |")


if __name__ == "__main__":
    main()
