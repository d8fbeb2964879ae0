"""The outage rate limit's count in this process's memory: a moving window per key, bounded.

Used by :class:`~failopen.fallback.rate.OutageRateLimit` without a fleet, and in a fleet while its
Redis is unusable. Each key keeps the times of its last ``amount`` admissions in a ring: a request
is admitted when fewer than ``amount`` of them are within the last ``seconds`` (the oldest of the
ring has left the window), so there is no burst of twice the rate at a window's edge, and a call
costs the same whatever the number of keys. Only admissions are counted.

Memory is bounded whatever clients send. The keys sit in the order of their newest admission,
so the ones whose windows have passed are always at the old end: each new key first drops up to
two of those (each key is dropped once, so this is constant work per call, amortised). When the
table holds ``max_keys`` keys whose windows are all live, a new key is not added: it counts in
one shared overflow window, which admits at most ``amount`` per window for all such keys
together, so many addresses gain an attacker nothing over one. Keys already held keep their own
windows. No background thread: the work is done by the calls.

Time is the injected clock's ``monotonic()``: the windows do not move when the wall clock is set.
"""

from __future__ import annotations

import logging
import math
import threading
from array import array
from collections import OrderedDict
from collections.abc import Hashable

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.fallback.settings import DEFAULT_MAX_CLIENTS
from failopen.observe.paced import PacedLog

__all__ = ["MemoryWindows"]

logger = logging.getLogger("failopen.fallback")

# Expired keys dropped per new key: more than one, so a backlog (a flood that has passed) drains
# while new keys arrive; few, so no call pays for many.
_DROPS_PER_NEW_KEY = 2


class _Ring:
    """The times of a key's last admissions, oldest at ``head`` once the ring is full."""

    __slots__ = ("head", "times")

    def __init__(self, now: float) -> None:
        # array("d"): 8 bytes a time rather than a float object's 24 and a list slot's 8.
        self.times = array("d", (now,))
        self.head = 0


class MemoryWindows:
    """``amount`` admissions per ``seconds`` per key, for at most ``max_keys`` keys and one
    shared overflow window. Thread-safe (one lock, held for a few attribute reads)."""

    def __init__(self, amount: int, seconds: float, *, max_keys: int = DEFAULT_MAX_CLIENTS,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ValueError(f"max_clients must be a whole number of at least 1, got "
                             f"{max_keys!r}")
        self.amount, self.seconds, self.max_keys = amount, seconds, max_keys
        self._clock = clock
        self._keys: OrderedDict[Hashable, _Ring] = OrderedDict()
        self._overflow: _Ring | None = None
        self._lock = threading.Lock()
        self._full = PacedLog(clock=clock)

    def __len__(self) -> int:
        """Keys counted apart (the overflow window not included)."""
        return len(self._keys)

    def __repr__(self) -> str:
        return f"MemoryWindows({self.amount} per {self.seconds:g}s, {len(self._keys)} of " \
               f"{self.max_keys} keys)"

    def test(self, key: Hashable) -> int | None:
        """None while ``key`` is under the limit; else the whole seconds (at least 1) until its
        oldest admission in the window leaves it. Counts nothing."""
        now = self._clock.monotonic()
        edge = now - self.seconds
        with self._lock:
            ring = self._keys.get(key)
            if ring is None:
                if not self._full_of_live_keys(edge):
                    return None
                ring = self._overflow
                if ring is None:
                    return None
            times = ring.times
            if len(times) < self.amount:
                return None
            oldest = times[ring.head]
        return None if oldest < edge else max(1, math.ceil(oldest + self.seconds - now))

    def hit(self, key: Hashable) -> int | None:
        """Count one admission of ``key`` when it is under the limit (checked and counted in
        one step) and return None; else the wait :meth:`test` gives, counting nothing."""
        now = self._clock.monotonic()
        edge = now - self.seconds
        overflowed = False
        with self._lock:
            keys = self._keys
            ring = keys.get(key)
            if ring is not None:
                # _admit(), inline: this is every admission but a client's first.
                times = ring.times
                if len(times) < self.amount:
                    times.append(now)
                    keys.move_to_end(key)
                    return None
                head = ring.head
                oldest = times[head]
                if oldest >= edge:
                    return max(1, math.ceil(oldest + self.seconds - now))
                times[head] = now
                ring.head = head + 1 if head + 1 < self.amount else 0
                keys.move_to_end(key)
                return None
            self._drop_expired(edge)
            if len(keys) < self.max_keys:
                keys[key] = _Ring(now)
                return None
            overflowed = True
            ring = self._overflow
            if ring is None:
                self._overflow = _Ring(now)
                wait = None
            else:
                wait = self._admit(ring, now, edge)
        if overflowed:  # logged outside the lock: a slow handler holds up no other request
            self._say_full()
        return wait

    def _admit(self, ring: _Ring, now: float, edge: float) -> int | None:
        times = ring.times
        if len(times) < self.amount:
            times.append(now)
            return None
        head = ring.head
        oldest = times[head]
        if oldest < edge:  # limits' rule: an admission at t counts up to and including t + seconds
            times[head] = now
            ring.head = head + 1 if head + 1 < self.amount else 0
            return None
        return max(1, math.ceil(oldest + self.seconds - now))

    def _full_of_live_keys(self, edge: float) -> bool:
        """True when a new key would count in the overflow window: the table is full and its
        oldest key (so every key) has an admission still in the window."""
        keys = self._keys
        if len(keys) < self.max_keys:
            return False
        ring = keys[next(iter(keys))]
        return ring.times[ring.head - 1] >= edge  # head - 1: the newest admission

    def _drop_expired(self, edge: float) -> None:
        keys = self._keys
        for _ in range(_DROPS_PER_NEW_KEY):
            if not keys:
                return
            oldest_key = next(iter(keys))
            ring = keys[oldest_key]
            if ring.times[ring.head - 1] >= edge:
                return
            del keys[oldest_key]

    def _say_full(self) -> None:
        suppressed = self._full.due()
        if suppressed is not None:
            logger.warning(
                "failopen: the outage rate limit counts %d clients in this process's memory, the "
                "most it may (FAILOPEN_OUTAGE_RATE_MAX_CLIENTS), all within their window: new "
                "clients share one window of %d per %gs until some leave; %d counted there "
                "since the last line", self.max_keys, self.amount, self.seconds,
                suppressed + 1, extra={"event": "failopen.outage_rate_full",
                                       "max_clients": self.max_keys, "suppressed": suppressed})
