"""Vendor benchmark: one verify call per request, on one kept-alive connection, for each vendor.

    python tests/benchmarks/bench_vendors.py          # about 20 seconds; prints a Markdown table

For each vendor (the spec's, Turnstile, hCaptcha, reCAPTCHA, reCAPTCHA Enterprise, Friendly
Captcha) its fake verify API is served on loopback (a real socket, HTTP/1.1 keep-alive) and a
runtime built as a site builds it (``FAILOPEN_VENDOR``, its verify URL, its key; outage rate
limit pinned to ``none``: the flag stays on, every request is verified) decides ``REQUESTS``
log-ins, each with a fresh solved token. Measured side by side in one run:

* verify requests the vendor received per decision (goal 1.0: no retry, no second call);
* TCP connections opened (goal 1: keep-alive), counted at ``socket.create_connection``;
* the median and 95th percentile of one decision, and the median relative to the spec's vendor
  (loopback: this is failopen's own cost plus the fake's, not a vendor's latency);
* the same decision in process (no socket: ``httpx.MockTransport``), median and ratio to the
  spec's vendor: what the adapter adds to the decision path.

Every decision must be ``valid`` and every count as stated, or the benchmark stops with an error.
"""

from __future__ import annotations

import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from failopen import Config
from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI, fake_verify_api

REQUESTS = 400
IN_PROCESS = 4_000
VENDORS = ("enforcement", "turnstile", "hcaptcha", "recaptcha", "recaptcha-enterprise",
           "friendly-captcha")


class _Connects:
    """Counts TCP connections this process opens to ``port`` (httpcore opens them here; the
    status watcher's to the page are not counted)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.count = 0

    @contextmanager
    def counting(self) -> Iterator[None]:
        real = socket.create_connection

        def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
            if address[1] == self.port:
                self.count += 1
            return real(address, *args, **kwargs)

        socket.create_connection = create_connection
        try:
            yield
        finally:
            socket.create_connection = real


def _fake(vendor: str) -> Any:
    return FakeVerifyAPI() if vendor == "enforcement" else fake_verify_api(vendor)


def _config(vendor: str, api: Any, base_url: str, page: FakeStatusPage) -> Config:
    # Every vendor watches the same loopback page (never its real one): the rows differ only
    # in the verify call.
    settings: dict[str, Any] = {
        "vendor": vendor, "verify_url": base_url + api.path, "private_key": api.private_key,
        "protected_paths": ("/login",), "outage_rate": "none", "status_url": page.url,
        "global_component": page.global_id,
    }
    if vendor != "enforcement":
        settings["public_key"] = api.public_key
    return Config(**settings)


def _token(vendor: str, api: Any) -> str:
    if vendor in ("recaptcha", "recaptcha-enterprise"):
        return str(api.issue_token(score=0.9, action="login"))
    return str(api.issue_token())


def _decide(runtime: FailOpen, vendor: str, api: Any, count: int) -> list[float]:
    seconds = []
    for _ in range(count):
        token = _token(vendor, api)
        started = time.perf_counter()
        decision = runtime.decide(token, path="/login", client="203.0.113.9")
        seconds.append(time.perf_counter() - started)
        if decision.outcome != "valid":
            raise SystemExit(f"{vendor}: a fresh token was {decision.outcome}: {decision.reason}")
    return seconds


def _on_loopback(vendor: str, page: FakeStatusPage) -> dict[str, float]:
    api = _fake(vendor)
    with api.serve() as server:
        connects = _Connects(int(server.url.rsplit(":", 1)[1]))
        runtime = FailOpen(_config(vendor, api, server.url, page))
        try:
            with connects.counting():  # the first decision opens the one connection
                _decide(runtime, vendor, api, 20)  # warm: the worker threads
                before = api.requests
                seconds = _decide(runtime, vendor, api, REQUESTS)
            calls = (api.requests - before) / REQUESTS
            opened = connects.count
        finally:
            runtime.stop()
    if calls != 1.0 or opened != 1:
        raise SystemExit(f"{vendor}: {calls:g} verify calls per request, {opened} connections")
    return {"calls": calls, "connects": opened, "median": statistics.median(seconds),
            "p95": statistics.quantiles(seconds, n=20)[-1]}


def _in_process(vendor: str, page: FakeStatusPage) -> float:
    api = _fake(vendor)
    transport = api.transport()
    runtime = FailOpen(_config(vendor, api, "https://verify.test", page),
                       verify_transport=transport, verify_async_transport=transport)
    try:
        _decide(runtime, vendor, api, 100)
        return statistics.median(_decide(runtime, vendor, api, IN_PROCESS))
    finally:
        runtime.stop()


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def main(out: Callable[[str], None] = print) -> int:
    page = FakeStatusPage()
    with page.serve():
        rows = {vendor: {**_on_loopback(vendor, page), "local": _in_process(vendor, page)}
                for vendor in VENDORS}
    base = rows["enforcement"]
    out(f"Python {sys.version.split()[0]}; {REQUESTS} decisions per vendor on loopback (fresh "
        f"solved tokens, keep-alive), {IN_PROCESS} in process; outage rate none\n")
    out("| vendor | verify calls per request | TCP connections | median (loopback) | p95 "
        "| × spec's | median (in process) | × spec's |")
    out("|---|---|---|---|---|---|---|---|")
    for vendor, row in rows.items():
        out(f"| {vendor} | {row['calls']:g} | {row['connects']:g} | {_us(row['median'])} | "
            f"{_us(row['p95'])} | {row['median'] / base['median']:.2f} | {_us(row['local'])} | "
            f"{row['local'] / base['local']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
