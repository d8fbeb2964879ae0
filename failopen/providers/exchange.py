"""Bounded HTTP exchanges with the vendor: one overall deadline, a size cap, same-host redirects.

httpx timeouts apply to each socket operation, so a server that drips one byte just inside the
read timeout could hold a request open forever. Here the deadline covers the whole exchange:

* async callers get it from ``asyncio.wait_for``, which cancels the exchange;
* sync callers run the exchange on a small worker pool and stop waiting at the deadline; the
  worker checks the same deadline between chunks, so it gives up too and never outlives it by
  more than one socket read.

Which URLs may be used at all (a configured vendor URL, a redirect's target) is decided in
:mod:`failopen.providers.urls`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from failopen._internal.redact import host_port
from failopen.exceptions import FetchError, FetchOverloaded, FetchTimeout, FetchTransportError
from failopen.providers.bounded_body import BoundedBody
from failopen.providers.urls import next_url

__all__ = ["Fetched", "fetch", "afetch", "parse_retry_after"]



@dataclass(frozen=True)
class Fetched:
    """A complete response: status, headers and the whole (capped) body."""

    status_code: int
    headers: httpx.Headers
    content: bytes
    url: httpx.URL
    elapsed: float


@dataclass(frozen=True)
class Body:
    """What a request carries besides its headers: JSON or a form."""

    json: Any = None
    data: Mapping[str, str] | None = None

    def without_content(self) -> Body:
        """No body: what a 301/302/303 redirect's GET sends."""
        return Body()


_RETRY_AFTER_MAX = 86_400.0


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date), capped at a day.

    Anything else, including digits outside ASCII and absurd values, is None: a header is the
    vendor's hint, never a reason to fail.
    """
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return min(float(value[:12]), _RETRY_AFTER_MAX)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(max(0.0, when - (time.time() if now is None else now)), _RETRY_AFTER_MAX)


def _headers(extra: dict[str, str] | None) -> dict[str, str]:
    # The answers are small: no compression is asked for. A server may compress anyway, which
    # BoundedBody decodes within the cap.
    return {"Accept-Encoding": "identity", **(extra or {})}


class _Sockets:
    """The sockets one exchange opens, so the caller can cut them at the deadline.

    A worker blocked reading a status line or headers that drip in a byte at a time never gets
    back to checking the deadline; shutting its socket down from the caller's thread ends the
    read at once. httpcore reports each new connection through the ``trace`` extension; a
    connection reused from the pool is not seen (callers that need the cut disable keep-alive).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._cut = False

    def trace(self, name: str, info: dict[str, Any]) -> None:
        if not name.endswith((".connect_tcp.complete", ".start_tls.complete")):
            return
        get_extra_info = getattr(info.get("return_value"), "get_extra_info", None)
        sock = get_extra_info("socket") if get_extra_info is not None else None
        if isinstance(sock, socket.socket):
            with self._lock:
                self._sockets.append(sock)
                cut = self._cut
            if cut:
                _shutdown(sock)

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed: nothing left to cut
        sock.shutdown(socket.SHUT_RDWR)


def _timeout(remaining: float) -> httpx.Timeout:
    return httpx.Timeout(max(remaining, 0.001))


def _exchange(
    client: httpx.Client,
    method: str,
    url: str,
    deadline: float,
    max_bytes: int,
    content: Body,
    headers: dict[str, str] | None,
    sockets: _Sockets,
) -> Fetched:
    started = time.monotonic()
    target = httpx.URL(url)
    hops = 0
    while True:
        request = client.build_request(
            method, target, json=content.json, data=content.data,
            headers=_headers(headers), timeout=_timeout(deadline - time.monotonic()),
            extensions={"trace": sockets.trace},
        )
        response = client.send(request, stream=True, follow_redirects=False)
        try:
            follow = next_url(target, response, hops)
            if follow is not None:
                target, hops = follow, hops + 1
                if response.status_code in (301, 302, 303):
                    method, content = "GET", content.without_content()
                continue
            if response.is_stream_consumed:
                body = BoundedBody.already_read(response.content, max_bytes)
            else:
                body = BoundedBody(response.headers, max_bytes)
                for chunk in response.iter_raw():
                    body.feed(chunk)
                    if time.monotonic() > deadline:
                        raise FetchTimeout(f"response from {host_port(target)} still arriving at "
                                           "the deadline")
            return Fetched(
                response.status_code, response.headers, body.finish(), target,
                time.monotonic() - started,
            )
        finally:
            response.close()


async def _aexchange(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    deadline: float,
    max_bytes: int,
    content: Body,
    headers: dict[str, str] | None,
) -> Fetched:
    started = time.monotonic()
    target = httpx.URL(url)
    hops = 0
    while True:
        request = client.build_request(
            method, target, json=content.json, data=content.data,
            headers=_headers(headers), timeout=_timeout(deadline - time.monotonic()),
        )
        response = await client.send(request, stream=True, follow_redirects=False)
        try:
            follow = next_url(target, response, hops)
            if follow is not None:
                target, hops = follow, hops + 1
                if response.status_code in (301, 302, 303):
                    method, content = "GET", content.without_content()
                continue
            if response.is_stream_consumed:
                body = BoundedBody.already_read(response.content, max_bytes)
            else:
                body = BoundedBody(response.headers, max_bytes)
                async for chunk in response.aiter_raw():
                    body.feed(chunk)
            return Fetched(
                response.status_code, response.headers, body.finish(), target,
                time.monotonic() - started,
            )
        finally:
            await response.aclose()


def _translate(exc: BaseException, timeout: float, where: str) -> FetchError | None:
    """The FetchError for an httpx failure, naming ``where`` (host:port: a refused connection
    or a name that does not resolve says which); None for anything else (a bug, which must
    surface as a bug rather than pass for a vendor that is unavailable)."""
    if isinstance(exc, FetchError):
        return exc
    if isinstance(exc, httpx.TimeoutException):
        return FetchTimeout(
            f"no complete answer from {where} within {timeout:g}s ({type(exc).__name__})")
    if isinstance(exc, (httpx.HTTPError, httpx.StreamError)):
        # str(exc) of httpx errors carries no request body, so no secret can leak through it.
        return FetchTransportError(f"{where}: {type(exc).__name__}: {exc}")
    return None


class _WorkerPool:
    """A lazily created thread pool, recreated in a forked child (its threads do not survive)."""

    def __init__(self, name: str, workers: int) -> None:
        self._name = name
        self._workers = workers
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pid = os.getpid()

    def submit(self, fn: Callable[..., Fetched], *args: Any) -> concurrent.futures.Future[Fetched]:
        pool = self._pool
        if pool is None or self._pid != os.getpid():
            with self._lock:
                if self._pool is None or self._pid != os.getpid():
                    self._pool = concurrent.futures.ThreadPoolExecutor(
                        max_workers=self._workers, thread_name_prefix=f"failopen.{self._name}"
                    )
                    self._pid = os.getpid()
                pool = self._pool
        return pool.submit(fn, *args)

    def reset_after_fork(self) -> None:
        self._lock = threading.Lock()
        self._pool = None
        self._pid = os.getpid()


# Separate lanes: a flood of verify calls (whose volume a caller controls) must never queue the
# status reads that decide whether an outage is real.
# The verify probe (issue 13) has a lane of its own too: request traffic must not delay it or make
# it fail.
_lanes = {"status": _WorkerPool("status", 4), "verify": _WorkerPool("verify", 64),
          "probe": _WorkerPool("probe", 2)}


def _reset_lanes_after_fork() -> None:
    for pool in _lanes.values():
        pool.reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lanes_after_fork)


def _started(started: threading.Event, fn: Callable[..., Fetched]) -> Callable[..., Fetched]:
    def run(*args: Any) -> Fetched:
        started.set()
        return fn(*args)

    return run


def fetch(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    json: Any = None,
    data: Mapping[str, str] | None = None,
    headers: dict[str, str] | None = None,
    lane: str = "status",
) -> Fetched:
    """One exchange with an overall deadline of ``timeout`` seconds. Raises FetchError.

    The request carries ``json``, or ``data`` form-encoded. ``lane`` picks the worker pool:
    ``status``, ``verify`` or ``probe``. An exchange that never got a worker before the deadline
    raises FetchOverloaded, not FetchTimeout: it says nothing about the vendor.
    """
    deadline = time.monotonic() + timeout
    started = threading.Event()
    sockets = _Sockets()
    future = _lanes[lane].submit(
        _started(started, _exchange), client, method, url, deadline, max_bytes,
        Body(json, data), headers, sockets,
    )
    try:
        return future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        sockets.cut()  # the worker stops too, instead of reading on past the deadline
        if not started.is_set():
            raise FetchOverloaded(f"no free {lane} worker within {timeout:g}s") from None
        raise FetchTimeout(
            f"no complete answer from {host_port(url)} within {timeout:g}s") from None
    except Exception as exc:
        translated = _translate(exc, timeout, host_port(url))
        if translated is None:
            raise
        raise translated from None


async def afetch(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    json: Any = None,
    data: Mapping[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> Fetched:
    """The async twin of :func:`fetch`: the deadline cancels the exchange."""
    deadline = time.monotonic() + timeout
    try:
        return await asyncio.wait_for(
            _aexchange(client, method, url, deadline, max_bytes, Body(json, data),
                       headers), timeout
        )
    except asyncio.TimeoutError:
        raise FetchTimeout(
            f"no complete answer from {host_port(url)} within {timeout:g}s") from None
    except Exception as exc:
        translated = _translate(exc, timeout, host_port(url))
        if translated is None:
            raise
        raise translated from None
