"""A response body read within a size cap, decoded from its Content-Encoding within it too."""

from __future__ import annotations

import zlib

import httpx

from failopen.exceptions import FetchTransportError, ResponseTooLarge

__all__ = ["BoundedBody"]

_ZLIB_CODINGS = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16,
                 "deflate": zlib.MAX_WBITS}


class BoundedBody:
    """The body, decoded from its Content-Encoding without ever holding more than the cap.

    httpx decodes each network chunk whole, so 64 KiB of gzip can become a 64 MiB chunk before a
    cap on decoded chunks sees it. Here the raw bytes are read and decoded with zlib's
    ``max_length``, so decoding stops one byte past the cap and ResponseTooLarge is raised. Both
    the raw and the decoded sizes are capped. ``gzip``, ``x-gzip`` and ``deflate`` (zlib-wrapped
    or raw) are decoded; any other coding, or more than one, was not asked for (the request says
    ``identity``) and is refused as a transport error, never guessed at.
    """

    def __init__(self, headers: httpx.Headers, max_bytes: int) -> None:
        codings = [c.strip().lower() for c in headers.get_list("content-encoding", True)]
        codings = [c for c in codings if c and c != "identity"]
        if len(codings) > 1:
            raise FetchTransportError(
                f"answer encoded {len(codings)} times ({', '.join(codings)[:80]}); refused"
            )
        self._coding = codings[0] if codings else None
        if self._coding is not None and self._coding not in _ZLIB_CODINGS:
            raise FetchTransportError(
                f"answer is {self._coding[:40]!r}-encoded, which was not asked for; refused"
            )
        self._max = max_bytes
        self._raw = 0
        self._body = bytearray()
        self._zlib = (
            None if self._coding is None else zlib.decompressobj(_ZLIB_CODINGS[self._coding])
        )
        self._first = True

    @classmethod
    def already_read(cls, content: bytes, max_bytes: int) -> BoundedBody:
        """A body an in-process transport handed over already read and decoded (httpx's
        ``MockTransport`` with ``content=``): no network bytes are left to bound, only the cap to
        apply."""
        body = cls(httpx.Headers(), max_bytes)
        body.feed(content)
        return body

    def _append(self, data: bytes) -> None:
        self._body += data
        if len(self._body) > self._max:
            raise ResponseTooLarge(f"response body passed the {self._max}-byte cap")

    def feed(self, chunk: bytes) -> None:
        """Take one raw chunk. Raises ResponseTooLarge or FetchTransportError."""
        self._raw += len(chunk)
        if self._raw > self._max:
            raise ResponseTooLarge(f"response body passed the {self._max}-byte cap")
        if self._zlib is None:
            self._append(chunk)
            return
        first, self._first = self._first, False
        try:
            self._inflate(chunk)
        except zlib.error as exc:
            if not (first and self._coding == "deflate"):
                raise FetchTransportError(f"could not decode the {self._coding} answer") from exc
            # "deflate" is sent raw by some servers, as httpx also allows: try that once.
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
            try:
                self._inflate(chunk)
            except zlib.error:
                raise FetchTransportError("could not decode the deflate answer") from None

    def _inflate(self, data: bytes) -> None:
        assert self._zlib is not None
        while data and not self._zlib.eof:
            # One byte more than the room left: getting it proves the cap is passed.
            room = self._max - len(self._body) + 1
            self._append(self._zlib.decompress(data, room))
            data = self._zlib.unconsumed_tail

    def finish(self) -> bytes:
        """The whole decoded body."""
        if self._zlib is not None and self._raw and not self._zlib.eof:
            # An empty body (an error status, HEAD) is fine; a stream cut short is not.
            raise FetchTransportError(f"could not decode the {self._coding} answer: it ends early")
        return bytes(self._body)
