"""The outage rate limit: requests admitted without a vendor check, per client address and route.

A moving window (no burst of twice the rate at a window's edge), counted in the process's memory
(:mod:`failopen.fallback.rate_memory`: bounded whatever the number of clients; no optional
package, so the default limit holds on every install), or by the ``limits`` package in the
fleet's Redis so the limit holds fleet-wide. When Redis fails or is
slow, a call counts in memory instead (bounded by the timeout; see
:mod:`failopen.fallback._redis`): each process then admits up to the rate on its own.

An IPv6 client counts by its /64: one host is given that many addresses, and counted per address
it could send every request from a new one.

``limits`` and redis-py are imported when an :class:`OutageRateLimit` with a Redis URL is built.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging
import math
import socket
import time
from typing import Any

from failopen._internal.forksafe import renew_after_fork
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.exceptions import ConfigError
from failopen.fallback._redis import RedisLink
from failopen.fallback.rate_memory import MemoryWindows
from failopen.fallback.rate_text import parse_rate
from failopen.fallback.settings import DEFAULT_MAX_CLIENTS, check_outage_rate

__all__ = ["OutageRateLimit"]

logger = logging.getLogger("failopen.fallback")


class OutageRateLimit:
    """``rate`` (``20/minute``) per (client address, route), in memory or in Redis; in memory
    at most ``max_clients`` of them apart, the rest together (:class:`MemoryWindows`)."""

    def __init__(self, rate: str, *, redis_url: str | None = None, password: str | None = None,
                 prefix: str = "failopen:", timeout: float = 0.1,
                 clock: Clock = SYSTEM_CLOCK, max_clients: int = DEFAULT_MAX_CLIENTS) -> None:
        if check_outage_rate(rate, fleet=redis_url is not None) == "none":
            raise ConfigError("FAILOPEN_OUTAGE_RATE: none counts nothing; build no "
                              "OutageRateLimit for it")
        self.rate = rate
        amount, seconds = parse_rate(rate)
        self._clock = clock
        self.memory = MemoryWindows(amount, seconds, max_keys=max_clients, clock=clock)
        # A lock held by another thread at fork() would hang the child's first request: a
        # forked worker counts afresh in memory of its own.
        renew_after_fork(self, "_renew_memory")
        self.link: RedisLink | None = None
        self._shared: Any = None
        self._quiet_until = float("-inf")  # no "count in Redis failed" told before then
        self.item: Any = None  # limits' reading of the rate, for its Redis count
        if redis_url is not None:
            import limits
            from limits.strategies import MovingWindowRateLimiter

            # The same text read the same way (tests/fallback/test_rate_text.py): the keys and
            # windows of processes that counted before issue 31 are this one's.
            self.item = limits.parse(rate)
            self.link = RedisLink(redis_url, password=password, prefix=prefix, timeout=timeout,
                                  purpose="outage rate limit", clock=clock)
            self._shared = MovingWindowRateLimiter(_storage_on(
                self.link.client, key_prefix=f"{self.link.prefix}fallback:rate"))

    def __repr__(self) -> str:
        where = "memory" if self.link is None else self.link.shown
        return f"OutageRateLimit({self.rate!r}, {where})"

    @property
    def blocking(self) -> bool:
        """True when a call may wait on the fleet's Redis (up to the timeout): an event loop
        makes it on the hand-off pool (:mod:`failopen.fallback.handoff`)."""
        return self.link is not None

    def test(self, client: str, route: str) -> int | None:
        """None while ``client`` is under the limit on ``route``; else the seconds to wait
        before the next request may pass (at least 1), for ``Retry-After``. Never raises."""
        try:
            if ":" in client or len(client) > _LONGEST:  # _bucket(): IPv4 is counted as it is
                client = _bucket(client)
            if self.link is not None and self.link.usable():
                try:
                    return self._test(self._shared, client, route)
                except self.link.errors as exc:
                    self.link.failed(exc, "EVALSHA")
                except Exception:
                    self._shared_broke()
            return self.memory.test((client, route))
        except Exception:
            logger.exception("failopen: the outage rate limit failed (the request is counted "
                             "as under it)", extra={"event": "failopen.fallback_error"})
            return None

    def hit(self, client: str, route: str) -> int | None:
        """Count one admitted request of ``client`` on ``route``, in one step with the check
        (concurrent requests cannot all slip under the limit between :meth:`test` and this):
        None when it fits, else the seconds to wait, as :meth:`test` gives. Never raises."""
        try:
            if ":" in client or len(client) > _LONGEST:
                client = _bucket(client)
            if self.link is not None and self.link.usable():
                try:
                    if self._shared.hit(self.item, client, route):
                        return None
                    return self._test(self._shared, client, route) or 1
                except self.link.errors as exc:
                    self.link.failed(exc, "EVALSHA")
                except Exception:
                    self._shared_broke()
            return self.memory.hit((client, route))
        except Exception:
            logger.exception("failopen: the outage rate limit failed (the request is not "
                             "counted)", extra={"event": "failopen.fallback_error"})
            return None

    def _shared_broke(self) -> None:
        """The Redis count failed other than as Redis fails (a bug, a ``limits`` that changed):
        the request is counted in memory, as when Redis is away, not admitted uncounted; told
        once a minute, with the traceback, not once a request."""
        now = self._clock.monotonic()
        if now < self._quiet_until:
            return
        self._quiet_until = now + 60.0
        logger.exception("failopen: the outage rate limit's count in Redis failed; this "
                         "process counts in memory meanwhile (told again in a minute if it "
                         "goes on)", extra={"event": "failopen.fallback_error"})

    def _renew_memory(self) -> None:
        old = self.memory
        self.memory = MemoryWindows(old.amount, old.seconds, max_keys=old.max_keys,
                                    clock=self._clock)

    def _test(self, limiter: Any, client: str, route: str) -> int | None:
        if limiter.test(self.item, client, route):
            return None
        reset, _remaining = limiter.get_window_stats(self.item, client, route)
        # limits keeps its Redis windows on the wall clock (time.time): so does the wait.
        return max(1, math.ceil(float(reset) - time.time()))

    def close(self) -> None:
        """Release the Redis connections (memory has none)."""
        if self.link is not None:
            self.link.close()


def _storage_on(client: Any, *, key_prefix: str) -> Any:
    """limits' Redis storage, its scripts run on our own client: its timeouts and no retries, a
    unix:// URL as redis-py reads it (limits itself would want redis+unix://), with a Sentinel
    URL the client that asks the sentinels under the same timeouts (limits' own Sentinel storage
    gives the sentinels none unless told), and on a cluster the client built on first use
    (limits' cluster storage asks a node for the slot map when made: start-up would wait on
    the network, and fail while the cluster does). Every key shares the link's prefix, so on a
    cluster the moving window's script runs on the deployment's one slot."""
    import redis
    from limits.storage import RedisStorage

    class OnClient(RedisStorage):
        def __init__(self) -> None:
            # limits builds its client from a pool: one never used (no I/O) stands in, then
            # its scripts are registered on ours, which get_connection() returns from then on.
            super().__init__("redis://", connection_pool=redis.ConnectionPool(),
                             key_prefix=key_prefix)
            self.storage = client
            self.initialize_storage("redis://")

    return OnClient()


#: The longest client counted as written: an address is shorter, an IPv6 one with its zone too.
_LONGEST = 64


def _bucket(client: str) -> str:
    """Whom ``client`` counts as: its /64 for IPv6 (an IPv4-mapped one as the IPv4 address it
    is), anything else as given, unless longer than :data:`_LONGEST`: then by its digest.

    The client is what the server reports, and a server that reads ``X-Forwarded-For`` too
    trustingly (uvicorn's ``--forwarded-allow-ips='*'``) reports whatever the client wrote there,
    12 KB of it: kept whole as a key, each would cost its length, not the few hundred bytes
    the cap of clients is worked out from (and, with a ':', a place in the /64 cache)."""
    if len(client) > _LONGEST:
        return "#" + hashlib.blake2b(client.encode("utf-8", "surrogatepass"),
                                     digest_size=16).hexdigest()
    return _slash64(client) if ":" in client else client


_MAPPED = bytes(10) + b"\xff\xff"  # ::ffff:0:0/96, IPv4 on a dual-stack socket


@functools.lru_cache(maxsize=4096)
def _slash64(client: str) -> str:
    """``client``'s /64 written as ``ipaddress`` writes it (``2001:db8:1:2::/64``; the Redis keys
    of a fleet use it), an IPv4-mapped address as the IPv4 address, anything else as given.

    ``inet_pton`` in C rather than ``ipaddress``, which took 16 µs per address: a flood from
    more /64s than the cache holds paid that twice a request."""
    try:
        packed = socket.inet_pton(socket.AF_INET6, client)
    except (OSError, ValueError):  # such as a scope (fe80::1%eth0): ipaddress reads it, slowly
        try:
            address = ipaddress.IPv6Address(client)
        except ValueError:
            return client
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    if packed[:12] == _MAPPED:
        return socket.inet_ntop(socket.AF_INET, packed[12:])
    # inet_ntop writes as RFC 5952 says, and so as ipaddress does (tests/fallback/test_rate.py).
    return socket.inet_ntop(socket.AF_INET6, packed[:8] + bytes(8)) + "/64"
