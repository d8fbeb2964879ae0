"""Requests' verify outcomes over a sliding window: what the guard feeds and the probe weighs.

The guard records each request's verify result here, on the request path (one lock, one bucket
increment). The verify probe (:mod:`failopen.engine.probe`) reads the tally when its failing
streak would open a bypass: the requests' own calls over the span of that streak must have been
mostly unavailable, and none may have verified a token. A plain counter with no flag and no I/O,
so it lives apart from the probe's rule.
"""

from __future__ import annotations

import threading

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.providers.verify import VerifyOutcome, VerifyResult

__all__ = ["OutcomeWindow"]

_BUCKETS = 30


class OutcomeWindow:
    """Requests' verify calls over the last ``seconds``: how many, how many unavailable.

    Fed by the guard after each verify call (one lock, one bucket increment). Counted: answers
    the vendor gave (valid, invalid with an HTTP status, rate-limited) and unavailable ones. Not
    counted: tokens refused before any call, and our own overload (no request sent).
    """

    def __init__(self, seconds: float, *, clock: Clock = SYSTEM_CLOCK) -> None:
        if not seconds > 0:
            raise ValueError(f"window must be positive seconds, got {seconds!r}")
        self.seconds = float(seconds)
        self._width = self.seconds / _BUCKETS
        self._clock = clock
        self._lock = threading.Lock()
        renew_locks_after_fork(self, "_lock")
        self._slots = [-1] * _BUCKETS
        self._calls = [0] * _BUCKETS
        self._unavailable = [0] * _BUCKETS
        self._valid = [0] * _BUCKETS

    def record(self, result: VerifyResult) -> None:
        """Count one request's verify result. Never raises."""
        outcome = result.outcome
        bad = good = 0
        if outcome is VerifyOutcome.UNAVAILABLE:
            bad = 1
        elif outcome is VerifyOutcome.VALID:
            good = 1
        elif outcome is not VerifyOutcome.RATE_LIMITED and not (
                outcome is VerifyOutcome.INVALID and result.status_code is not None):
            return
        slot = int(self._clock.monotonic() / self._width)
        index = slot % _BUCKETS
        with self._lock:
            if self._slots[index] != slot:
                self._slots[index] = slot
                self._calls[index] = self._unavailable[index] = self._valid[index] = 0
            self._calls[index] += 1
            self._unavailable[index] += bad
            self._valid[index] += good

    def counts(self) -> tuple[int, int]:
        """(verify calls, unavailable ones) in the window."""
        calls, unavailable, _ = self.tally()
        return calls, unavailable

    def tally(self) -> tuple[int, int, int]:
        """(verify calls, unavailable ones, valid ones) in the window."""
        now = int(self._clock.monotonic() / self._width)
        calls = unavailable = valid = 0
        with self._lock:
            for index in range(_BUCKETS):
                if 0 <= now - self._slots[index] < _BUCKETS:
                    calls += self._calls[index]
                    unavailable += self._unavailable[index]
                    valid += self._valid[index]
        return calls, unavailable, valid
