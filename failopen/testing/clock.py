"""A clock that moves only when told to, for deterministic tests of expiry, staleness and TTLs."""

from __future__ import annotations

import threading

__all__ = ["FakeClock"]


class FakeClock:
    """Implements failopen.clock.Clock; ``advance(seconds)`` moves both readings forward."""

    def __init__(self, *, start: float = 1_800_000_000.0) -> None:
        self._lock = threading.Lock()
        self._wall = start
        self._mono = 1000.0

    def monotonic(self) -> float:
        """The monotonic reading: starts at 1000.0 and moves only with :meth:`advance`."""
        return self._mono

    def time(self) -> float:
        """The wall-clock reading (epoch seconds): moves only with :meth:`advance`."""
        return self._wall

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        with self._lock:
            self._wall += seconds
            self._mono += seconds

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Returns at once: advances the clock by ``timeout`` unless the event is already set."""
        if event.is_set():
            return True
        self.advance(timeout)
        return event.is_set()

    def __repr__(self) -> str:
        return f"FakeClock(time={self._wall:.3f})"
