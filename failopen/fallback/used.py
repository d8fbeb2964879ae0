"""Single use: a solved challenge admits one request. Used solutions are remembered until their
challenge expires (after that :mod:`failopen.fallback.challenge` refuses it anyway).

* :class:`MemoryUsedSolutions` — this process. Full of unexpired keys, it forgets the one issued
  earliest and refuses, from then on, every solution issued at or before it: a solution
  forgotten is never replayed, and a flood refuses only challenges older than its last
  ``max_entries`` solutions, not everyone's.
* :class:`RedisUsedSolutions` — the fleet (``SET NX PX``), so a second worker refuses a
  solution the first accepted. The key lives as long as the solution can be accepted, measured
  on the servers' clock (plus :data:`CLOCK_SKEW` for one behind): Redis's own clock never
  decides it. When Redis fails or is slow, a claim is made in the process's
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
there was never written (a failopen without it): the record was never lost, it is complete. The
marker is on Redis's clock and the issue time on the servers': when Redis's clock is behind, the
marker is read that much later (never earlier), so a solution used just before the loss is not
read as issued after it.
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

__all__ = ["CLOCK_SKEW", "MemoryUsedSolutions", "RedisUsedSolutions", "UsedSolutions"]

logger = logging.getLogger("failopen.fallback")


class UsedSolutions(Protocol):
    """Where used solutions are remembered."""

    def claim(self, key: str, expires_at: float, *, issued_at: float | None = None) -> bool:
        """True only the first time ``key`` is claimed before ``expires_at`` (epoch seconds;
        ``issued_at``, when the challenge was issued); never raises."""
        ...


# Expired solutions dropped per claim: more than one, so a backlog drains while claims come (each
# claim adds one); few, so no claim pays for many. A full record drops one more to make room.
_DROPS_PER_CLAIM = 2


class MemoryUsedSolutions:
    """Used solutions in this process: at most ``max_entries`` unexpired ones. Thread-safe.

    Full, it forgets the solution issued earliest and from then on refuses every solution issued
    at or before it (:attr:`forgotten_before`): one forgotten can never be replayed, and a
    challenge issued after it is admitted as before. So a flood of solutions refuses only
    challenges issued before the last ``max_entries`` solutions it had admitted, never everyone's:
    to refuse a person's, it must have that many admitted between the person's fetching the
    challenge and sending its solution (issue 31, item 5)."""

    #: No call waits on the network: an event loop makes it itself.
    blocking = False

    def __init__(self, max_entries: int = 100_000, clock: Clock = SYSTEM_CLOCK) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a whole number of at least 1, "
                             f"got {max_entries!r}")
        self.max_entries = max_entries
        self._clock = clock
        self._expiry: dict[str, float] = {}
        # (issued, expires_at, key, claimed here alone): the earliest issued on top, dropped once
        # expired and forgotten first when full. The issue time orders them, not the expiry: it is
        # what a refusal can be decided by (the challenge carries it, signed).
        self._heap: list[tuple[float, float, str, bool]] = []
        #: A solution issued at or before this (epoch seconds) may have been used and forgotten.
        self.forgotten_before = -math.inf
        # The same for solutions claimed here alone, while the fleet's Redis was away (Redis
        # knows the others; see RedisUsedSolutions.claim).
        self._forgotten_alone = -math.inf
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

    def claimed_alone(self, key: str, expires_at: float, issued_at: float | None) -> bool:
        """True when ``key`` was claimed here (and has not expired), or may have been claimed
        here alone and forgotten since: the fleet's Redis may never have heard of it."""
        return self.holds(key) or _issued(expires_at, issued_at) <= self._forgotten_alone

    def claim(self, key: str, expires_at: float, *, issued_at: float | None = None) -> bool:
        """True only the first time ``key`` is claimed before it expires; False when it was
        claimed already, has expired, or was issued (``issued_at``; None: at ``expires_at``, the
        latest it can have been) at or before a solution this process forgot."""
        return self._record(key, expires_at, issued_at, alone=True)

    def keep(self, key: str, expires_at: float, *, issued_at: float | None = None) -> None:
        """Remember ``key``, claimed in the fleet's Redis: should Redis fail later, this process
        still refuses a replay."""
        self._record(key, expires_at, issued_at, alone=False)

    def _record(self, key: str, expires_at: float, issued_at: float | None, *,
                alone: bool) -> bool:
        try:
            if not isinstance(key, str) or not math.isfinite(expires_at):
                return False
            now = self._clock.time()
            if expires_at <= now:
                return False
            issued = _issued(expires_at, issued_at)
            with self._lock:
                if issued <= self.forgotten_before or key in self._expiry:
                    return False
                self._drop_expired(now)
                forgot = len(self._expiry) >= self.max_entries and self._forget_one(now)
                self._expiry[key] = expires_at
                heapq.heappush(self._heap, (issued, expires_at, key, alone))
        except Exception:  # a bug here refuses one solution, it never fails a request
            logger.exception("failopen: recording a used fallback solution failed",
                             extra={"event": "failopen.fallback_error"})
            return False
        if forgot:  # logged outside the lock: a slow handler holds up no other request
            self._say_full()
        return True

    def _drop_expired(self, now: float) -> None:
        """Drop up to :data:`_DROPS_PER_CLAIM` expired solutions: a backlog (a flood that has
        passed) drains while claims come, and no claim pays for all of it at once."""
        heap, expiry = self._heap, self._expiry
        for _ in range(_DROPS_PER_CLAIM):
            if not heap or heap[0][1] > now:
                return
            _issued_at, expires_at, key, _alone = heapq.heappop(heap)
            if expiry.get(key) == expires_at:
                del expiry[key]

    def _forget_one(self, now: float) -> bool:
        """Make room: drop the solution issued earliest; True when it was still unexpired (then
        every solution issued at or before it is refused from now on)."""
        heap, expiry = self._heap, self._expiry
        while heap:
            issued, expires_at, key, alone = heapq.heappop(heap)
            if expiry.get(key) != expires_at:
                continue
            del expiry[key]
            if expires_at <= now:  # expired (a shorter TTL than those above it): no loss
                return False
            self.forgotten_before = max(self.forgotten_before, issued)
            if alone:
                self._forgotten_alone = max(self._forgotten_alone, issued)
            return True
        return False

    def _say_full(self) -> None:
        suppressed = self._full.due()
        if suppressed is not None:
            logger.warning(
                "failopen: %d fallback solutions are in use and unexpired, the most this process "
                "remembers: it forgets the earliest issued, and refuses every solution issued "
                "at or before the last one it forgot (it may have been used; a person's next "
                "submit solves a new challenge); %d forgotten since the last line",
                self.max_entries,
                suppressed + 1, extra={"event": "failopen.fallback_memory_full",
                                       "max_entries": self.max_entries,
                                       "suppressed": suppressed})


def _issued(expires_at: float, issued_at: float | None) -> float:
    """When a challenge was issued, for ordering and refusing: ``issued_at``, or without one
    (or an odd one) ``expires_at``, the latest it can have been. A replay carries the same
    values as the first use (both come from the signed salt), so it gets the same answer."""
    if isinstance(issued_at, (int, float)) and not isinstance(issued_at, bool) \
            and math.isfinite(issued_at) and issued_at <= expires_at:
        return float(issued_at)
    return float(expires_at)


#: Seconds the fleet's servers' clocks may disagree: a used solution's key outlives its challenge
#: by this much, for a server whose clock is behind (it still accepts the solution).
CLOCK_SKEW = 300.0
_SKEW_MS = math.ceil(CLOCK_SKEW * 1000)

# One round trip, as the plain SET NX was: the record's start (written when missing, see the
# module's docstring), then the claim. Returns -1 (issued before the record began), 1 or 0.
# Nothing depends on Redis's clock agreeing with ours (issue 31, item 4): the key lives for a
# length of time (PX, from our clock), never until an instant on Redis's clock (PXAT stored
# nothing when Redis's clock was ahead); and the record's start, an instant on Redis's clock, is
# moved by as much as Redis's clock is behind ours (ARGV[3], our clock in ms), never earlier.
_CLAIM = NOW_MS_LUA + """
local now = now_ms()
local since = redis.call('GET', KEYS[2])
if not since then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    since = '0'
  else
    since = now
  end
  redis.call('SET', KEYS[2], since, 'NX')
  since = redis.call('GET', KEYS[2])
end
local behind = tonumber(ARGV[3]) - tonumber(now)
if behind < 0 then
  behind = 0
end
if tonumber(ARGV[2]) < tonumber(since) + behind then
  return -1
end
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
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
            now = self._clock.time()
            if expires_at <= now:
                return False
            # Claimed here while Redis was away: Redis never heard of it, memory did (or may
            # have, and had to forget it: refused too).
            if self.fallback.claimed_alone(key, expires_at, issued_at):
                return False
            if self.link.usable():
                issued = expires_at if issued_at is None or not math.isfinite(issued_at) \
                    else issued_at
                # As long as the solution can be accepted, on our clock, and by a server whose
                # clock is behind ours; at least a second.
                keep_ms = max(1000, math.ceil((expires_at - now) * 1000) + _SKEW_MS)
                try:
                    done = self._claim(keys=[self._key_prefix + key, self._marker, self._epoch],
                                       args=[keep_ms, math.floor(issued * 1000),
                                             math.floor(now * 1000)])
                except self.link.errors as exc:
                    self.link.failed(exc, "EVAL")
                else:
                    claimed: bool = done == 1  # -1: issued before the record began; 0: used
                    if claimed:
                        # Kept here too: if Redis fails later, memory still refuses a replay.
                        self.fallback.keep(key, expires_at, issued_at=issued_at)
                    return claimed
            return self.fallback.claim(key, expires_at, issued_at=issued_at)
        except Exception:  # a bug here refuses one solution, it never fails a request
            logger.exception("failopen: recording a used fallback solution failed",
                             extra={"event": "failopen.fallback_error"})
            return False

    def close(self) -> None:
        """Release the connections."""
        self.link.close()
