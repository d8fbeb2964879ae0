"""What a failed Redis call says: which store, what failed, and what to change.

A wrong password is not an unusable override, and a refused connection is not a slow server:
each gets its own words, naming the store with its password masked and the host:port tried.
The text never quotes the server's reply or redis-py's message (a server may echo a command's
arguments, among them the password); only the local OS error (``Connection refused``) is kept.
"""

from __future__ import annotations

import re
from typing import Any

from failopen.exceptions import ConfigError
from failopen.stores.cluster import is_cluster_url, parse_cluster_url
from failopen.stores.sentinel import is_sentinel_url, parse_sentinel_url

__all__ = ["explain_failure"]

_FIX_URL = "redis://[USER]:PASSWORD@host:port/db"


def _settings(client: Any) -> dict[str, Any]:
    try:
        return dict(client.connection_pool.connection_kwargs)
    except (AttributeError, TypeError):
        return {}


def _address(settings: dict[str, Any]) -> str:
    """``host:port`` (or the socket path) redis-py connects to, from its pool settings."""
    if settings.get("path"):
        return str(settings["path"])
    host, port = str(settings.get("host") or "localhost"), settings.get("port") or 6379
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _address_shown(shown: str) -> str:
    """``host:port`` (or the socket path) as the masked store URL writes it."""
    scheme, _, rest = shown.partition("://")
    if scheme.lower() == "unix":
        return rest.split("?", 1)[0]
    authority = rest.split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]
    return authority if authority.rpartition(":")[2].isdigit() else f"{authority}:6379"


def _os_reason(exc: BaseException) -> str:
    """The OS's words for a failed connection (``Connection refused``), else the error type."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and isinstance(seen.strerror, str) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


def explain_failure(exc: BaseException, *, what: str, shown: str, client: Any,
                    prefix: str) -> str:
    """One line for ``client``'s failed Redis call ``what``; ``shown`` is the store URL with
    its password masked."""
    from redis import exceptions as rex

    if is_cluster_url(shown):
        return _cluster_failure(exc, what=what, store=f"Redis store {shown}", shown=shown,
                                client=client, prefix=prefix)
    store, settings = f"Redis store {shown}", _settings(client)
    if is_sentinel_url(shown):
        sentinel = _sentinel_failure(exc, what=what, store=store, shown=shown, client=client)
        if sentinel is not None:
            return sentinel
        address = _primary(shown, client)
    else:
        address = _address(settings)
    if not is_sentinel_url(shown) and address.lower() != _address_shown(shown).lower():
        # redis-py read the URL otherwise than it is written (an unescaped "/" in a password
        # ends the host part early): its host and port may hold part of the password.
        return (f"{store}: {what} failed, and the store URL does not parse as written: "
                "percent-encode any '/', '?', '#' or '@' in its password (FAILOPEN_STORE)")
    if isinstance(exc, (rex.AuthenticationError, rex.AuthenticationWrongNumberOfArgsError)):
        if settings.get("password"):
            fix = ("the server refused the user or password of the store URL: correct them in "
                   f"FAILOPEN_STORE ({_FIX_URL}) or FAILOPEN_STORE_PASSWORD")
        else:
            fix = ("the server wants a password and the store URL gives none: add it to "
                   f"FAILOPEN_STORE_PASSWORD (or to FAILOPEN_STORE: {_FIX_URL})")
        return f"{store}: authentication failed ({what}): {fix}"
    if isinstance(exc, rex.NoPermissionError):
        return (f"{store}: permission denied ({what}): the store URL's Redis user may not run "
                f"{what} on the keys {prefix}*; grant it read, write and script rights on them "
                "(ACL SETUSER), or use a user that has them in FAILOPEN_STORE")
    if isinstance(exc, rex.TimeoutError):
        return (f"{store}: no answer from {address} in time ({what}); is the server "
                "up, and reachable from here?")
    if isinstance(exc, (rex.ConnectionError, OSError)):
        return (f"{store}: connection to {address} failed ({what}: "
                f"{_os_reason(exc)}); "
                "check where FAILOPEN_STORE points, and that the server is up")
    if isinstance(exc, rex.ResponseError):  # READONLY, OOM, LOADING, a disabled command...
        return f"{store}: the server refused {what} ({type(exc).__name__})"
    return (f"{store}: {address} did not answer {what} as Redis does "
            f"({type(exc).__name__}); is that the Redis server's host and port?")


def _sentinel_count(shown: str) -> int:
    try:
        return len(parse_sentinel_url(shown).sentinels)
    except ConfigError:
        return 1


def _where(shown: str) -> str:
    try:
        return parse_sentinel_url(shown).where()
    except ConfigError:  # a URL shown as scheme://*** (no telling its hosts): say no more
        return "the primary the sentinels name"


def _primary(shown: str, client: Any) -> str:
    """The primary the sentinels last named (``host:port``), else which primary it is."""
    where = _where(shown)
    try:
        host, port = client.connection_pool.master_address
    except (AttributeError, TypeError, ValueError):
        return where
    return f"{where}, at [{host}]:{port}" if ":" in str(host) else f"{where}, at {host}:{port}"


def _sentinel_failure(exc: BaseException, *, what: str, store: str, shown: str,
                      client: Any) -> str | None:
    """The words for a Sentinel's own failures (no sentinel answered, none knows the service, the
    old primary now a replica); None for a failure of the primary itself."""
    from redis import exceptions as rex
    from redis.sentinel import MasterNotFoundError

    if isinstance(exc, MasterNotFoundError):
        # redis-py's text lists each sentinel's error; its class names say which, and are no
        # secret (the text itself is never quoted: a server may echo the password).
        text = str(exc)
        # Each sentinel that failed is listed by its client's repr ("...,host=h,port=p,...").
        failed = len(re.findall(r"[(,]host=[^,()]*,port=\d+", text))
        if ("AuthenticationError" in text or "AuthenticationWrongNumberOfArgsError" in text) \
                and _settings(client).get("password"):
            why = ("a sentinel refused the password: failopen authenticates to the sentinels "
                   "with the store's password (FAILOPEN_STORE or FAILOPEN_STORE_PASSWORD); give "
                   "them that password (requirepass in sentinel.conf)")
        elif "AuthenticationError" in text:
            why = ("a sentinel wants a password and the store gives none: add it to "
                   "FAILOPEN_STORE_PASSWORD (the sentinels and the servers take the same one)")
        elif failed and failed >= _sentinel_count(shown):
            why = ("no sentinel answered: are they up, and is each host:port a sentinel's "
                   "(26379 by default)?")
        else:
            why = ((f"{failed} sentinel(s) did not answer, and " if failed else "")
                   + "the sentinels that answered name no healthy primary for that service: "
                   "is that the name in 'sentinel monitor', or is a failover under way?")
        return f"{store}: {_where(shown)}: not found ({what}): {why}"
    if isinstance(exc, rex.ConnectionError) and "now a slave" in str(exc):
        return (f"{store}: {what} reached the previous primary, now a replica: a failover "
                "happened; the next call asks the sentinels for the new one")
    return None


def _refusal_within(exc: BaseException) -> BaseException:
    """The password or permission refusal that ``exc`` wraps, else ``exc``: redis-py's cluster
    client wraps what each node answered while it asked for the slot map in one
    RedisClusterException, so a wrong password would read as "no node answered"."""
    from redis import exceptions as rex

    refusals = (rex.AuthenticationError, rex.AuthenticationWrongNumberOfArgsError,
                rex.NoPermissionError)
    seen: BaseException | None = exc
    for _ in range(8):  # a chain is short; a cycle (a context pointing back) must not hang
        if seen is None:
            break
        if isinstance(seen, refusals):
            return seen
        seen = seen.__cause__ or seen.__context__
    return exc


def _not_in_cluster_mode(exc: BaseException) -> bool:
    """True when a node answered but refused CLUSTER SLOTS: redis-py then raises a
    RedisClusterException from the ResponseError, and wraps it with those of the other nodes."""
    from redis import exceptions as rex

    seen: BaseException | None = exc
    for _ in range(8):  # a short chain; a cycle must not hang
        if seen is None:
            return False
        if isinstance(seen, rex.RedisClusterException) \
                and type(seen.__context__) is rex.ResponseError:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _cluster_failure(exc: BaseException, *, what: str, store: str, shown: str, client: Any,
                     prefix: str) -> str:
    """The words for a cluster's failures: no slot map (a failover under way, no node up), a
    slot without its primary, a node that went away, as well as a password refused."""
    from redis import exceptions as rex

    try:
        where = parse_cluster_url(shown).where()
    except ConfigError:  # shown as scheme://***: no telling its hosts
        where = "the cluster"
    exc = _refusal_within(exc)
    node = getattr(exc, "connection", None)
    host, port = getattr(node, "host", None), getattr(node, "port", None)
    address = (f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}") if host else where
    if isinstance(exc, (rex.AuthenticationError, rex.AuthenticationWrongNumberOfArgsError)):
        given = getattr(client, "authenticated", False)
        fix = ("the nodes refused the user or password of the store URL: correct them in "
               "FAILOPEN_STORE or FAILOPEN_STORE_PASSWORD" if given else "the nodes want a "
               "password and the store URL gives none: add it to FAILOPEN_STORE_PASSWORD")
        return f"{store}: authentication failed ({what}): {fix}"
    if isinstance(exc, rex.NoPermissionError):
        return (f"{store}: permission denied ({what}): the store URL's Redis user may not run "
                f"{what} on the keys {prefix}* (or CLUSTER SLOTS); grant it those rights")
    if _not_in_cluster_mode(exc):
        return (f"{store}: {address} answers, but not as a cluster node (it refused CLUSTER "
                "SLOTS): for a single server use a redis:// store URL, or turn the nodes' "
                "cluster-enabled on")
    if isinstance(exc, (rex.ClusterDownError, rex.TryAgainError, rex.RedisClusterException)):
        # Slots without a primary (one died, its replica not yet promoted), or no node gave a
        # slot map: the cluster's failover takes its node timeout; the next call asks again.
        return (f"{store}: {where} cannot serve {what} now ({type(exc).__name__}): a primary "
                "is down and no replica promoted yet, or no node answered; is a failover under "
                "way? The next call asks the nodes for the slot map again")
    if isinstance(exc, rex.TimeoutError):
        return f"{store}: no answer from {address} in time ({what}); is that node up?"
    if isinstance(exc, (rex.ConnectionError, OSError)):
        return (f"{store}: connection to {address} failed ({what}: {_os_reason(exc)}); if a "
                "failover is under way the next call finds the promoted replica; else check "
                "where FAILOPEN_STORE points, and that the nodes are up")
    if isinstance(exc, rex.ResponseError):
        return f"{store}: the cluster refused {what} ({type(exc).__name__})"
    return (f"{store}: {address} did not answer {what} as a Redis Cluster node does "
            f"({type(exc).__name__}); is the cluster mode on (cluster-enabled yes)?")
