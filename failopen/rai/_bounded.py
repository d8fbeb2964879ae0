"""Every answer of the session-intelligence API read within a bound, compressed and decoded.

A page holds at most 1,000 records; no honest answer comes near :data:`MAX_ANSWER_BYTES`. Without
a bound a small gzip answer (1.4 MB, from a broken proxy or a hostile endpoint) decoded to over a
gigabyte and ended the process with a MemoryError. So the body is read raw and decoded here, with
zlib told how much output it may produce: the memory an answer takes is at most the bound plus
one mebibyte, whatever its compression ratio. ``Accept-Encoding`` names only what is decoded
here (gzip, deflate), so a server never has a reason to send another coding.

The answers an auth flow reads (the token endpoint's, a 401's) are bounded in time too, as a page
is: each byte within the read timeout is no bound, since a server that drips them keeps the
command waiting for as long as it likes. They end once the request's read timeout has passed.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Mapping

import httpx

from failopen.rai.exceptions import InvalidResponse

__all__ = [
    "ACCEPT_ENCODING", "MAX_ANSWER_BYTES", "MAX_TOKEN_BYTES", "BodyReader", "aread_bounded",
    "read_bounded",
]  # fmt: skip

#: The largest answer body, compressed or decoded: 1,000 records of 16 KiB each (the emulator's
#: records are under 1 KiB). Per request in flight: ``--parallel`` multiplies it.
MAX_ANSWER_BYTES = 16 * 1024 * 1024
#: The largest answer of the token endpoint (a token, its type and lifetime).
MAX_TOKEN_BYTES = 64 * 1024
ACCEPT_ENCODING = "gzip, deflate"

_MiB = 1024 * 1024


def _size(limit: int) -> str:
    return f"{limit // _MiB} MiB" if limit >= _MiB else f"{limit // 1024} KiB"


class BodyReader:
    """Decodes one answer's raw chunks, refusing it once either size passes ``limit``."""

    def __init__(self, headers: Mapping[str, str], what: str, limit: int) -> None:
        self._what, self._limit = what, limit
        self._raw = self._decoded = 0
        self._chunks: list[bytes] = []
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise self._too_large(f"it announces {int(declared):,} bytes")
        coding = headers.get("content-encoding", "identity").strip().lower()
        self._decoder: zlib._Decompress | None
        #: deflate's bytes until its first two (the zlib header) are read: None once they are.
        self._head: bytes | None = None
        if coding in ("", "identity"):
            self._decoder = None
        elif coding in ("gzip", "x-gzip"):
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif coding == "deflate":
            # zlib-wrapped, as RFC 9110 says deflate is; raw when that header is wrong, as some
            # servers send it (httpx reads both, and so did failopen rai before this reader).
            self._decoder, self._head = zlib.decompressobj(), b""
        else:
            raise InvalidResponse(
                f"{what}: the answer is encoded as {coding[:40]!r}, which was not asked for "
                f"(Accept-Encoding: {ACCEPT_ENCODING})", code="unsupported_encoding")

    def _too_large(self, detail: str) -> InvalidResponse:
        return InvalidResponse(
            f"{self._what}: the answer is larger than {_size(self._limit)} ({detail}); no page "
            "of the API is that large: check --base-url, or a proxy in between",
            code="answer_too_large")

    def feed(self, raw: bytes) -> None:
        """Take one raw chunk; InvalidResponse once the answer is too large or undecodable."""
        self._raw += len(raw)
        if self._raw > self._limit:
            raise self._too_large(f"over {_size(self._limit)} received")
        if self._decoder is None:
            self._add(raw)
            return
        try:
            try:
                self._decode(self._decoder, raw)
            except zlib.error:
                if self._head is None:
                    raise
                # Not the zlib header (it is read from the first two bytes): raw deflate, read
                # again from its first byte. Nothing was decoded yet.
                data, self._head = self._head + raw, None
                self._decoder = zlib.decompressobj(-zlib.MAX_WBITS)
                self._decode(self._decoder, data)
        except zlib.error as exc:
            raise InvalidResponse(f"{self._what}: the compressed answer is corrupt ({exc})",
                                  code="invalid_encoding") from None
        if self._head is not None:
            self._head += raw
            if len(self._head) >= 2:  # the header passed: deflate as RFC 9110 says it is
                self._head = None

    def _decode(self, decoder: zlib._Decompress, data: bytes) -> None:
        while data:
            # At most one byte past what may still come (more means too large), in steps of a
            # mebibyte: zlib's output buffer is never larger than that.
            room = min(self._limit - self._decoded + 1, _MiB)
            self._add(decoder.decompress(data, room))
            data = decoder.unconsumed_tail

    def _add(self, data: bytes) -> None:
        if not data:
            return
        self._decoded += len(data)
        if self._decoded > self._limit:
            raise self._too_large(f"over {_size(self._limit)} once decoded")
        self._chunks.append(data)

    def whole(self, content: bytes) -> bytes:
        """``content``, already decoded by whoever built the response, if within the bound."""
        self._decoder = None
        self._add(content)
        return content

    def body(self) -> bytes:
        """The decoded body (call once, after the last chunk)."""
        if self._decoder is not None:
            try:
                self._add(self._decoder.flush())
            except zlib.error as exc:
                raise InvalidResponse(f"{self._what}: the compressed answer is corrupt ({exc})",
                                      code="invalid_encoding") from None
        chunks, self._chunks = self._chunks, []
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_bounded(response: httpx.Response, what: str, limit: int) -> bytes:
    """Read an unread streamed ``response`` within ``limit``; ``response.content`` is then set.

    For the answers an auth flow sees: httpx reads each of them whole (``response.read()``)
    before the flow's next request, with no bound. Read first, here, it finds the content there.
    """
    reader = BodyReader(response.headers, what, limit)
    if response.is_stream_consumed:  # built in memory (a transport that is no network)
        return reader.whole(response.content)
    seconds, deadline = _deadline(response)
    try:
        for chunk in response.iter_raw():
            reader.feed(chunk)
            _in_time(response, what, seconds, deadline)
    except BaseException:
        response.close()
        raise
    return _keep(response, reader.body())


async def aread_bounded(response: httpx.Response, what: str, limit: int) -> bytes:
    """The asyncio twin of :func:`read_bounded`."""
    reader = BodyReader(response.headers, what, limit)
    if response.is_stream_consumed:
        return reader.whole(response.content)
    seconds, deadline = _deadline(response)
    try:
        async for chunk in response.aiter_raw():
            reader.feed(chunk)
            _in_time(response, what, seconds, deadline)
    except BaseException:
        await response.aclose()
        raise
    return _keep(response, reader.body())


def _deadline(response: httpx.Response) -> tuple[float, float]:
    """The read timeout of ``response``'s request, and when reading its body must be over (no
    end without one)."""
    try:
        seconds = response.request.extensions["timeout"]["read"]
    except (RuntimeError, KeyError, TypeError):  # RuntimeError: a response with no request
        seconds = None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        return math.inf, math.inf
    return seconds, time.monotonic() + seconds


def _in_time(response: httpx.Response, what: str, seconds: float, deadline: float) -> None:
    if deadline != math.inf and time.monotonic() > deadline:
        raise httpx.ReadTimeout(f"{what}: the answer still arriving after {seconds:g}s",
                                request=response.request)


def _keep(response: httpx.Response, body: bytes) -> bytes:
    # httpx has no public way to hand a response the body read from its stream: its own read()
    # stores it in ``_content``, which is what ``.content`` and a later ``read()`` return.
    response._content = body
    return body
