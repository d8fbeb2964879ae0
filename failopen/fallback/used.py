"""Single use: a solved challenge admits one request. Used solutions are remembered until their
challenge expires (after that :mod:`failopen.fallback.challenge` refuses it anyway).

* :class:`MemoryUsedSolutions` — this process. Full of unexpired keys, it refuses new claims
  rather than forget one: forgetting would let that solution be replayed.
* :class:`RedisUsedSolutions` — the fleet (``SET NX PXAT``), so a second worker refuses a
  solution the first accepted. When Redis fails or is slow, a claim is made in the process's
  memory instead (within the link's timeout; see :mod:`failopen.fallback._redis`): the fleet
  then refuses a replay on the same worker only, which is what memory can do (memory also keeps
  what the worker admitted through Redis, so a solution used before Redis failed stays used).

When Redis loses its keys (``FLUSHALL``, a server restarted empty, a fresh replica) it forgets
which solutions were used, and another worker would admit one again. So the fleet's record
says since when it is complete: ``<prefix>fallback:since`` (milliseconds, Redis's own clock),
written when the record begins (by the fleet's store when it puts its lost keys back, see
:mod:`failopen.stores.redis`, or by the first claim that finds no marker and no fleet epoch). A
solution whose challenge was issued before that moment may have been used and forgotten: it is
refused, and the browser solves a new challenge. A marker missing beside a fleet epoch that is
there was never written (a failopen without it): the record was never lost, it is complete.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
from typing import Protocol

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.fallback._redis import RedisLink
from failopen.observe.paced import PacedLog
from failopen.stores.redis import NOW_MS_LUA

__all__ = ["MemoryUsedSolutions", "RedisUsedSolutions", "UsedSolutions"]

logger = logging.getLogger("failopen.fallback")


class UsedSolutions(Protocol):
    """Where used solutions are remembered."""

    def claim(self, key: str, expires_at: float, *, issued_at: float | None = None) -> bool:
        """True only the first time ``key`` is claimed before ``expires_at`` (epoch seconds;
        ``issued_at``, when the challenge was issued); never raises."""
        ...


class MemoryUsedSolutions:
    """Used solutions in this process: at most ``max_entries`` unexpired ones. Thread-safe."""

    #: No call waits on the network: an event loop makes it itself.
    blocking = False

    def __init__(self, max_entries: int = 100_000, clock: Clock = SYSTEM_CLOCK) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a whole number of at least 1, "
                             f"got {max_entries!r}")
        self.max_entries = max_entries
        self._clock = clock
        self._expiry: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []  # (expires_at, key): the next to drop on top
        self._lock = threading.Lock()
        renew_locks_after_fork(self, "_lock")
        self._full = PacedLog(clock=clock)

    def __repr__(self) -> str:
        return f"MemoryUsedSolutions({len(self._expiry)} of {self.max_entries})"

    def __len__(self) -> int:
        return len(self._expiry)

    def holds(self, key: str) -> bool:
        """True when ``key`` was claimed here and has not expired."""
        expires_at = self._expiry.get(key)
        return expires_at is not None and expires_at > self._clock.time()

    def claim(self, key: str, expires_at: float, *, issued_at: float | None = None) -> bool:
        """True only the first time ``key`` is claimed before it expires; False when it was
        claimed already, has expired, or memory is full of unexpired keys. (``issued_at`` is
        for the fleet's record; this process's memory is never lost while it runs.)"""
        try:
            if not isinstance(key, str) or not math.isfinite(expires_at):
                return False
            now = self._clock.time()
            if expires_at <= now:
                return False
            with self._lock:
                self._drop_expired(now)
                if key in self._expiry:
                    return False
                if len(self._expiry) >= self.max_entries:
                    full = True
                else:
                    full = False
                    self._expiry[key] = expires_at
                    heapq.heappush(self._heap, (expires_at, key))
        except Exception:  # a bug here refuses one solution, it never fails a request
            logger.exception("failopen: recording a used fallback solution failed",
                             extra={"event": "failopen.fallback_error"})
            return False
        if full:
            self._say_full()
        return not full

    def _drop_expired(self, now: float) -> None:
        heap, expiry = self._heap, self._expiry
        while heap and heap[0][0] <= now:
            expires_at, key = heapq.heappop(heap)
            if expiry.get(key) == expires_at:
                del expiry[key]

    def _say_full(self) -> None:
        suppressed = self._full.due()
        if suppressed is not None:
            logger.warning(
                "failopen: %d fallback solutions are in use and unexpired, the most this process "
                "remembers: new solutions are refused until some expire (a solution forgotten "
                "could be replayed); %d refused since the last line", self.max_entries,
                suppressed + 1, extra={"event": "failopen.fallback_memory_full",
                                       "max_entries": self.max_entries,
                                       "suppressed": suppressed})


# One round trip, as the plain SET NX was: the record's start (written when missing, see the
# module's docstring), then the claim. Returns -1 (issued before the record began), 1 or 0.
_CLAIM = NOW_MS_LUA + """
local since = redis.call('GET', KEYS[2])
if not since then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    since = '0'
  else
    since = now_ms()
  end
  redis.call('SET', KEYS[2], since, 'NX')
  since = redis.call('GET', KEYS[2])
end
if tonumber(ARGV[2]) < tonumber(since) then
  return -1
end
if redis.call('SET', KEYS[1], '1', 'NX', 'PXAT', ARGV[1]) then
  return 1
end
return 0
"""


class RedisUsedSolutions:
    """Used solutions in the fleet's Redis, under ``<prefix>fallback:used:<key>``; the process's
    memory when Redis does not answer within ``timeout``."""

    #: A call may wait on Redis (up to the timeout): an event loop makes it on the hand-off pool
    #: (:mod:`failopen.fallback.handoff`).
    blocking = True

    def __init__(self, url: str, *, password: str | None, prefix: str, timeout: float = 0.1,
                 fallback: MemoryUsedSolutions, clock: Clock = SYSTEM_CLOCK) -> None:
        self.fallback = fallback
        self.link = RedisLink(url, password=password, prefix=prefix, timeout=timeout,
                              purpose="used solutions", clock=clock)
        prefix = self.link.prefix  # with a cluster's hash tag: the fleet store's slot
        self._key_prefix = f"{prefix}fallback:used:"
        self._marker = f"{prefix}fallback:since"
        self._epoch = f"{prefix}epoch"  # the fleet store's (failopen.stores.redis)
        self._claim = self.link.client.register_script(_CLAIM)
        self._clock = clock

    def __repr__(self) -> str:
        return f"RedisUsedSolutions({self.link.shown!r}, prefix={self.link.prefix!r})"

    def claim(self, key: str, expires_at: float, *, issued_at: float | None = None) -> bool:
        """True only the first time any process of the fleet claims ``key`` before it expires,
        and never for a challenge ``issued_at`` before the fleet's record began (None: compared
        as if issued at ``expires_at``, the latest moment it can have been)."""
        try:
            if not isinstance(key, str) or not math.isfinite(expires_at):
                return False
            if expires_at <= self._clock.time():
                return False
            # Claimed here while Redis was away: Redis never heard of it, memory did.
            if self.fallback.holds(key):
                return False
            if self.link.usable():
                issued = expires_at if issued_at is None or not math.isfinite(issued_at) \
                    else issued_at
                try:
                    done = self._claim(keys=[self._key_prefix + key, self._marker, self._epoch],
                                       args=[math.ceil(expires_at * 1000),
                                             math.floor(issued * 1000)])
                except self.link.errors as exc:
                    self.link.failed(exc, "EVAL")
                else:
                    claimed: bool = done == 1  # -1: issued before the record began; 0: used
                    if claimed:
                        # Kept here too: if Redis fails later, memory still refuses a replay.
                        self.fallback.claim(key, expires_at)
                    return claimed
            return self.fallback.claim(key, expires_at)
        except Exception:  # a bug here refuses one solution, it never fails a request
            logger.exception("failopen: recording a used fallback solution failed",
                             extra={"event": "failopen.fallback_error"})
            return False

    def close(self) -> None:
        """Release the connections."""
        self.link.close()
