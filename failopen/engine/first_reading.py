"""The first reading: what a fresh process's first refused requests wait for, instead of a 403.

A process enforces until its watcher's first turn (a status poll; in a fleet, a sync that adopts
the fleet's published reading and override; with a Redis store, the first read of the override)
has said otherwise. Started during a confirmed outage, a worker would refuse its first token-less
log-ins while the running workers admit them. So a request that would be refused before that
first turn ends waits for it:

- single flight: however many requests wait, the only status request is the watcher's own poll
  (a fleet follower makes none); async waiters share one future per event loop, no thread each;
- bounded: at most ``wait`` seconds (the status timeout), then the request is decided from the
  flag as it is, which is how it was decided before;
- one thread: at most one request thread per process waits at a time; any other is decided at
  once from the flag as it is (before any reading: enforce, the vendor's check as usual). A flood
  of token-less requests or ``?confirm=1`` against a page that hangs would otherwise hold every
  thread of a worker (``gunicorn --threads 4``) for the whole time-out, and an unprotected page
  behind them. Async waiters hold no thread: they share one future per loop;
- no new evidence: the turn feeds the flag through the usual hysteresis, so an unreadable or
  malformed page, a 429 or a timeout leaves enforcement on and the request is refused as before.

A fleet follower whose first sync finds nothing published yet (the whole fleet starting at once)
syncs again until the leader's first reading arrives, for ``wait`` at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from failopen._internal.forksafe import renew_locks_after_fork

__all__ = ["FirstReading"]

logger = logging.getLogger("failopen.watcher")


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class FirstReading:
    """The watcher's first turn, which requests arriving before it may wait for (bounded).

    ``worth_waiting`` says whether that turn can lift enforcement at all (it cannot when one
    reading is not enough, ``FAILOPEN_OPEN_AFTER`` > 1, and no store can bring an override):
    refused requests wait only then. ``running`` says whether a watcher thread will end the turn.
    """

    def __init__(self, *, wait: float, worth_waiting: bool = True,
                 running: Callable[[], bool] = lambda: True) -> None:
        if not wait >= 0:
            raise ValueError(f"first reading wait must be zero or more seconds, got {wait!r}")
        self.wait = wait
        self.worth_waiting = worth_waiting
        #: True until the watcher's first turn has ended; read lock-free on the request path.
        self.pending = True
        self._running = running
        self._ended = threading.Event()
        self._lock = threading.Lock()
        # Held by the one request thread that waits: taken without blocking, never waited for.
        self._waiter = threading.Lock()
        renew_locks_after_fork(self, "_lock", "_waiter")
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        #: Called (on the watcher's thread) as the first turn ends, before anyone waiting
        #: hears of it: the confirmer counts the turn's poll as its own check.
        self.on_end: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"FirstReading(pending={self.pending}, wait={self.wait:g}s)"

    def turn_ended(self, *, evidence: bool, elapsed: float) -> None:
        """One watcher turn is over: the first reading has come if it brought ``evidence``
        either way (a poll of this process's, a reading or an override adopted), or once
        ``elapsed`` seconds since the first turn began reach ``wait`` without any."""
        if evidence or elapsed >= self.wait:
            self.ended()

    def ended(self) -> None:
        """The watcher's first turn is over (its reading, if any, is in the flag)."""
        if not self.pending:
            return
        for callback in self.on_end:
            try:
                callback()
            except Exception:  # a callback's bug must neither kill the watcher nor keep waiters
                logger.exception("first reading callback failed",
                                 extra={"event": "failopen.watcher_error"})
        with self._lock:
            self.pending = False
            waiting, self._waiting = self._waiting, []
        self._ended.set()
        for loop, future in waiting:
            with contextlib.suppress(RuntimeError):  # that loop closed: nobody waits there
                loop.call_soon_threadsafe(_resolve, future)

    def after_fork(self) -> None:
        """In a forked child: the parent's event loops and waiters are not this process's."""
        self._waiting = []
        ended = threading.Event()
        if not self.pending:
            ended.set()
        self._ended = ended

    def under_way(self) -> bool:
        """True while the first turn has not ended and a watcher thread is there to end it."""
        return self.pending and self._running()

    def await_sync(self, bound: float | None = None) -> bool:
        """Wait (at most ``bound`` seconds, never more than ``wait``) for the first turn to end;
        True once it has. Only one thread of the process waits at a time: a caller that finds
        another waiting returns at once (False while the turn is under way)."""
        if not self.pending:
            return True
        if not self._running():
            return False  # nobody will end it: decide now, as before
        waiter = self._waiter
        if not waiter.acquire(blocking=False):
            return not self.pending  # another thread waits: decide from the flag as it is
        try:
            return self._ended.wait(self._bounded(bound))
        finally:
            waiter.release()

    async def await_async(self, bound: float | None = None) -> bool:
        """Async twin of :meth:`await_sync`: the callers on one loop share one future, and hold
        no thread, so each of them may wait (at most ``bound`` seconds, never more than
        ``wait``)."""
        if not self.pending:
            return True
        if not self._running():
            return False
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self.pending:
                return True
            future = next((f for owner, f in self._waiting if owner is loop), None)
            if future is None:
                future = loop.create_future()
                self._waiting.append((loop, future))
        # asyncio.wait never cancels the shared future: a caller that gives up (or whose client
        # left) leaves it to the others.
        await asyncio.wait({future}, timeout=self._bounded(bound))
        return not self.pending

    def _bounded(self, bound: float | None) -> float:
        return self.wait if bound is None else max(0.0, min(bound, self.wait))
