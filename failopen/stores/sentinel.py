"""Redis Sentinel store URLs: the store, the fleet and the fallback follow the primary a Sentinel
names, so a failover moves them to the new primary without a restart.

``redis+sentinel://[[USER]:PASSWORD@]host[:port][,host[:port]...]/service_name[/db]``, and
``rediss+sentinel://`` for TLS to the sentinels and to the Redis servers alike (``ssl_*`` query
options as redis-py spells them: ``ssl_ca_certs``, ``ssl_cert_reqs``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_check_hostname``). A sentinel's port defaults to 26379, the db to 0.

One password (the URL's, or ``FAILOPEN_STORE_PASSWORD``) authenticates to the sentinels and to
the servers, as ``limits`` reads such a URL and as the Bitnami chart configures Sentinel. A
sentinel without a password of its own accepts it (Redis 6 and later let the default user
authenticate with any password), so one setting covers both set-ups; there is no second password
to keep apart. Whoever can send a sentinel commands can point the service at a server of their
own (``SENTINEL REMOVE`` then ``MONITOR``), and failopen would read its override there and send it
the password: give the sentinels ``requirepass`` (``failopen check`` says when they answer
without one), list only sentinels you run, and prefer ``rediss+sentinel://`` with certificates
checked, so a server named by a sentinel must also hold your certificate.

Parsing makes no I/O and never shows a password: every error names the URL through
:func:`~failopen.stores.urls.mask_url`. redis-py is imported when a client is built.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

from failopen.exceptions import ConfigError
from failopen.stores.urls import SENTINEL_SCHEMES, mask_url, split_password

__all__ = ["SENTINEL_SCHEMES", "SentinelURL", "await_replica", "host_port", "is_sentinel_url",
           "open_client", "open_sentinels", "parse_sentinel_url", "split_hosts_url", "tls_options"]

DEFAULT_SENTINEL_PORT = 26379
logger = logging.getLogger("failopen.fleet")

_FORM = "redis+sentinel://[:PASSWORD@]host:port[,host:port...]/service_name/db"
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
_IPV6 = re.compile(r"\[[0-9A-Fa-f:.]{2,45}\]")
_SERVICE = re.compile(r"[A-Za-z0-9._-]{1,100}")
# TLS settings passed to every connection (sentinels and servers); values checked here so a
# typo stops start-up rather than every connection.
_TLS_OPTIONS = frozenset({"ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile",
                          "ssl_cert_reqs", "ssl_check_hostname"})
_CERT_REQS = frozenset({"none", "optional", "required"})
_BOUNDS = ("socket_timeout", "socket_connect_timeout", "health_check_interval")
_BOOLEAN = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


@dataclass(frozen=True)
class SentinelURL:
    """A Sentinel store URL read without its password."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    tls: bool = False
    username: str | None = None
    tls_options: dict[str, Any] = field(default_factory=dict)

    def where(self) -> str:
        """``the primary of 'svc' (sentinels h1:26379, h2:26379)``, for errors and logs."""
        hosts = ", ".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.sentinels)
        return f"the primary of {self.service!r} (sentinels {hosts})"


def is_sentinel_url(url: object) -> bool:
    """True for a ``redis+sentinel://`` or ``rediss+sentinel://`` URL."""
    return isinstance(url, str) and url.partition("://")[0].lower() in SENTINEL_SCHEMES \
        and "://" in url


def parse_sentinel_url(url: str) -> SentinelURL:
    """The sentinels, service, db and TLS settings of ``url`` (a password in it is skipped);
    ConfigError, URL masked, saying what to change."""
    shown = mask_url(url)
    scheme, _, rest = url.partition("://")

    def bad(why: str) -> ConfigError:
        return ConfigError(f"FAILOPEN_STORE: {shown}: {why}; expected {_FORM}"
                           + (" (rediss+sentinel:// for TLS)" if scheme.lower() == "rediss+sentinel"
                              else ""))

    username, authority, slash, path, query = split_hosts_url(url, bad)
    sentinels = tuple(host_port(item, bad, default_port=DEFAULT_SENTINEL_PORT)
                      for item in authority.split(","))
    if not slash or not path.strip("/"):
        raise bad("no service name (the name the sentinels monitor, as in "
                  "'sentinel monitor <name> ...')")
    service, _, db_text = path.partition("/")
    if not _SERVICE.fullmatch(service):
        raise bad(f"the service name {service[:40]!r} is not a name a sentinel monitors "
                  "(letters, digits, '.', '_', '-')" if service.isprintable()
                  else "the service name is not printable")
    db_text = db_text.rstrip("/")
    if db_text and (not db_text.isdigit() or not db_text.isascii() or len(db_text) > 5):
        raise bad(f"the db {db_text[:20]!r} is not a database number (0, 1, ... 15 by default)"
                  if db_text.isprintable() else "the db is not a database number")
    return SentinelURL(sentinels=sentinels, service=service, db=int(db_text or 0),
                       tls=scheme.lower() == "rediss+sentinel", username=username,
                       tls_options=tls_options(query, scheme.lower() == "rediss+sentinel", bad))


def split_hosts_url(url: str, bad: Callable[[str], ConfigError]
                    ) -> tuple[str | None, str, str, str, str]:
    """A multi-host URL's user name (None when none), its ``host:port,...`` list, the ``/`` after
    it ("" when none), its path and its query; ``bad(why)`` for a fragment. The password goes
    first, read as redis-py and urlsplit read it (a ConfigError when a "/", "?" or "#" in it would
    cut the userinfo short): what is left holds no secret."""
    rest = split_password(url)[0].partition("://")[2]
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    userinfo, at, _hosts = authority.rpartition("@")
    tail = rest[len(userinfo) + 1:] if at else rest
    tail, _, fragment = tail.partition("#")
    if fragment:
        raise bad("a '#' fragment means nothing here")
    tail, _, query = tail.partition("?")
    authority, slash, path = tail.partition("/")
    username = unquote(userinfo.partition(":")[0]) or None if userinfo else None
    return username, authority, slash, path, query


def host_port(item: str, bad: Any, *, default_port: int, what: str = "sentinel") -> tuple[str, int]:
    """``host:port`` of one of a URL's hosts (a sentinel's, a cluster node's); ``bad(why)``
    makes the ConfigError."""
    if not item:
        raise bad(f"a {what} host is missing (host:port, several separated by ',')")
    if item.startswith("["):
        host, _, port_text = item.partition("]")
        host += "]"
        if port_text and not port_text.startswith(":"):
            raise bad(f"the {what} {item[:60]!r} is not host:port")
        port_text = port_text[1:]
        if not _IPV6.fullmatch(host):
            raise bad(f"the {what} host {host[:60]!r} is not an IPv6 address")
        host = host[1:-1]
    else:
        host, _, port_text = item.partition(":")
        if not _HOST.fullmatch(host):
            raise bad(f"the {what} host {host[:60]!r} is not a host name or address"
                      if host.isprintable() else f"a {what} host is not printable")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not port_text.isascii() or not 0 < int(port_text) < 65536:
        raise bad(f"the {what} port {port_text[:20]!r} is not a port from 1 to 65535"
                  if port_text.isprintable() else f"a {what} port is not a number")
    return host, int(port_text)


def tls_options(query: str, tls: bool, bad: Any, *, kind: str = "Sentinel") -> dict[str, Any]:
    """The ``ssl_*`` options of a URL's query (checked: a typo stops start-up), for redis-py."""
    options: dict[str, Any] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == "password":
            continue  # read by split_password, passed beside the URL
        if name not in _TLS_OPTIONS:
            raise bad(f"the option {name[:40]!r} is not one a {kind} URL takes (only "
                      + ", ".join(sorted(_TLS_OPTIONS)) + ")"
                      if name.isprintable() else "an option name is not printable")
        if not tls:
            raise bad(f"{name} applies to TLS only: use rediss+{kind.lower()}://")
        if name == "ssl_cert_reqs" and value.lower() not in _CERT_REQS:
            raise bad("ssl_cert_reqs is none, optional or required")
        if name == "ssl_check_hostname":
            if value.lower() not in _BOOLEAN:
                raise bad("ssl_check_hostname is true or false")
            options[name] = _BOOLEAN[value.lower()]
        else:
            options[name] = value.lower() if name == "ssl_cert_reqs" else value
    return options


def open_client(url: str, **kwargs: Any) -> Any:
    """A redis-py client for a store URL: ``Redis.from_url`` for ``redis://`` and the like, a
    Sentinel-managed one (it asks the sentinels for the primary on every new connection, and
    drops its connections when the primary changes) for ``redis+sentinel://``.

    ``kwargs`` (timeouts, retry, ``password``) apply to the servers and the sentinels alike.
    Raises ValueError for a URL redis-py cannot read (callers show it masked).
    """
    import redis

    if not is_sentinel_url(url):
        return redis.Redis.from_url(url, **kwargs)
    from redis import sentinel as redis_sentinel
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # redis-py leaves its Sentinel class untyped: called through Any.
    sentinel_class: Any = redis_sentinel.Sentinel
    parsed = parse_sentinel_url(url)
    auth: dict[str, Any] = {}
    if parsed.username:
        auth["username"] = parsed.username
    if kwargs.get("password"):
        auth["password"] = kwargs["password"]
    tls: dict[str, Any] = {"ssl": True, **parsed.tls_options} if parsed.tls else {}
    # The sentinels get the same bounds as the servers: given sentinel_kwargs (for the password)
    # redis-py copies no timeout to them, and a frozen sentinel would freeze every new
    # connection behind it.
    bounds: dict[str, Any] = {name: kwargs[name] for name in _BOUNDS if name in kwargs}
    # No retry against one sentinel: the next sentinel in the list is the retry (redis-py's
    # default would back off seconds on a sentinel that is down before asking the next).
    bounds["retry"] = Retry(NoBackoff(), 0)
    sentinel = sentinel_class(list(parsed.sentinels), sentinel_kwargs=dict(bounds, **auth, **tls))
    return sentinel.master_for(parsed.service, db=parsed.db, **{**kwargs, **auth, **tls})


def await_replica(client: Any, *, timeout: float, shown: str, what: str,
                  errors: tuple[type[BaseException], ...]) -> bool:
    """After an override's write (or lift) on the primary: wait up to ``timeout`` for a replica
    to acknowledge it (``WAIT 1``); True when one did. Never raises: the write itself is done.

    Replication is asynchronous: without this, a primary killed a moment after the write leaves
    the sentinels to promote a replica that never saw it, and the fleet keeps the old override
    (a lifted force-off would go on bypassing until its own expiry). One WARNING says when no
    replica confirmed in time, so the operator checks the override after a failover.
    """
    try:
        # A little under the socket's own timeout, so Redis answers "0" before the socket gives up.
        acknowledged = int(client.wait(1, max(1, int(timeout * 800))))
    except errors:
        acknowledged = 0
    if acknowledged < 1:
        logger.warning(
            "the override's %s reached the primary of %s, and no replica confirmed it within "
            "%.1f s: if the primary fails before a replica copies it, the new primary will not "
            "have it; check it after a failover (failopen override show)", what, shown,
            timeout, extra={"event": "failopen.store_unreplicated", "store": shown})
    return acknowledged >= 1


def open_sentinels(url: str, *, timeout: float) -> list[str]:
    """The sentinels of ``url`` that answer a PING without a password (``host:port`` each), for
    ``failopen check``: anyone who reaches those can name another primary. One that does not
    answer, or wants a password, is not listed."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    parsed = parse_sentinel_url(url)
    tls: dict[str, Any] = {"ssl": True, **parsed.tls_options} if parsed.tls else {}
    found = []
    for host, port in parsed.sentinels:
        client = redis.Redis(host=host, port=port, socket_timeout=timeout,
                             socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0), **tls)
        try:
            if client.ping():
                found.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        except (redis.RedisError, OSError):
            pass  # down, or wants a password: either way not open
        finally:
            client.close()
    return found
