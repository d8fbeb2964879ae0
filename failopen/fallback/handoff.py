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

The queue is bounded too: at most :data:`HANDOFF_PENDING` jobs (running and waiting) per
process. A Redis that answers slowly but within its timeout never trips the link's skip, and
each request then queued a job that waited behind all the others: a flood during an outage grew
the queue (and every request's wait) without end. A job beyond the bound is not queued:
:func:`off_loop` raises :class:`HandoffFull`, and the guard refuses that request (503 with
``Retry-After``), as it refuses one whose check failed: never an admission.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["HANDOFF_PENDING", "HANDOFF_THREADS", "HandoffFull", "off_loop"]

#: Threads making the fallback's Redis calls for event loops, per process.
HANDOFF_THREADS = 8
#: Jobs the pool holds at once (running and waiting for a thread), per process. A healthy
#: Redis makes a job in well under 1 ms, so a burst of hundreds of concurrent outage requests
#: on one worker still fits (tests/benchmarks/bench_asgi_redis.py sends 200 at once); a Redis
#: slow within its timeout makes a job wait at most 64 job times (512 / 8 threads).
HANDOFF_PENDING = 512


class HandoffFull(Exception):
    """The hand-off pool holds :data:`HANDOFF_PENDING` jobs already: this one was not queued."""

T = TypeVar("T")


class _Pool:
    """A thread pool made on first use, and again in a forked child, holding at most
    ``pending`` jobs at once."""

    def __init__(self, workers: int, pending: int = HANDOFF_PENDING) -> None:
        self._workers = workers
        self._pending = pending
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pid = os.getpid()
        self._slots = threading.BoundedSemaphore(pending)

    def submit(self, call: Callable[[], T]) -> concurrent.futures.Future[T]:
        """``call`` queued on the pool; HandoffFull when ``pending`` jobs are there already.
        A slot is freed when its job ends, not when its caller stops waiting (a client gone):
        the bound is on the work queued, whoever still wants it."""
        slots = self._slots
        if not slots.acquire(blocking=False):
            raise HandoffFull(f"the fallback's hand-off pool holds {self._pending} jobs")
        try:
            future = self.get().submit(call)
        except BaseException:
            slots.release()
            raise
        future.add_done_callback(lambda _: slots.release())
        return future

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
        # The parent's jobs never end here: their slots would stay taken.
        self._lock = threading.Lock()
        self._pool = None
        self._pid = os.getpid()
        self._slots = threading.BoundedSemaphore(self._pending)


_pool = _Pool(HANDOFF_THREADS)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_pool.reset_after_fork)


async def off_loop(call: Callable[[], T]) -> T:
    """``call()`` on one of the pool's threads, awaited: the event loop serves other requests
    meanwhile. ``call`` must bound its own time (the fallback's calls do: the link's timeout).
    Raises :class:`HandoffFull` at once, without queueing, when the pool is full."""
    return await asyncio.wrap_future(_pool.submit(call))
