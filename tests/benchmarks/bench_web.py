"""Adversarial multipart headers: what finding the token costs, ours vs the standard library.

    python tests/benchmarks/bench_web.py            # prints a Markdown table (about 20 s)

An attacker controls every byte of a protected route's body, and the middleware parses it before
the guard decides. ``failopen.web.token_from_body`` reads Content-Disposition parameters with a
linear parser; the naive alternative, ``email.message.Message.get_param``, is what
``failopen.web`` used before and grows faster than linearly on most of these inputs (ratio =
stdlib time / ours; below 1 where the stdlib is faster). Both parse the same
crafted header of about 1 MB, side by side in one run.
"""

from __future__ import annotations

import email.message
import time
from collections.abc import Callable

from failopen.web import token_from_body

FIELD = "enforcement-token"
INPUTS = {
    "1M `;`": b"form-data" + b";" * 1_000_000,
    "200k `; a=b`": b"form-data" + b"; a=b" * 200_000,
    "500k escaped quotes": b'form-data; name="' + b'\\"' * 500_000,
    "150k unterminated quotes": b'form-data; name="x' + b'; a="\\' * 150_000,
}


def _seconds(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> int:
    print("| Content-Disposition (~1 MB) | `token_from_body` ms | `email.message` ms | ratio |")
    print("|---|---:|---:|---:|")
    for label, disposition in INPUTS.items():
        body = (b"--XyZ\r\nContent-Disposition: " + disposition
                + b'\r\n\r\nv\r\n--XyZ\r\nContent-Disposition: form-data; name="' + FIELD.encode()
                + b'"\r\n\r\ntok\r\n--XyZ--\r\n')
        ours = _seconds(lambda body=body: token_from_body(  # type: ignore[misc]
            "multipart/form-data; boundary=XyZ", body, FIELD), repeat=5)
        message = email.message.Message()
        message["content-disposition"] = disposition.decode("latin-1")
        stdlib = _seconds(lambda message=message: message.get_param(  # type: ignore[misc]
            "name", header="content-disposition"), repeat=1)
        ratio = stdlib / ours
        shown = f"{ratio:,.0f}×" if ratio >= 10 else f"{ratio:.2f}×"
        print(f"| {label} | {ours * 1e3:,.1f} | {stdlib * 1e3:,.0f} | {shown} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
