"""The fallback's Redis calls made for an event loop: on a small fixed pool of threads.

During an outage a ``fallback`` or rate-limited ``open`` request makes up to three Redis round
trips (the outage rate limit's test, the used-solution claim, the rate limit's count), each
bounded by the link's timeout (:mod:`failopen.fallback._redis`). Made on an ASGI worker's event
loop they would hold every other request of that worker for as long: a Redis that is slow, or
frozen until the timeout, would stall the whole worker. The async paths
(:meth:`failopen.engine.outage.OutageGate.arefuse`) hand those steps to :func:`off_loop` and
await them instead.

Threads rather than redis-py's asyncio client, on purpose: the very same sync code runs (the
same Lua scripts, so single use stays one atomic ``SET NX`` fleet-wide and the rate limit is
still counted in one step with its check; the same timeouts, the same fall back to memory), on
every kind of Redis the store takes (one server, Sentinel, a cluster), with no client bound to
one event loop. The pool is bounded: :data:`HANDOFF_THREADS` threads, so at most that many Redis
connections per link, made when first needed and made again in a forked child (its threads do
not survive a fork). A job waits for a thread at most a few link timeouts: after a failure a
link skips Redis for a while, and the jobs queued behind it answer from memory at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["HANDOFF_THREADS", "off_loop"]

#: Threads making the fallback's Redis calls for event loops, per process.
HANDOFF_THREADS = 8

T = TypeVar("T")


class _Pool:
    """A thread pool made on first use, and again in a forked child."""

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pid = os.getpid()

    def get(self) -> concurrent.futures.ThreadPoolExecutor:
        pool = self._pool
        if pool is None or self._pid != os.getpid():
            with self._lock:
                if self._pool is None or self._pid != os.getpid():
                    self._pool = concurrent.futures.ThreadPoolExecutor(
                        max_workers=self._workers, thread_name_prefix="failopen.fallback")
                    self._pid = os.getpid()
                pool = self._pool
        return pool

    def reset_after_fork(self) -> None:
        self._lock = threading.Lock()
        self._pool = None
        self._pid = os.getpid()


_pool = _Pool(HANDOFF_THREADS)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_pool.reset_after_fork)


async def off_loop(call: Callable[[], T]) -> T:
    """``call()`` on one of the pool's threads, awaited: the event loop serves other requests
    meanwhile. ``call`` must bound its own time (the fallback's calls do: the link's timeout)."""
    return await asyncio.wrap_future(_pool.get().submit(call))
