"""Where overrides live, so every worker process that serves requests sees the same one.

* ``memory:`` — this process only (the default; fine for one worker).
* ``file:///path/to/override.json`` — every process on one machine. Writes are atomic
  (write, fsync, rename); readers poll a cheap ``lstat`` about once a second, off the request path.
  Whoever can write that file can switch enforcement off, so the file store trusts only what this
  user or root could have written: the directory must be owned by this user or root and not
  group- or world-writable (never ``/tmp``; use e.g. ``mkdir -m 0755 /run/failopen``), and the
  file must be a regular file (no symlink), owned by this user or root, not group- or
  world-writable. A bad directory is a ConfigError at start-up; a bad file is a StoreError, and
  the flag keeps the override it last knew.

A store answers three questions: what is the override (``load``), is there possibly a newer one
than I last loaded (``changed``, cheap), and record this one (``save``; None lifts it).

* ``redis://[:password@]host:port/db``, ``rediss://`` (TLS), ``unix:///path.sock`` — every
  process of a fleet, on any machine (:mod:`failopen.stores.redis`; ``failopen[redis]``). The
  override's expiry is a Redis TTL; the fleet also shares one status poller through it.
* ``redis+sentinel://[:password@]host:port[,host:port...]/service_name/db``,
  ``rediss+sentinel://`` (TLS) — the same, on the primary the sentinels name, followed through a
  failover (:mod:`failopen.stores.sentinel`).
* ``redis+cluster://[:password@]host:port[,host:port...]``, ``rediss+cluster://`` (TLS) — the
  same on a Redis Cluster, every key in the one hash slot the prefix's hash tag names
  (:mod:`failopen.stores.cluster`; the kinds of Redis: :mod:`failopen.stores.clients`).

A store URL may carry a password (``redis://:password@host``), so it is only ever shown through
:func:`mask_url`: in errors, logs, ``Config.describe()`` and ``repr``. A URL this version cannot
open is a ConfigError when the Config is built, not a failure on every request.
"""

from __future__ import annotations

from typing import Protocol

from failopen.exceptions import ConfigError
from failopen.secret import Secret
from failopen.stores.override import Override
from failopen.stores.redis import REDIS_SCHEMES, check_redis_url
from failopen.stores.urls import MASK, mask_url, shown_url, split_password

__all__ = [
    "OverrideStore", "check_store_url", "key_prefix", "mask_url", "open_store", "shown_url",
    "split_password",
]

_USE_INSTEAD = "use redis://host:port/db (a fleet), file:///path/override.json (every process " \
    "on one machine) or memory: (one process)"


class OverrideStore(Protocol):
    """Storage for the operator override shared by a fleet of processes."""

    def load(self) -> Override | None:
        """The stored override (expired ones included; the flag drops those). Raises StoreError."""
        ...

    def save(self, override: Override | None) -> None:
        """Store an override, or lift it with None. Raises StoreError."""
        ...

    def changed(self) -> bool:
        """Cheap: may ``load`` return something other than last time? Raises StoreError."""
        ...

    def describe(self) -> str:
        """Where the override lives, for logs and ``failopen override show``."""
        ...


def check_store_url(url: object) -> str:
    """``url`` when this version can open it (checked without I/O), else a ConfigError that
    shows the URL masked and says what to use instead."""
    from failopen.stores.file import parse_file_url

    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"FAILOPEN_STORE: expected a store URL; {_USE_INSTEAD}")
    if url.startswith("memory:"):
        return url
    if url.startswith("file://"):
        parse_file_url(url)
        return url
    scheme = url.partition(":")[0]
    if url.partition("://")[1] and scheme.lower() in REDIS_SCHEMES:
        check_redis_url(url)
        return url
    shown = mask_url(url)
    what = ("the value (not shown: it may hold a password) is not a URL" if shown == MASK
            else f"{shown} is not a store URL this version can open")
    raise ConfigError(f"FAILOPEN_STORE: {what}; {_USE_INSTEAD}")


def key_prefix(url: str, prefix: str) -> str:
    """What the keys of ``url``'s store start with, given ``FAILOPEN_REDIS_PREFIX``: on a
    cluster with its hash tag (``{failopen}:``), else ``prefix``. ConfigError, saying what to
    change, for a prefix a cluster cannot keep in one slot."""
    if "://" in url and url.partition("://")[0].lower() in REDIS_SCHEMES:
        from failopen.stores.clients import kind_of

        return kind_of(url).keyspace(prefix)
    return prefix


def open_store(url: str, *, prefix: str = "failopen:",
               password: Secret | str | None = None) -> OverrideStore:
    """Open the store named by a ``FAILOPEN_STORE`` URL (ConfigError, URL masked, if it cannot).

    ``prefix`` (``FAILOPEN_REDIS_PREFIX``) and ``password`` (``FAILOPEN_STORE_PASSWORD``; a
    password in the URL works too) apply to a Redis store only. Opening makes no I/O.
    """
    from failopen.stores.file import FileStore
    from failopen.stores.memory import MemoryStore

    check_store_url(url)
    if url.startswith("memory:"):
        return MemoryStore()
    if url.startswith("file://"):
        return FileStore.from_url(url)
    from failopen.stores.redis import RedisStore

    if isinstance(password, Secret):
        password = password.reveal()
    return RedisStore(url, prefix=prefix, password=password or None)
