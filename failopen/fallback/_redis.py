"""One bounded Redis connection for the fallback's request-path calls, with memory behind it.

The used-solution record and the outage rate limit each make one Redis call on a request while
enforcement is off. :class:`RedisLink` makes that call cost at most ``timeout`` (connect and read
timeouts both ``timeout``, and no retry, said explicitly: redis-py's default policy has changed
between versions); after a failure, calls skip Redis for :data:`RETRY_AFTER` seconds, so a Redis
that is down or frozen costs one request the timeout, not every request. Callers then use the
process's own memory, and one WARNING a minute says so, naming host:port, never the password.

redis-py is imported when a link is built, never by ``import failopen``.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.observe.paced import PacedLog
from failopen.stores._redis_errors import explain_failure
from failopen.stores.clients import kind_of
from failopen.stores.redis import check_redis_url
from failopen.stores.urls import shown_url, split_password

__all__ = ["RETRY_AFTER", "RedisLink"]

logger = logging.getLogger("failopen.fallback")

#: Seconds a link skips Redis after a failed call.
RETRY_AFTER = 1.0


class RedisLink:
    """A redis-py client whose every call is bounded, and that knows when to skip Redis."""

    def __init__(self, url: str, *, password: str | None, prefix: str, timeout: float,
                 purpose: str, clock: Clock = SYSTEM_CLOCK) -> None:
        check_redis_url(url)
        url, in_url = split_password(url)  # no attribute holds a password in clear
        password = password or in_url
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        #: The kind of Redis (one server, Sentinel, a cluster): its client, keys and errors.
        self.kind = kind_of(url)
        #: As the keys start (on a cluster with the prefix's hash tag: one slot).
        self.prefix = prefix = self.kind.keyspace(prefix)
        self.shown = shown_url(url, password=bool(password))
        self.purpose = purpose
        self.client: Any = self.kind.open(
            url, slot_key=prefix, password=password, socket_timeout=timeout,
            socket_connect_timeout=timeout, health_check_interval=0, retry=Retry(NoBackoff(), 0))
        self.errors = self.kind.errors()
        self._clock = clock
        # One float, replaced whole: read and written without a lock (the last writer wins,
        # and any writer's value is a fine time to try Redis again).
        self._skip_until = float("-inf")
        self._paced = PacedLog(clock=clock)

    def __repr__(self) -> str:
        return f"RedisLink({self.shown!r}, prefix={self.prefix!r})"

    def usable(self) -> bool:
        """False for a while after a failed call: callers go straight to memory."""
        return self._clock.monotonic() >= self._skip_until

    def failed(self, exc: BaseException, what: str) -> None:
        """Note a failed call: skip Redis for a while, and say so (one line a minute)."""
        self._skip_until = self._clock.monotonic() + RETRY_AFTER
        suppressed = self._paced.due()
        if suppressed is None:
            return
        why = explain_failure(exc, what=what, shown=self.shown, client=self.client,
                              prefix=self.prefix)
        logger.warning(
            "failopen: %s; the outage fallback keeps its %s in this process's memory meanwhile "
            "(%d more failures since the last line)", why, self.purpose, suppressed,
            extra={"event": "failopen.fallback_redis_failed", "store": self.shown,
                   "purpose": self.purpose, "suppressed": suppressed})

    def close(self) -> None:
        """Release the connections."""
        with contextlib.suppress(*self.errors):
            self.client.close()
