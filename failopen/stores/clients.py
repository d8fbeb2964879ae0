"""The kinds of Redis deployment a store URL names, each a small adapter chosen by scheme.

* ``redis://``, ``rediss://``, ``unix://`` — one server.
* ``redis+sentinel://``, ``rediss+sentinel://`` — the primary the sentinels name
  (:mod:`failopen.stores.sentinel`).
* ``redis+cluster://``, ``rediss+cluster://`` — a Redis Cluster, every key in one hash slot
  (:mod:`failopen.stores.cluster`).

Each kind says how its URL is checked (no I/O), how its client is opened, what its keys start
with, which errors its calls raise, whether an override's write waits for a replica (it must
outlive a failover), whether it may SCAN, and where the keys live (for ``failopen check`` and
``failopen fleet``).
The store, the fleet and the fallback ask the kind; none of them branches on a scheme.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from failopen.exceptions import ConfigError
from failopen.stores import cluster, sentinel
from failopen.stores.urls import CLUSTER_SCHEMES, SENTINEL_SCHEMES, mask_url

__all__ = ["KINDS", "RedisKind", "kind_of"]


def _check_server_url(url: str) -> None:
    scheme, _, rest = url.partition("://")
    if scheme.lower() == "unix" and not rest.startswith("/"):
        raise ConfigError(f"FAILOPEN_STORE: {mask_url(url)}: expected unix:///path/to/redis.sock")
    if scheme.lower() != "unix" and not rest.rpartition("@")[2].split("/")[0].split("?")[0]:
        raise ConfigError(f"FAILOPEN_STORE: {mask_url(url)}: expected redis://host:port/db")


def _open_one(url: str, *, slot_key: str, **kwargs: Any) -> Any:
    # One server, or the one primary a Sentinel names: every key is there, whatever its slot.
    return sentinel.open_client(url, **kwargs)


def _no_extra_errors() -> tuple[type[BaseException], ...]:
    return ()


def _nowhere(client: Any, key: str) -> dict[str, Any] | None:
    return None


@dataclass(frozen=True)
class RedisKind:
    """One kind of Redis deployment, as the store, the fleet and the fallback use it."""

    name: str
    schemes: frozenset[str]
    check: Callable[[str], object]
    _open: Callable[..., Any]
    keyspace: Callable[[str], str]
    replicated: bool
    #: Heartbeats are also found by SCAN (those of a failopen before their index): only where
    #: one server holds every key; a cluster spreads a SCAN over its nodes.
    scans: bool = True
    _extra_errors: Callable[[], tuple[type[BaseException], ...]] = _no_extra_errors
    locate: Callable[[Any, str], dict[str, Any] | None] = _nowhere

    def open(self, url: str, *, slot_key: str, **kwargs: Any) -> Any:
        """A redis-py client for ``url`` (``slot_key``: a key of this deployment, for a kind
        whose commands go where a key lives). Raises ValueError for a URL redis-py cannot read."""
        return self._open(url, slot_key=slot_key, **kwargs)

    def errors(self) -> tuple[type[BaseException], ...]:
        """What a failed call raises: counted as Redis being away, never a request's error."""
        import redis

        return (redis.RedisError, OSError, *self._extra_errors())


KINDS = (
    RedisKind("server", frozenset({"redis", "rediss", "unix"}), _check_server_url,
              _open_one, lambda prefix: prefix, replicated=False),
    # Behind Sentinel and on a cluster an override's write waits for a replica: replication is
    # asynchronous, and a failover a moment after the write would otherwise lose it.
    RedisKind("sentinel", SENTINEL_SCHEMES, sentinel.parse_sentinel_url, _open_one,
              lambda prefix: prefix, replicated=True),
    RedisKind("cluster", CLUSTER_SCHEMES, cluster.parse_cluster_url, cluster.open_cluster_client,
              cluster.cluster_prefix, replicated=True, scans=False,
              _extra_errors=cluster.cluster_errors, locate=cluster.slot_holder),
)
_BY_SCHEME = {scheme: kind for kind in KINDS for scheme in kind.schemes}


def kind_of(url: str) -> RedisKind:
    """The kind of Redis ``url`` names; ConfigError (URL masked) for another store URL."""
    kind = _BY_SCHEME.get(url.partition("://")[0].lower()) if "://" in url else None
    if kind is None:
        raise ConfigError(f"FAILOPEN_STORE: {mask_url(url)} is not a Redis URL")
    return kind
