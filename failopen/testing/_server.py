"""A loopback HTTP/1.1 server for the fakes, able to misbehave the way real servers do.

A fake is a function from :class:`FakeRequest` to :class:`Reply`. The same function can be served
on a real socket (:class:`LoopbackServer`, for end-to-end tests and the demo) or handed to httpx
in-process (:func:`as_transport`, for fast unit tests).
"""

from __future__ import annotations

import json as jsonlib
import socket
import struct
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

__all__ = [
    "FakeRequest", "Reply", "Handler", "LoopbackServer", "as_transport", "free_port",
    "to_httpx_response", "to_fake_request",
]


@dataclass(frozen=True)
class FakeRequest:
    """What a fake sees of a request."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes
    #: The client's address on a real socket; None in-process (the same process asked).
    client: str | None = None

    def json(self) -> Any:
        """The body decoded as JSON (raises ValueError when it is not)."""
        return jsonlib.loads(self.body)


@dataclass
class Reply:
    """A scripted answer, including the ways a real server fails.

    ``body`` may be bytes, or an iterable of chunks (sent with chunked encoding, generated lazily).
    ``delay`` holds the answer back before the status line; ``drip`` sends the body one byte
    at a time with that pause between bytes; ``truncate`` announces the whole length but sends half
    and closes; ``reset`` aborts the connection with a TCP reset and sends nothing.
    """

    status: int = 200
    body: bytes | Iterable[bytes] = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    delay: float = 0.0
    drip: float | None = None
    truncate: bool = False
    reset: bool = False

    @classmethod
    def json(cls, data: Any, status: int = 200, **kwargs: Any) -> Reply:
        """A JSON reply."""
        headers = [("Content-Type", "application/json"), *kwargs.pop("headers", [])]
        return cls(status=status, body=jsonlib.dumps(data).encode(), headers=headers, **kwargs)


Handler = Callable[[FakeRequest], Reply]


def _parse_target(target: str) -> tuple[str, dict[str, list[str]]]:
    parts = urlsplit(target)
    return parts.path, parse_qs(parts.query, keep_blank_values=True)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Answers go out in several writes (headers, chunks); with Nagle's algorithm and the
    # client's delayed ACK each one would wait ~40 ms, a latency the real vendor does not have.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # tests and the demo read the fake's state, not its access log

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path, query = _parse_target(self.path)
        request = FakeRequest(
            method=self.command,
            path=path,
            query=query,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            client=str(self.client_address[0]),
        )
        try:
            reply = self.server.handler(request)
        except Exception as exc:  # a bug in a fake must show up, not hang the client
            reply = Reply(status=599, body=f"fake handler failed: {exc!r}".encode())
        self._send(reply)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle  # noqa: N815

    def _send(self, reply: Reply) -> None:
        stopping = self.server.stopping
        if reply.delay and stopping.wait(reply.delay):
            self.close_connection = True
            return
        if reply.reset:
            # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
            self.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            self.close_connection = True
            return
        self.send_response_only(reply.status)
        names = {name.lower() for name, _ in reply.headers}
        for name, value in reply.headers:
            self.send_header(name, value)
        if isinstance(reply.body, (bytes, bytearray)):
            body = bytes(reply.body)
            if "content-length" not in names:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if reply.truncate:
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            if reply.drip is not None:
                for i in range(len(body)):
                    if stopping.wait(reply.drip):
                        break
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
            elif self.command != "HEAD":
                self.wfile.write(body)
        else:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for chunk in reply.body:
                    if stopping.is_set():
                        break
                    if chunk:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client stopped reading (size cap): fine


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops connections under a burst, and the clients'
    # SYN retries then look like a slow vendor.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], handler: Handler) -> None:
        self.handler = handler
        self.stopping = threading.Event()
        super().__init__(address, _RequestHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up mid-answer are part of the fault matrix, not errors


class LoopbackServer:
    """Serves a fake on 127.0.0.1 in a background thread. Use as a context manager."""

    def __init__(self, handler: Handler, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = _Server((host, port), handler)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> LoopbackServer:
        """Start serving; returns self."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="failopen.testing.server",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port; answers held by ``delay`` or ``drip`` end at once."""
        self._server.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class _Chunks(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A lazily generated body that sync and async clients alike can read."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def free_port() -> int:
    """A loopback port free right now, for a real server a test starts (uvicorn, gunicorn)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def to_httpx_response(reply: Reply, request: httpx.Request) -> httpx.Response:
    """A Reply as httpx would receive it over the network: faults raise, the body is unread.

    ``delay`` and ``drip`` are not slept: they raise ``ReadTimeout`` at once, so unit tests stay
    fast; use :class:`LoopbackServer` to exercise real time-outs and slow drips.
    """
    if reply.reset:
        raise httpx.ReadError("connection reset by peer", request=request)
    if reply.delay or reply.drip is not None:
        raise httpx.ReadTimeout("timed out", request=request)
    if reply.truncate:
        raise httpx.RemoteProtocolError("peer closed connection early", request=request)
    # stream= (not content=) leaves the body unread, as a network answer would be.
    if isinstance(reply.body, (bytes, bytearray)):
        body = bytes(reply.body)
        headers = httpx.Headers(reply.headers)
        headers.setdefault("Content-Length", str(len(body)))
        return httpx.Response(reply.status, headers=headers, stream=httpx.ByteStream(body))
    return httpx.Response(reply.status, headers=reply.headers, stream=_Chunks(reply.body))


def to_fake_request(request: httpx.Request) -> FakeRequest:
    """What a fake sees of an httpx request."""
    query: dict[str, list[str]] = {}
    for key, value in request.url.params.multi_items():
        query.setdefault(key, []).append(value)
    return FakeRequest(
        method=request.method,
        path=request.url.path,
        query=query,
        headers={k.lower(): v for k, v in request.headers.items()},
        body=request.read(),
    )


def as_transport(handler: Handler) -> httpx.MockTransport:
    """Serve a fake in-process to a sync or async httpx client (see :func:`to_httpx_response`)."""
    return httpx.MockTransport(lambda request: to_httpx_response(handler(to_fake_request(request)),
                                                                 request))
