"""The outage check a failing verify call asks for: single-flight, and at most once per TTL.

A flood of failing verifies makes at most one status request per ``confirm_ttl`` (per fleet, in
fleet mode), and nothing an attacker sends can flip the flag by itself: the check feeds the
status page's answer through the watcher's hysteresis, like a poll.

A slow status page holds one request thread per process, not all of them. While a check is under
way (this confirmer's, or the watcher's first poll in a fresh process), one other caller may wait
for it, at most ``wait`` (:data:`CONFIRM_WAIT`); every other caller answers at once from the flag
as it is. The caller making the check is held for at most the status timeout. Without the bound,
a flood of ``?confirm=1`` on a fresh worker waited for its first poll whole, every thread of it,
and each worker recycled by ``--max-requests`` met it again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING

from cachetools import TTLCache

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.engine.watcher import StatusSource, StatusWatcher
from failopen.exceptions import StatusError
from failopen.observe.metrics import NO_METRICS, Metrics

if TYPE_CHECKING:
    from failopen.engine.fleet import Fleet

__all__ = ["CONFIRM_WAIT", "OutageConfirmer"]

# The guard's logger: the confirmation is part of the decision, and operators filter on it.
logger = logging.getLogger("failopen.guard")

#: How long (seconds) a caller waits for a status check another caller is making.
CONFIRM_WAIT = 0.25


class OutageConfirmer:
    """A status check made on demand, at most once per ``ttl`` however many callers ask.

    ``wait`` bounds how long a caller waits for a check someone else is making (real seconds).
    """

    #: Set by the runtime (failopen.metrics): counts the checks made.
    metrics: Metrics = NO_METRICS

    def __init__(
        self,
        source: StatusSource,
        watcher: StatusWatcher,
        *,
        ttl: float = 10.0,
        clock: Clock = SYSTEM_CLOCK,
        wait: float = CONFIRM_WAIT,
    ) -> None:
        if not wait >= 0:
            raise ValueError(f"confirm wait must be zero or more seconds, got {wait!r}")
        self._source = source
        self._watcher = watcher
        self.wait = wait
        self._lock = threading.Lock()
        # Held by the one caller waiting for someone else's check: never waited for itself.
        self._waiter = threading.Lock()
        renew_locks_after_fork(self, "_lock", "_waiter")
        self._clock = clock
        self._cache: TTLCache[str, bool] = TTLCache(maxsize=1, ttl=ttl, timer=clock.monotonic)
        self._pending: tuple[asyncio.AbstractEventLoop, asyncio.Future[bool]] | None = None
        self.requests = 0
        #: In fleet mode: one confirmation per ``ttl`` per fleet (a Redis lock), behind the
        #: process-local single flight above.
        self.fleet: Fleet | None = None

    def fresh(self) -> bool:
        """True while the last check is younger than the TTL (no new check would be made)."""
        return "checked" in self._cache

    def confirm(self) -> bool:
        """Check now unless a check is fresh; True when the flag then says bypass. Never raises.

        The cache only limits how often the status page is asked. The answer is always read from
        the live flag, so a cached check can never outlive a recovery or an operator's override.
        A caller that finds a check under way never starts one of its own: one such caller per
        process waits for it, at most ``wait`` seconds, and the others answer at once. So the
        caller making the check is held for at most one status timeout, one other for at most
        ``wait``, and no one else at all.
        """
        first = self._watcher.first_reading
        if first is not None and first.under_way():
            # The watcher's first poll is a check under way like any other: never double it (a
            # fresh worker's first requests make one status request, not two), and wait for it
            # as for any other check, not for the whole status timeout.
            if not first.await_sync(self.wait):
                self._answered_from_flag()
            return not self._watcher.flag.state.enforce
        if not self.fresh():
            lock = self._lock
            if lock.acquire(blocking=False):  # single flight: this caller makes the check
                try:
                    if not self.fresh():
                        self._check()
                finally:
                    lock.release()
            elif not self._waited_for(lock):
                self._answered_from_flag()
        return not self._watcher.flag.state.enforce

    async def aconfirm(self) -> bool:
        """Async twin of :meth:`confirm`; the rare uncached check runs on a worker thread.

        Callers on one event loop share one pending check: a flood of failing verifies would
        otherwise queue a thread-pool job each, all blocked on the lock, starving the loop's
        default executor (DNS lookups, ``to_thread``) for up to the status timeout.
        """
        first = self._watcher.first_reading
        if first is not None and first.under_way():
            # The watcher's first poll: see confirm(). Waiting here costs no thread.
            await first.await_async(self.wait)
            return not self._watcher.flag.state.enforce
        if self.fresh():
            return not self._watcher.flag.state.enforce
        loop = asyncio.get_running_loop()
        pending = self._pending
        if pending is not None and pending[0] is loop and not pending[1].done():
            # A latecomer: the same bound as a thread's, then the flag as it is.
            await asyncio.wait({pending[1]}, timeout=self.wait)
        else:
            future = loop.run_in_executor(None, self.confirm)
            self._pending = (loop, future)
            # Shielded: one caller giving up (a client gone) must not cancel everyone's check.
            await asyncio.shield(future)
        return not self._watcher.flag.state.enforce

    def first_poll_made(self) -> None:
        """The watcher's first turn just ended. When it confirmed an outage, it counts as this
        process's check for the TTL: a request that was verifying meanwhile answers from the
        flag it left instead of asking the page again what it was just told."""
        if self._watcher.flag.automatic_state.enforce or not self._lock.acquire(blocking=False):
            return  # no outage to share; or a check of this confirmer's own is under way
        try:
            self._cache["checked"] = True
        finally:
            self._lock.release()

    def _waited_for(self, lock: threading.Lock) -> bool:
        """Wait (at most ``wait``) for the check ``lock`` guards, if no other caller waits for
        it already; True when it ended within the wait."""
        waiter = self._waiter
        if not waiter.acquire(blocking=False):
            return False
        try:
            if lock.acquire(timeout=self.wait):
                lock.release()
                return True
            return False
        finally:
            waiter.release()

    @staticmethod
    def _answered_from_flag() -> None:
        logger.debug("a status check is under way; answering from the flag as it is",
                     extra={"event": "failopen.confirm_waited"})

    def _check(self) -> None:
        fleet = self.fleet
        if fleet is not None and not fleet.may_confirm():
            # Another process of the fleet checked within the TTL; its reading reaches this
            # one through the store (applied already if it was published).
            self._cache["checked"] = True
            self._counted("fleet")
            return
        self.requests += 1
        started = self._clock.monotonic()
        at = self._clock.time()
        try:
            report = self._source.fetch()
        except StatusError as exc:
            logger.warning("outage confirmation failed; not bypassing: %s", exc,
                           extra={"event": "failopen.confirm_failed", "error": str(exc)})
            result = "failed"
        except Exception:
            logger.exception("outage confirmation failed unexpectedly; not bypassing",
                             extra={"event": "failopen.confirm_failed"})
            result = "failed"
        else:
            self._watcher.observe(report, source="confirmed", started=started)
            if fleet is not None:
                fleet.published(report, at, "confirmed")
            result = "no_outage" if self._watcher.flag.automatic_state.enforce else "outage"
        self._cache["checked"] = True
        self._counted(result)

    def _counted(self, result: str) -> None:
        try:
            self.metrics.confirmation(result)
        except Exception:  # counting must never turn a decision into an error
            logger.exception("metrics failed", extra={"event": "failopen.metrics_failed"})
