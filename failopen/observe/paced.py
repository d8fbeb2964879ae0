"""Log lines paced to one per interval, with a count of the ones not written."""

from __future__ import annotations

import threading

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.clock import SYSTEM_CLOCK, Clock

__all__ = ["FAILURE_LOG_INTERVAL", "PacedLog"]

#: Seconds between two log lines about failing listeners.
FAILURE_LOG_INTERVAL = 60.0


class PacedLog:
    """At most one log line per ``interval``; the lines in between are counted, not written."""

    def __init__(self, interval: float = FAILURE_LOG_INTERVAL, *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        renew_locks_after_fork(self, "_lock")
        self._next: float | None = None
        self._suppressed = 0

    def due(self) -> int | None:
        """None: stay quiet (counted). Else the number suppressed since the last line."""
        now = self._clock.monotonic()
        with self._lock:
            if self._next is not None and now < self._next:
                self._suppressed += 1
                return None
            self._next = now + self.interval
            suppressed, self._suppressed = self._suppressed, 0
            return suppressed
