"""The Redis store: one override, one status reading and one poller for a whole fleet.

Keys, all under ``FAILOPEN_REDIS_PREFIX`` (default ``failopen:``), so several sites share a Redis:

* ``override`` — the operator's override as JSON. Its expiry is the key's TTL (``PX``), so a
  forgotten override lapses by itself even while every process is down.
* ``reading`` — the latest status reading, published by the leader (and by a process that
  confirmed an outage for a request).
* ``leader`` — the poller's lease (``SET NX PX``; renewed and released only by its holder).
* ``probe`` — the latest verify probe result, published by the leader (only with
  ``FAILOPEN_EVIDENCE=status,probe``).
* ``confirm`` — a short lock: one on-demand outage confirmation per ``confirm_ttl`` per fleet.
* ``epoch`` — a marker without TTL; its absence means the keys were lost (FLUSHALL, a fresh
  replica), which is not the same as "no override". Put back after a loss with a new random
  value (:mod:`failopen.engine.fleet_override`); whoever puts it back (a member's restore, or
  an operator's lift) also writes ``fallback:since`` (Redis's clock, in ms): the fallback's
  record of used solutions (``fallback:used:<key>``, :mod:`failopen.fallback.used`) is complete
  only from then on.
* ``proc:<id>`` — each process's heartbeat (TTL one minute), for ``failopen fleet``, naming the
  override it applied (:mod:`failopen.engine.override_reach`); ``procs`` indexes them (a sorted
  set, scored by when each lapses), so nothing scans the keyspace.

On a Redis Cluster (:mod:`failopen.stores.cluster`) the prefix carries a hash tag
(``{failopen}:``): every key above lives in one hash slot, on one primary.

The reading, the lease, the confirmation lock and the heartbeats carry ``page``, a hash of the
status page and global component their writer watches (the probe result and a probing leader's
lease ``verify``, a hash of the verify URL): a process acts only on its own
(:mod:`failopen.engine.fleet_identity`). Give each deployment its own prefix or database all the
same: the override is shared by prefix.

Whoever can write these keys can switch protection off, as with the file store: give Redis a
password or an ACL and keep it off public networks. The URL's password is shown only masked.

redis-py is imported when a store is opened, never by ``import failopen``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import secrets
import threading
from typing import Any

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.exceptions import ConfigError, StoreError, StoreUnavailable
from failopen.stores import _redis_lua as lua
from failopen.stores._redis_errors import explain_failure
from failopen.stores._redis_lua import NOW_MS_LUA, write_override_lua
from failopen.stores.clients import kind_of
from failopen.stores.override import Override
from failopen.stores.sentinel import await_replica
from failopen.stores.urls import REDIS_SCHEMES, mask_url, shown_url, split_password

__all__ = ["NOW_MS_LUA", "REDIS_SCHEMES", "RedisStore", "check_redis_url", "write_override_lua"]

_INSTALL = 'pip install "failopen[redis]"'
#: Seconds a command may take before the store counts as down (never on a request's path).
DEFAULT_TIMEOUT = 0.5
#: The one call a request may make (the fleet-wide confirmation lock, once per confirm_ttl at
#: most): a slow Redis costs it this much at worst, then the process confirms on its own.
CONFIRM_TIMEOUT = 0.1
_MAX_VALUE = 64 * 1024  # a value larger than this is garbage, not an override or a reading

def check_redis_url(url: str) -> None:
    """ConfigError (URL masked) unless redis-py is installed and ``url`` names a Redis."""
    if importlib.util.find_spec("redis") is None:
        raise ConfigError(
            f"FAILOPEN_STORE: {mask_url(url)} needs redis-py, which is not installed: "
            f"{_INSTALL}"
        )
    kind_of(url).check(url)


def _decode(raw: Any) -> str | None:
    """A stored value as text; StoreError for one no failopen process could have written."""
    if raw is None:
        return None
    if not isinstance(raw, bytes) or len(raw) > _MAX_VALUE:
        raise StoreError("the Redis store answered a value failopen did not write")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise StoreError("the Redis store answered a value failopen did not write") from None


def parse_override(raw: Any) -> Override | None:
    """The override in a stored value (None: no key); StoreError for garbage."""
    text = _decode(raw)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise StoreError("the stored override is not JSON") from None
    return Override.from_json(data)


def override_ttl_ms(override: Override, now: float) -> int | None:
    """The key's TTL in milliseconds (None: until lifted); at least 1 so SET PX accepts it."""
    if override.expires_at is None:
        return None
    return max(1, math.ceil((override.expires_at - now) * 1000))


class RedisStore:
    """Overrides and fleet state in Redis. Thread-safe (redis-py pools its connections)."""

    #: The runtime leaves the first read to the watcher thread: Django builds the runtime inside
    #: a worker's first request, which must not wait on a frozen or unreachable Redis. Until that
    #: first read the process enforces (the flag's default), which is the safe side.
    loads_in_background = True

    def __init__(self, url: str, *, prefix: str = "failopen:",
                 timeout: float = DEFAULT_TIMEOUT, clock_time: Any = None,
                 password: str | None = None) -> None:
        check_redis_url(url)
        # A password in the URL goes beside it: no attribute of the store holds it in clear.
        url, in_url = split_password(url)
        password = password or in_url
        import time

        self.kind = kind_of(url)
        self.url = url
        # On a cluster every key carries the prefix's hash tag ({failopen}:): one slot.
        self.prefix = prefix = self.kind.keyspace(prefix)
        self.authenticated = bool(password)
        self.shown = shown_url(url, password=bool(password))
        self._time = clock_time if clock_time is not None else time.time
        try:
            self.client: Any = self.kind.open(
                url, slot_key=prefix, socket_timeout=timeout, socket_connect_timeout=timeout,
                health_check_interval=0, retry_on_timeout=False, password=password,
            )
        except ValueError:
            # redis-py's message may quote the URL: replaced with the masked one.
            raise ConfigError(f"FAILOPEN_STORE: {self.shown} is not a Redis URL redis-py can "
                              "open; expected redis://[:password@]host:port/db") from None
        self._quick: Any = self.kind.open(
            url, slot_key=prefix, socket_timeout=min(timeout, CONFIRM_TIMEOUT),
            socket_connect_timeout=min(timeout, CONFIRM_TIMEOUT), health_check_interval=0,
            retry_on_timeout=False, password=password)
        self._errors = self.kind.errors()
        # Behind Sentinel or on a cluster an override's write waits for a replica (it must
        # survive a failover).
        self._replicated_within = timeout if self.kind.replicated else None
        self.key_override = prefix + "override"
        self.key_reading = prefix + "reading"
        self.key_probe = prefix + "probe"
        self.key_leader = prefix + "leader"
        self.key_confirm = prefix + "confirm"
        self.key_epoch = prefix + "epoch"
        self.key_fallback_since = prefix + "fallback:since"
        self.key_proc = prefix + "proc:"
        self.key_procs = prefix + "procs"
        self._renew = self.client.register_script(lua.RENEW)
        self._release = self.client.register_script(lua.RELEASE)
        self._restore = self.client.register_script(lua.RESTORE)
        self._save = self.client.register_script(lua.SAVE)
        self._beat = self.client.register_script(lua.BEAT)
        self._forget = self.client.register_script(lua.FORGET)
        self._live_beats = self.client.register_script(lua.LIVE_BEATS)
        self._save_keys = [self.key_epoch, self.key_override, self.key_fallback_since]
        self._confirm = self._quick.register_script(lua.CONFIRM)
        # The override value last read by a sync and the one last loaded: ``changed`` compares
        # the two without a round trip. ``_synced`` False: no sync yet (see ``changed``).
        self._synced = False
        #: Set by :class:`failopen.fleet.Fleet`: only its syncs read the override from now on.
        self.fleet_syncs = False
        self._synced_raw: Any = None
        self._loaded_raw: Any = object()
        # A sync's snapshot taken before this process wrote the override is older than what the
        # flag now holds: adopting it would drop an override just placed here (and a FLUSHALL at
        # that moment would restore the store without it). Writes are counted; a snapshot taken
        # before the latest write is not adopted (the next sync reads the new value).
        self._raw_lock = threading.Lock()
        renew_locks_after_fork(self, "_raw_lock")  # a fork mid-sync must not hang the child
        self._writes = 0
        self._snapshot_writes = 0

    def __repr__(self) -> str:
        return f"RedisStore({self.shown!r}, prefix={self.prefix!r})"

    def describe(self) -> str:
        """Where the override lives (password masked)."""
        return f"{self.shown} (prefix {self.prefix!r}, every process of the fleet)"

    def call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one Redis call; a failure is a StoreUnavailable that says what failed (a wrong
        password, a refused connection) and what to change, naming no secret."""
        try:
            return fn(*args, **kwargs)
        except self._errors as exc:
            raise StoreUnavailable(explain_failure(
                exc, what=what, shown=self.shown, client=self.client, prefix=self.prefix,
            )) from None

    # --- the override (the OverrideStore protocol) ---------------------------------------------

    def load(self) -> Override | None:
        """The override in Redis (None when there is none). Raises StoreError."""
        if self._synced:
            with self._raw_lock:
                raw = self._loaded_raw = self._synced_raw
        else:
            raw = self.call("GET", self.client.get, self.key_override)
            self._loaded_raw = raw
        return parse_override(raw)

    def save(self, override: Override | None) -> None:
        """Place an override (its expiry becomes the key's TTL), or lift it with None."""
        if override is None or override.expired(self._time()):
            # Lifted, or already over: nothing to place (SET PX refuses a TTL of zero or less).
            # The marker goes with the lift: a lift landing just after lost keys is the
            # operator's latest word, which no member's restore may then undo.
            self._write(None, lambda: self._save(keys=self._save_keys, args=["", 0]), "DEL")
            return
        value = json.dumps(override.to_json(), sort_keys=True)
        ttl = override_ttl_ms(override, self._time()) or 0  # 0: until lifted (forcing on)
        self._write(value.encode(),
                    lambda: self._save(keys=self._save_keys, args=[value, ttl]), "SET")

    def _write(self, raw: bytes | None, fn: Any, what: str) -> None:
        with self._raw_lock:
            self._writes += 1  # counted first: a snapshot racing the write is not adopted
        try:
            self.call(what, fn)
            if self._replicated_within is not None:
                await_replica(self.client, timeout=self._replicated_within, shown=self.shown,
                              what=what, errors=self._errors)
        finally:
            with self._raw_lock:
                # Counted again once applied: a snapshot taken while the write was on its way
                # may hold the old value, and must not be adopted either.
                self._writes += 1
        with self._raw_lock:
            # The flag adopts what was written (``_place``): that is now the value last loaded.
            self._synced_raw = self._loaded_raw = raw

    def changed(self) -> bool:
        """True when the override value differs from the one last loaded.

        In a fleet only a sync's read counts: it checks the epoch marker in the same round trip,
        so keys lost to a FLUSHALL are never read as "no override". Before the fleet's first
        sync nothing has changed (the process enforces until then, the safe side). A store no
        fleet syncs (a command's, a test's) asks Redis.
        """
        if not self._synced:
            if self.fleet_syncs:
                return False
            raw = self.call("GET", self.client.get, self.key_override)
            return bool(raw != self._loaded_raw)
        return bool(self._synced_raw != self._loaded_raw)

    def note_synced(self, raw: Any) -> None:
        """The override value a fleet sync just read (called from the background thread)."""
        with self._raw_lock:
            if self._writes != self._snapshot_writes:
                return  # read before this process's latest write: older than the flag's
            self._synced_raw = raw
            self._synced = True

    def stop_syncing(self) -> None:
        """Fallen back: ``changed`` says False (no round trip, no error each second)."""
        with self._raw_lock:
            self._synced = True
            self._synced_raw = self._loaded_raw

    # --- fleet primitives ----------------------------------------------------------------------

    def snapshot(self, *, probe: bool = False) -> list[Any]:
        """One round trip: the epoch marker, override, reading and leader values (and, with
        ``probe``, the probe result as a fifth)."""
        keys = [self.key_epoch, self.key_override, self.key_reading, self.key_leader]
        if probe:
            keys.append(self.key_probe)
        with self._raw_lock:
            self._snapshot_writes = self._writes
        return list(self.call("MGET", self.client.mget, keys))

    def restore(self, override: Override | None) -> bool:
        """Put the lost marker back, with ``override`` if this process is first; True if it was."""
        value, ttl = "", 0
        if override is not None and not override.expired(self._time()):
            value = json.dumps(override.to_json(), sort_keys=True)
            ttl = override_ttl_ms(override, self._time()) or 0  # 0: until lifted (forcing on)
        keys = [self.key_epoch, self.key_override, self.key_fallback_since]
        # A new marker value each time: a member tells "the keys were lost and put back" from
        # "an operator changed the override" by whether the marker changed between its reads.
        marker = secrets.token_hex(8)
        return bool(self.call("EVAL", self._restore, keys=keys, args=[marker, value, ttl]))

    def acquire(self, token: str, lease_ms: int) -> bool:
        """Take the leader lease if nobody holds it."""
        return bool(self.call("SET", self.client.set, self.key_leader, token, nx=True,
                              px=lease_ms))

    def renew(self, token: str, lease_ms: int) -> bool:
        """Extend our own lease; False when it is no longer ours."""
        return bool(self.call("EVAL", self._renew, keys=[self.key_leader],
                              args=[token, lease_ms]))

    def release(self, token: str) -> None:
        """Give the lease up, only if it is still ours."""
        self.call("EVAL", self._release, keys=[self.key_leader], args=[token])

    def publish(self, value: str, ttl_ms: int) -> None:
        """Publish a status reading (kept ``ttl_ms``: an abandoned one disappears)."""
        self.call("SET", self.client.set, self.key_reading, value, px=ttl_ms)

    def publish_probe(self, value: str, ttl_ms: int) -> None:
        """Publish a verify probe result (kept ``ttl_ms``)."""
        self.call("SET", self.client.set, self.key_probe, value, px=ttl_ms)

    def heartbeat(self, proc: str, value: str, ttl_ms: int) -> None:
        """Say this process is alive (for ``failopen fleet``)."""
        self.call("EVAL", self._beat, keys=[self.key_proc + proc, self.key_procs],
                  args=[proc, value, ttl_ms])

    def forget(self, proc: str) -> None:
        """Remove this process's heartbeat (on a clean stop)."""
        self.call("EVAL", self._forget, keys=[self.key_proc + proc, self.key_procs], args=[proc])

    def try_confirm(self, token: str, ttl_ms: int) -> tuple[bool, Any, Any]:
        """Take the confirmation lock; when taken elsewhere, the latest reading's value and the
        holder's token."""
        got, reading, holder = self.call("EVAL", self._confirm,
                                         keys=[self.key_confirm, self.key_reading],
                                         args=[token, ttl_ms])
        return bool(got), reading, holder

    def _proc_keys(self) -> list[bytes]:
        """The heartbeat keys: those in the index, and where one server holds every key, any
        a failopen without the index wrote (a rolling upgrade's older members)."""
        prefix = self.key_proc.encode()
        keys = {prefix + bytes(i) for i in self.call("ZRANGE", self.client.zrange,
                                                     self.key_procs, 0, -1)}
        if self.kind.scans:
            pattern = _glob_escape(self.key_proc) + "*"
            keys.update(self.call("SCAN", lambda: list(self.client.scan_iter(pattern, count=500))))
        return sorted(keys)

    def processes(self) -> list[Any]:
        """The heartbeat values of the processes seen in the last minute."""
        keys = self._proc_keys()
        return [v for v in self.call("MGET", self.client.mget, keys) if v is not None] \
            if keys else []

    def live_beats(self) -> tuple[list[tuple[Any, Any]], Any, Any]:
        """Each heartbeat's value and TTL (ms), ``fallback:since`` and Redis's ``TIME``, read
        in one step (for :mod:`failopen.engine.override_reach`)."""
        keys = [self.key_fallback_since, *self._proc_keys()]
        since, now, *answers = self.call("EVAL", self._live_beats, keys=keys, args=[])
        return list(zip(answers[::2], answers[1::2], strict=True)), since, now

    def where_keys(self) -> dict[str, Any] | None:
        """Which node holds this deployment's keys (a cluster: its slot, primary and replicas);
        None where one server holds every key. Raises StoreError."""
        where: dict[str, Any] | None = self.call("CLUSTER KEYSLOT", self.kind.locate,
                                                 self.client, self.key_override)
        return where

    def override_ttl(self) -> int:
        """The override key's TTL in milliseconds (-2: no key, -1: none)."""
        return int(self.call("PTTL", self.client.pttl, self.key_override))

    def close(self) -> None:
        """Release the connections."""
        with contextlib.suppress(*self._errors):
            self.client.close()
            self._quick.close()


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
