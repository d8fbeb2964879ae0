"""How long looking for the token in a crafted body holds the ASGI event loop, before and after.

    python tests/benchmarks/bench_asgi_body.py            # prints a Markdown table (~30 s)
    python tests/benchmarks/bench_asgi_body.py --quick    # fewer rounds

An attacker controls every byte of a protected route's body, and the middleware looks for the
token in it on the event loop, before the guard decides. Each row is a 1 MiB body built to cost
the most per byte. "Before" is what failopen did until now (``json.loads`` of the whole body;
``parse_qsl``, which decodes every pair); "now" is ``failopen.web.token_from_body`` (a JSON body
of over 5000 values is not parsed; only the token's own pair is decoded). The last column sends
the body through FailOpenMiddleware while a heartbeat task on the same loop records the longest
gap between its turns: how long every other request on that worker waited. A worker thread is no
cure for JSON: ``json.loads`` is C code that keeps the GIL for the whole parse. Medians of the
rounds.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from _loop_watch import LoopWatch
from failopen.integrations.asgi import FailOpenMiddleware

from failopen import Config, FailOpen
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.testing import FakeStatusPage
from failopen.web import token_from_body

FIELD = "enforcement-token"
MIB = 1 << 20
JSON, FORM = "application/json", "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data; boundary=XX"
_TOKEN_PART = b'--XX\r\nContent-Disposition: form-data; name="enforcement-token"\r\n\r\ntok\r\n'


def _multipart(*parts: bytes) -> bytes:
    return b"".join(parts) + _TOKEN_PART + b"--XX--\r\n"


def _json(unit: bytes, size: int = MIB, *, count: int | None = None) -> bytes:
    head = json.dumps({FIELD: "tok", "pad": []}).encode()[:-2]
    count = (size - len(head) - 3) // len(unit) if count is None else count
    return head + unit * count + b"0]}"


BODIES: dict[str, tuple[str, bytes]] = {
    "JSON `[[0],[0],...]`": (JSON, _json(b"[0],")),
    "JSON `[[],[],...]`": (JSON, _json(b"[],")),
    "JSON `[1.5e300,...]`": (JSON, _json(b"1.5e300,")),
    "JSON `[{},{},...]`": (JSON, _json(b"{},")),
    # 4,997 floats + 3 = 5,000 commas and brackets: the costliest JSON body still parsed.
    "JSON, 4,997 floats (the most still parsed)": (JSON, _json(b"1.5e300,", count=4997)),
    "JSON, one 1 MiB string (an avatar)": (JSON, json.dumps(
        {FIELD: "tok", "avatar": "QUJD" * (MIB // 4 - 10)}).encode()),
    "urlencoded `pad=%41%41...`": (FORM, b"pad=" + b"%41" * ((MIB - 30) // 3)
                                   + b"&enforcement-token=tok"),
    # The multipart parser as the security review left it (no "before": that parser is gone;
    # the review measured 70-150 ms for these two shapes with the regex it replaced).
    "multipart, a 1 MiB unterminated quoted name": (MULTIPART, _multipart(
        b'--XX\r\nContent-Disposition: form-data; x=1; name="' + b"a" * (MIB - 200)
        + b"\r\n\r\nv\r\n")),
    "multipart, 999 parts of 1 KiB": (MULTIPART, _multipart(*(
        b'--XX\r\nContent-Disposition: form-data; name="f' + str(i).encode() + b'"\r\n\r\n'
        + b"v" * 1000 + b"\r\n" for i in range(999)))),
    "multipart, 1 MiB of escaped quotes in one name": (MULTIPART, _multipart(
        b'--XX\r\nContent-Disposition: form-data; name="' + b'\\"' * ((MIB - 200) // 2)
        + b'"\r\n\r\nv\r\n')),
}


def _before(content_type: str, body: bytes, field: str) -> str | None:
    """token_from_body for JSON and urlencoded as it was before this change."""
    if content_type == MULTIPART:
        return token_from_body(content_type, body, field)  # no old parser to compare with
    if content_type == JSON:
        data = json.loads(body)
        value = data.get(field) if isinstance(data, dict) else None
        return value if isinstance(value, str) else None
    pairs = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True,
                      max_num_fields=1000)
    return next((value for name, value in pairs if name == field), None)


class _Valid:
    """Every token is valid: only the search is measured, not a verify call."""

    def verify(self, token: str) -> VerifyResult:
        return VerifyResult(VerifyOutcome.VALID, "bench")

    async def averify(self, token: str) -> VerifyResult:
        return VerifyResult(VerifyOutcome.VALID, "bench")


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def _loop_held(app: Any, content_type: str, body: bytes) -> float:
    """The longest the loop was held while ``body`` went through ``app``, in ms."""
    scope = {"type": "http", "method": "POST", "path": "/login", "root_path": "",
             "query_string": b"", "client": ("203.0.113.9", 1), "http_version": "1.1",
             "headers": [(b"content-type", content_type.encode()),
                         (b"content-length", str(len(body)).encode())]}
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Any:
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        pass

    async with LoopWatch() as watch:
        await app(scope, receive, send)
    return watch.worst * 1e3


def _ms(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e3


def main() -> int:
    rounds = 3 if "--quick" in sys.argv[1:] else 9
    page = FakeStatusPage()
    runtime = FailOpen(Config(status_url="https://status.test", protected_paths=("/login",),
                              max_body_bytes=2 * MIB), verifier=_Valid(),
                       status_transport=page.transport())
    app = FailOpenMiddleware(_app, runtime=runtime)
    print(f"Python {sys.version.split()[0]}; medians of {rounds} rounds\n")
    print("| body | size | search before ms | search now ms | token now | loop held now ms |")
    print("|---|---:|---:|---:|---|---:|")
    for label, (content_type, body) in BODIES.items():
        assert _before(content_type, body, FIELD) == "tok", label
        before, now, held = [], [], []
        for _ in range(rounds):
            if content_type != MULTIPART:
                before.append(_ms(lambda: _before(content_type, body, FIELD)))  # noqa: B023
            now.append(_ms(lambda: token_from_body(content_type, body, FIELD)))  # noqa: B023
            held.append(asyncio.run(_loop_held(app, content_type, body)))
        found = token_from_body(content_type, body, FIELD)
        was = f"{statistics.median(before):.1f}" if before else "—"
        print(f"| {label} | {len(body) / 1024:,.0f} KiB | {was} | "
              f"{statistics.median(now):.2f} | {'found' if found else 'none (403)'} | "
              f"{statistics.median(held):.2f} |")
    runtime.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
