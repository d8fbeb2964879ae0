"""Time as an injectable dependency, so tests never wait for real time they don't need."""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["Clock", "SystemClock", "SYSTEM_CLOCK"]


class Clock(Protocol):
    """What failopen asks of time: a monotonic reading, a wall reading, an interruptible wait."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for intervals and deadlines)."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch (for timestamps and override expiry)."""
        ...

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``event``; True when it was set."""
        ...


class SystemClock:
    """The real clock."""

    # The C functions themselves rather than methods that call them: the request path reads the
    # time (an override's expiry, the audit's summary interval), and a Python frame per reading
    # was a tenth of a bypass decision.
    #: ``time.monotonic()``.
    monotonic = staticmethod(time.monotonic)
    #: ``time.time()``.
    time = staticmethod(time.time)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """``event.wait(timeout)``: returns early, True, when the event is set."""
        return event.wait(timeout)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()
