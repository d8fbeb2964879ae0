"""Redis Cluster store URLs: the store, the fleet and the fallback on a cluster, every key of one
deployment in one hash slot, so each Lua script stays atomic and nothing scans across nodes.

``redis+cluster://[[USER]:PASSWORD@]host[:port][,host[:port]...]``, and ``rediss+cluster://``
for TLS (``ssl_*`` query options as redis-py spells them, as for Sentinel). A node's port
defaults to 6379; the hosts are where the client first asks for the slot map (any one that
answers will do), and a cluster has database 0 only.

**The hash tag.** Redis Cluster places a key by the text between its first ``{`` and the next
``}``. ``FAILOPEN_REDIS_PREFIX`` becomes that tag: ``failopen:`` is used as ``{failopen}:``
(``mysite:failopen:`` as ``{mysite:failopen}:``). A prefix that already has a tag of its own
(``mysite:{failopen}:``) is used as written. A prefix whose tag would be empty (``:``, ``{}x:``)
or would not close inside the prefix (``fail{open:``), or a ``}`` with no ``{`` before it, is a
ConfigError at start-up: its keys would spread over the cluster.

**Failover.** redis-py's RedisCluster refreshes its slot map when a node answers MOVED or a
connection fails; until the replica is promoted its calls fail like a lost connection (the store
names them), and the fleet decides from the last state it knew, as it does without Redis.

Parsing makes no I/O and never shows a password; a client asks a node for the slot map on its
first call, not when it is made (opening a store never waits on the network).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.exceptions import ConfigError
from failopen.stores.sentinel import host_port, split_hosts_url, tls_options
from failopen.stores.urls import CLUSTER_SCHEMES, mask_url

__all__ = ["CLUSTER_SCHEMES", "ClusterURL", "LazyCluster", "cluster_errors", "cluster_prefix",
           "is_cluster_url", "open_cluster_client", "parse_cluster_url", "slot_holder"]

DEFAULT_PORT = 6379
_FORM = "redis+cluster://[:PASSWORD@]host:port[,host:port...]"


@dataclass(frozen=True)
class ClusterURL:
    """A Cluster store URL read without its password."""

    nodes: tuple[tuple[str, int], ...]
    tls: bool = False
    username: str | None = None
    tls_options: dict[str, Any] = field(default_factory=dict)

    def where(self) -> str:
        """``the cluster of h1:7000, h2:7001`` (the nodes asked first), for errors and logs."""
        return "the cluster of " + ", ".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}"
                                             for h, p in self.nodes)


def is_cluster_url(url: object) -> bool:
    """True for a ``redis+cluster://`` or ``rediss+cluster://`` URL."""
    return isinstance(url, str) and "://" in url \
        and url.partition("://")[0].lower() in CLUSTER_SCHEMES


def parse_cluster_url(url: str) -> ClusterURL:
    """The nodes and TLS settings of ``url`` (a password in it is skipped); ConfigError, URL
    masked, saying what to change."""
    shown = mask_url(url)
    scheme = url.partition("://")[0].lower()
    tls = scheme == "rediss+cluster"

    def bad(why: str) -> ConfigError:
        return ConfigError(f"FAILOPEN_STORE: {shown}: {why}; expected {_FORM}"
                           + (" (rediss+cluster:// for TLS)" if tls else ""))

    username, authority, _, path, query = split_hosts_url(url, bad)
    nodes = tuple(host_port(item, bad, default_port=DEFAULT_PORT, what="cluster node")
                  for item in authority.split(","))
    if path.strip("/") not in ("", "0"):
        raise bad("a cluster has database 0 only: remove the path (give each deployment its "
                  "own FAILOPEN_REDIS_PREFIX instead)")
    return ClusterURL(nodes=nodes, tls=tls, username=username,
                      tls_options=tls_options(query, tls, bad, kind="Cluster"))


def cluster_prefix(prefix: str) -> str:
    """``prefix`` as every key on a cluster starts: with a hash tag (``failopen:`` ->
    ``{failopen}:``), or as written when it has one of its own. ConfigError for a prefix whose
    keys would not share one slot."""
    def bad(why: str) -> ConfigError:
        return ConfigError(f"FAILOPEN_REDIS_PREFIX: {prefix!r} {why}, so the keys of one "
                           "deployment would spread over the cluster's nodes and its scripts "
                           "fail (CROSSSLOT); use a prefix such as 'mysite:failopen:' (used as "
                           "'{mysite:failopen}:') or one with a tag of its own, 'mysite:{fo}:'")

    opening = prefix.find("{")
    if opening >= 0:
        closing = prefix.find("}", opening + 1)
        if closing < 0:
            raise bad("opens a hash tag '{' that it does not close")
        if closing == opening + 1:
            raise bad("has an empty hash tag '{}' (Redis then hashes each key whole)")
        return prefix  # the operator's own tag, every key after it shares it
    if "}" in prefix:
        raise bad("has a '}' without a '{' before it")
    tag = prefix.rstrip(":")
    if not tag:
        raise bad("would make an empty hash tag")
    return "{" + tag + "}" + prefix[len(tag):]


def cluster_errors() -> tuple[type[BaseException], ...]:
    """What a cluster call raises besides redis-py's RedisError and OSError: its slot-map
    refresh fails with RedisClusterException (no RedisError) while slots are uncovered (a
    primary dead, its replica not yet promoted) or no node answers."""
    from redis.exceptions import RedisClusterException

    return (RedisClusterException,)


class LazyCluster:
    """A redis-py RedisCluster built on its first call (building one asks a node for the slot
    map), then used as one; scripts are registered without a round trip. Thread-safe."""

    def __init__(self, build: Callable[[], Any], *, slot_key: str) -> None:
        self._build = build
        self._client: Any = None
        self._lock = threading.Lock()
        renew_locks_after_fork(self, "_lock")  # a fork while building must not hang the child
        #: A key of this deployment: its slot's primary answers WAIT (see :meth:`wait`).
        self.slot_key = slot_key
        self.authenticated = False

    def cluster(self) -> Any:
        """The RedisCluster, built now if not yet (raises what building raised; the next call
        tries again)."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._build()
                client = self._client
        return client

    def __getattr__(self, name: str) -> Any:
        # Only for names this class lacks (get, set, mget, evalsha, ...): the cluster's method,
        # looked up when called. Building the cluster is I/O and may fail, which must happen
        # inside the caller's call (its errors handled there), not where it names the method.
        if name.startswith("__"):
            raise AttributeError(name)

        def method(*args: Any, **kwargs: Any) -> Any:
            return getattr(self.cluster(), name)(*args, **kwargs)

        method.__name__ = name
        return method

    def get_encoder(self) -> Any:
        """redis-py's default encoder, as the cluster is built with (no I/O: for Script)."""
        from redis._parsers.encoders import Encoder

        encoder: Any = Encoder  # redis-py leaves it untyped
        return encoder("utf-8", "strict", False)

    def register_script(self, script: str) -> Any:
        """A redis-py Script run through this client (its SHA computed here, no round trip)."""
        from redis.commands.core import Script

        return Script(self, script)  # type: ignore[arg-type]

    def wait(self, replicas: int, timeout_ms: int) -> int:
        """``WAIT`` on the primary that holds this deployment's slot (a keyless command would
        go to any node, whose replicas never saw the write)."""
        cluster = self.cluster()
        node = cluster.get_node_from_key(self.slot_key)
        return int(cluster.execute_command("WAIT", replicas, timeout_ms, target_nodes=node))

    def close(self) -> None:
        """Release the connections (nothing to do before the first call)."""
        if self._client is not None:
            self._client.close()


def open_cluster_client(url: str, *, slot_key: str, **kwargs: Any) -> LazyCluster:
    """A cluster client for ``url``: ``kwargs`` (timeouts, ``password``, ``retry``) apply to
    every node's connections. No I/O until its first call."""
    parsed = parse_cluster_url(url)
    auth: dict[str, Any] = {}
    if parsed.username:
        auth["username"] = parsed.username
    tls: dict[str, Any] = {"ssl": True, **parsed.tls_options} if parsed.tls else {}
    options = {**kwargs, **auth, **tls}
    if options.get("password") is None:
        options.pop("password", None)
    # Deprecated for a cluster's nodes (redis-py 6+: timeouts are retried by the retry policy,
    # which is no retry here, below).
    options.pop("retry_on_timeout", None)

    def build() -> Any:
        from redis.backoff import NoBackoff
        from redis.cluster import ClusterNode, RedisCluster
        from redis.retry import Retry

        node: Any = ClusterNode  # redis-py leaves it untyped
        nodes = [node(host, port) for host, port in parsed.nodes]
        # No retry with backoff inside one call (redis-py's default sleeps up to seconds):
        # the caller's next call is the retry, on a slot map refreshed by this one's failure.
        options.setdefault("retry", Retry(NoBackoff(), 0))
        return RedisCluster(startup_nodes=nodes, **options)

    client = LazyCluster(build, slot_key=slot_key)
    client.authenticated = bool(options.get("password"))  # for an error's words, no secret
    return client


def slot_holder(client: LazyCluster, key: str) -> dict[str, Any]:
    """Where ``key`` lives: its hash slot (``CLUSTER KEYSLOT``), the primary that holds it in the
    slot map, and the replicas that primary says are in sync (``INFO replication``: the slot
    map a node gives may leave out a replica it has not yet heard from). Raises what redis-py
    raises."""
    cluster = client.cluster()
    slot = int(cluster.execute_command("CLUSTER KEYSLOT", key))
    primary = cluster.get_node_from_key(key)
    replication = cluster.get_redis_connection(primary).info("replication")
    replicas = [value for name, value in sorted(replication.items())
                if name.startswith("slave") and isinstance(value, dict)
                and value.get("state") == "online"]
    return {"slot": slot, "primary": _named(primary.host, primary.port),
            "replicas": [_named(str(r.get("ip")), r.get("port")) for r in replicas]}


def _named(host: str, port: Any) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
