"""Compressed answers: the size cap applies to decoded bytes, and decoding stops at the cap.

A status or verify server that gzips although failopen asks for ``identity`` used to turn a
0.5 MB answer into 130 MiB of memory: httpx decodes a network chunk whole before any cap sees it.
Memory is measured with tracemalloc's peak (allocations, not time).
"""

from __future__ import annotations

import json
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from failopen.exceptions import (
    FetchTransportError,
    ResponseTooLarge,
    StatusUnavailable,
)
from failopen.providers import exchange as _http
from failopen.providers.status import StatusClient
from failopen.testing import FakeStatusPage, LoopbackServer
from failopen.testing._server import FakeRequest, Reply

CAP = 1_048_576
BOMB_DECODED = 130 * 1024 * 1024
PEAK_LIMIT = 12 * 1024 * 1024  # the cap, a few raw chunks, and slack; the bomb is 130 MiB


def _compress(wbits: int, decoded: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    block = b" " * (1024 * 1024)  # JSON-looking whitespace compresses about 1000:1
    parts = [packer.compress(block) for _ in range(decoded // len(block))]
    return b"".join(parts) + packer.flush()


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    bomb = _compress(zlib.MAX_WBITS | 16, BOMB_DECODED)
    assert len(bomb) < 512 * 1024  # a small answer on the wire
    return bomb


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def peak_while(action: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        action()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


class Unread(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body handed over unread, in 64 KiB chunks, as a network transport would."""

    def __init__(self, body: bytes) -> None:
        self.chunks = [body[i:i + 65536] for i in range(0, len(body), 65536)]

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def encoded(body: bytes, coding: str) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Unread(body), headers={
            "Content-Encoding": coding, "Content-Type": "application/json"})
    return handler


def fetch_with(handler: Callable[[httpx.Request], httpx.Response], lane: str = "status") -> bytes:
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        return _http.fetch(client, "GET", "https://x.test/", timeout=30, max_bytes=CAP,
                           lane=lane).content


@pytest.mark.parametrize("lane", ["status", "verify"])
def test_a_gzip_bomb_fails_at_the_cap_with_bounded_memory(gzip_bomb: bytes, lane: str) -> None:
    def action() -> None:
        with pytest.raises(ResponseTooLarge, match="cap"):
            fetch_with(encoded(gzip_bomb, "gzip"), lane)

    assert peak_while(action) < PEAK_LIMIT


@pytest.mark.anyio
async def test_a_gzip_bomb_fails_at_the_cap_async(gzip_bomb: bytes) -> None:
    tracemalloc.start()
    try:
        async with httpx.AsyncClient(
            transport=httpx.MockTransport(encoded(gzip_bomb, "gzip"))
        ) as client:
            with pytest.raises(ResponseTooLarge):
                await _http.afetch(client, "GET", "https://x.test/", timeout=30, max_bytes=CAP)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_LIMIT


def test_a_deflate_bomb_fails_at_the_cap_too() -> None:
    for wbits in (zlib.MAX_WBITS, -zlib.MAX_WBITS):  # zlib-wrapped and raw deflate
        bomb = _compress(wbits, 64 * 1024 * 1024)

        def action(bomb: bytes = bomb) -> None:
            with pytest.raises(ResponseTooLarge):
                fetch_with(encoded(bomb, "deflate"))

        assert peak_while(action) < PEAK_LIMIT


def test_a_gzip_bomb_over_a_real_socket_is_an_unreadable_status_page(gzip_bomb: bytes) -> None:
    def handler(request: FakeRequest) -> Reply:
        return Reply(200, gzip_bomb, [("Content-Type", "application/json"),
                                      ("Content-Encoding", "gzip")])

    with LoopbackServer(handler).start() as server, StatusClient(server.url, timeout=30) as client:
        def action() -> None:
            with pytest.raises(StatusUnavailable, match="cap"):
                client.fetch()

        assert peak_while(action) < PEAK_LIMIT


def gzipped_page() -> Iterator[tuple[str, bytes]]:
    page = FakeStatusPage()
    page.set_global("major_outage")
    document = json.dumps(page.components_document()).encode()
    yield "gzip", _compress_small(document, zlib.MAX_WBITS | 16)
    yield "x-gzip", _compress_small(document, zlib.MAX_WBITS | 16)
    yield "deflate", _compress_small(document, zlib.MAX_WBITS)
    yield "deflate", _compress_small(document, -zlib.MAX_WBITS)
    yield "identity", document
    yield "GZIP, identity", _compress_small(document, zlib.MAX_WBITS | 16)


def _compress_small(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(("coding", "body"), list(gzipped_page()))
def test_a_compressed_page_within_the_cap_still_reads(coding: str, body: bytes) -> None:
    with StatusClient("https://status.test", transport=httpx.MockTransport(
        encoded(body, coding)
    )) as client:
        assert client.fetch().global_status == "major_outage"


def test_a_body_just_at_the_cap_is_fine_and_one_byte_more_is_not() -> None:
    exact = _compress_small(b"x" * CAP, zlib.MAX_WBITS | 16)
    assert fetch_with(encoded(exact, "gzip")) == b"x" * CAP
    over = _compress_small(b"x" * (CAP + 1), zlib.MAX_WBITS | 16)
    with pytest.raises(ResponseTooLarge):
        fetch_with(encoded(over, "gzip"))


@pytest.mark.parametrize("coding", ["br", "zstd", "compress", "gzip, gzip", "gzip, br"])
def test_codings_not_decoded_within_the_cap_are_refused(coding: str) -> None:
    body = _compress_small(b"{}", zlib.MAX_WBITS | 16)
    with pytest.raises(FetchTransportError, match="refused"):
        fetch_with(encoded(body, coding))


@pytest.mark.parametrize("body", [
    b"not gzip at all", b"\x1f\x8b\x08\x00garbage",
    _compress_small(b'{"components": []}', zlib.MAX_WBITS | 16)[:-9],  # cut short
])
def test_a_corrupt_compressed_body_is_a_transport_error(body: bytes) -> None:
    with pytest.raises(FetchTransportError, match="could not decode"):
        fetch_with(encoded(body, "gzip"))


def test_the_raw_size_is_capped_too() -> None:
    # Trailing bytes after a complete gzip member decode to nothing, but are still read.
    body = _compress_small(b"{}", zlib.MAX_WBITS | 16) + b"\0" * (CAP + 1)
    with pytest.raises(ResponseTooLarge):
        fetch_with(encoded(body, "gzip"))


def test_a_body_an_in_process_transport_already_read_is_capped_too() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"x" * (CAP + 1))

    with pytest.raises(ResponseTooLarge):
        fetch_with(handler)
    assert fetch_with(lambda request: httpx.Response(200, content=b"{}")) == b"{}"


def test_an_empty_compressed_body_is_empty() -> None:
    assert fetch_with(encoded(b"", "gzip")) == b""
