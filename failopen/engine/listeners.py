"""``FailOpen.on_change``: callbacks for flag transitions, called on their own thread.

The flag changes on the watcher's thread, on a request's thread (an override placed through the
endpoint, a confirmation, an override that lapses as a request reads it) and on the CLI's. A
callback that posts to a chat webhook takes as long as the network lets it; called there, it would
hold the watcher (and with it the polls that end a bypass) or a request. So the flag's own
listener only queues ``(old, new)``, and one daemon thread, ``failopen.listeners``, calls the
callbacks in order. A callback that raises is logged (one line per minute per process, with a
count) and the next one still runs; a callback that is slow only delays the ones after it.
At most ``max_pending`` changes wait; beyond that the oldest are dropped, counted and logged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable

from failopen._internal.forksafe import BackgroundThread
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.engine.flag import FlagState, Listener
from failopen.observe.paced import PacedLog

__all__ = ["ChangeListeners"]

logger = logging.getLogger("failopen.listeners")

class ChangeListeners(BackgroundThread):
    """Delivers flag changes to callbacks on one background thread, in the order they happened."""

    def __init__(self, *, max_pending: int = 1000, clock: Clock = SYSTEM_CLOCK) -> None:
        self.max_pending = max_pending
        self._callbacks: tuple[Listener, ...] = ()  # replaced whole: the thread reads it unlocked
        self._pending: deque[tuple[FlagState, FlagState]] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Condition(threading.Lock())
        self._busy = False
        self._dropped = 0
        self._halted = False  # stopped with its runtime: a later change starts no thread
        self._failures = PacedLog(clock=clock)
        self._drops = PacedLog(clock=clock)
        BackgroundThread.__init__(self, name="failopen.listeners", logger=logger)

    def __repr__(self) -> str:
        return f"ChangeListeners(callbacks={len(self._callbacks)}, pending={len(self._pending)})"

    def add(self, callback: Listener) -> Callable[[], None]:
        """Call ``callback(old, new)`` on every change; returns the function that stops it."""
        if not callable(callback):
            raise TypeError(f"on_change expects a callable(old, new), got {callback!r}")
        with self._lock:
            self._callbacks = (*self._callbacks, callback)

        def remove() -> None:
            with self._lock:
                callbacks = list(self._callbacks)
                if callback in callbacks:
                    callbacks.remove(callback)
                    self._callbacks = tuple(callbacks)

        return remove

    def publish(self, old: FlagState, new: FlagState) -> None:
        """The flag's listener: queue the change and return at once. Never raises."""
        if not self._callbacks:
            return
        with self._lock:
            self._pending.append((old, new))
            dropped = len(self._pending) > self.max_pending
            if dropped:
                self._pending.popleft()
                self._dropped += 1
        self._wake.set()
        if dropped:
            suppressed = self._drops.due()
            if suppressed is not None:
                logger.warning(
                    "on_change callbacks fall behind: dropped the oldest flag change "
                    "(%d dropped so far; more than %d waiting)", self._dropped, self.max_pending,
                    extra={"event": "failopen.listener_dropped", "dropped": self._dropped})
        if not self._halted:
            # No thread (the interpreter shutting down): the change stays queued.
            with contextlib.suppress(Exception):
                self.ensure_running()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every change queued so far has reached the callbacks; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._pending and not self._busy, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (changes still queued are delivered after :meth:`resume`)."""
        self._halted = True
        self._stop.set()
        self._wake.set()
        BackgroundThread.stop(self, timeout)

    def resume(self) -> None:
        """Undo :meth:`stop`: the next change (or one still queued) starts the thread."""
        self._halted = False
        if self._pending:
            self.ensure_running()

    # --- the thread ---------------------------------------------------------------------------

    def _after_fork(self) -> None:
        # Changes the parent queued are the parent's to report: a child saying them again would
        # post every alert once per worker.
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Condition(threading.Lock())
        self._pending = deque()
        self._busy = False

    def _loop(self) -> None:
        stop, wake = self._stop, self._wake
        while not stop.is_set():
            wake.clear()  # before draining: a change queued from now on sets it again
            while not stop.is_set():
                with self._lock:
                    if not self._pending:
                        break
                    self._busy = True  # before the pop: flush() never sees neither
                    old, new = self._pending.popleft()
                try:
                    self._deliver(old, new)
                finally:
                    with self._idle:
                        self._busy = False
                        self._idle.notify_all()
            with self._idle:
                self._idle.notify_all()
            wake.wait()

    def _deliver(self, old: FlagState, new: FlagState) -> None:
        for callback in self._callbacks:
            try:
                callback(old, new)
            except Exception:
                suppressed = self._failures.due()
                if suppressed is not None:
                    logger.exception(
                        "on_change callback %s failed (%d more failures since the last line; "
                        "one line per %gs)", _name(callback), suppressed,
                        self._failures.interval,
                        extra={"event": "failopen.listener_failed",
                               "callback": _name(callback), "suppressed": suppressed})


def _name(callback: object) -> str:
    return str(getattr(callback, "__qualname__", None) or type(callback).__qualname__)
