"""Bounded exchanges: Retry-After parsing, and local overload told apart from a slow vendor."""

from __future__ import annotations

import contextlib
import threading

import httpx
import pytest

from failopen.exceptions import FetchOverloaded, FetchTimeout
from failopen.providers import exchange as _http


@pytest.mark.parametrize(
    ("header", "expected"),
    [("120", 120.0), (" 7 ", 7.0), ("²", None), ("1e3", None), ("-5", None), ("", None),
     (None, None), ("9" * 400, 86_400.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
     ("not a date", None)],
)
def test_parse_retry_after(header: str | None, expected: float | None) -> None:
    assert _http.parse_retry_after(header, now=2_000_000_000.0) == expected


def _occupy(client: httpx.Client, url: str) -> None:
    """Hold a verify worker until the handler's gate opens (its outcome does not matter)."""
    with contextlib.suppress(FetchTimeout, FetchOverloaded):
        _http.fetch(client, "GET", url, timeout=1.0, max_bytes=100, lane="verify")


def test_a_call_that_never_got_a_worker_is_overload_not_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(_http._lanes, "verify", _http._WorkerPool("verify-test", 1))
    gate = threading.Event()

    def slow(request: httpx.Request) -> httpx.Response:
        gate.wait(5)
        return httpx.Response(200, content=b"{}")

    client = httpx.Client(transport=httpx.MockTransport(slow))
    blocker = threading.Thread(target=_occupy, args=(client, "https://v.test/"))
    blocker.start()
    try:
        with pytest.raises(FetchOverloaded, match="no free verify worker"):
            _http.fetch(client, "GET", "https://v.test/", timeout=0.1, max_bytes=100,
                        lane="verify")
    finally:
        gate.set()
        blocker.join()


def test_a_verify_flood_does_not_queue_status_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_http._lanes, "verify", _http._WorkerPool("verify-test", 2))
    gate = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "verify.test":
            gate.wait(5)
        return httpx.Response(200, content=b"ok")

    client = httpx.Client(transport=httpx.MockTransport(handler))
    flood = [threading.Thread(target=_occupy, args=(client, "https://verify.test/"))
             for _ in range(6)]
    for thread in flood:
        thread.start()
    try:
        fetched = _http.fetch(client, "GET", "https://status.test/", timeout=0.5, max_bytes=100,
                              lane="status")
        assert fetched.content == b"ok"
    finally:
        gate.set()
        for thread in flood:
            thread.join()
