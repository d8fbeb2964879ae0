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
  override it applied (:mod:`failopen.engine.override_reach`).

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
from failopen.stores._redis_errors import explain_failure
from failopen.stores.override import Override
from failopen.stores.sentinel import (
    await_replica,
    is_sentinel_url,
    open_client,
    parse_sentinel_url,
)
from failopen.stores.urls import REDIS_SCHEMES, mask_url, shown_url, split_password

__all__ = ["NOW_MS_LUA", "REDIS_SCHEMES", "RedisStore", "check_redis_url", "write_override_lua"]

_INSTALL = 'pip install "failopen[redis]"'
#: Seconds a command may take before the store counts as down (never on a request's path).
DEFAULT_TIMEOUT = 0.5
#: The one call a request may make (the fleet-wide confirmation lock, once per confirm_ttl at
#: most): a slow Redis costs it this much at worst, then the process confirms on its own.
CONFIRM_TIMEOUT = 0.1
_MAX_VALUE = 64 * 1024  # a value larger than this is garbage, not an override or a reading

# Renew only one's own lease, release only one's own: compare-and-set in one step.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
#: Lua that defines ``now_ms()``: Redis's own clock in whole milliseconds, as text (how
#: ``fallback:since`` is written, by the scripts below and by a fallback claim, and read back).
NOW_MS_LUA = """
local function now_ms()
  local now = redis.call('TIME')
  return string.format('%.0f', now[1] * 1000 + math.floor(now[2] / 1000))
end
"""
# After lost keys: the first process to notice puts the marker back and, only then, the override
# it last knew (with what is left of its TTL). Later ones find the marker and read what is there.
_RESTORE = NOW_MS_LUA + """
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('SET', KEYS[3], now_ms())
  if ARGV[2] ~= '' and ARGV[3] == '0' then
    redis.call('SET', KEYS[2], ARGV[2], 'NX')
  elseif ARGV[2] ~= '' then
    redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3])
  end
  return 1
end
return 0
"""
# An operator's override, placed (ARGV[1], PX ARGV[2]) or lifted (''), with the marker: a write
# landing just after lost keys is the operator's latest word, which no member's restore may then
# undo. A marker put back here starts the record of used fallback solutions anew, as a restore
# does (failopen.fallback.used: a marker beside no record would read as "never lost").


def write_override_lua(key: str, value: str, ttl: str) -> str:
    """Lua that writes the override key ``key`` as :meth:`RedisStore.save` does: deleted when
    ``value`` is '', kept until lifted when ``ttl`` is '0' (forcing on), else with PX ``ttl``
    (each argument a Lua expression such as ``KEYS[2]``, ``ARGV[1]``)."""
    return (f"if {value} == '' then\n  redis.call('DEL', {key})\n"
            f"elseif {ttl} == '0' then\n  redis.call('SET', {key}, {value})\n"
            f"else\n  redis.call('SET', {key}, {value}, 'PX', {ttl})\nend\n")


_SAVE = NOW_MS_LUA + """
if redis.call('SET', KEYS[1], '1', 'NX') then
  redis.call('SET', KEYS[3], now_ms())
end
""" + write_override_lua("KEYS[2]", "ARGV[1]", "ARGV[2]") + "return 1\n"
# The fleet-wide confirmation lock; when taken, the latest reading and the lock's holder come
# back in the same trip (another deployment's lock says nothing about this one's page).
_CONFIRM = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, false, false}
end
return {0, redis.call('GET', KEYS[2]), redis.call('GET', KEYS[1])}
"""


def check_redis_url(url: str) -> None:
    """ConfigError (URL masked) unless redis-py is installed and ``url`` names a Redis."""
    if importlib.util.find_spec("redis") is None:
        raise ConfigError(
            f"FAILOPEN_STORE: {mask_url(url)} needs redis-py, which is not installed: "
            f"{_INSTALL}"
        )
    if is_sentinel_url(url):
        parse_sentinel_url(url)
        return
    scheme, _, rest = url.partition("://")
    if scheme.lower() == "unix" and not rest.startswith("/"):
        raise ConfigError(f"FAILOPEN_STORE: {mask_url(url)}: expected unix:///path/to/redis.sock")
    if scheme.lower() != "unix" and not rest.rpartition("@")[2].split("/")[0].split("?")[0]:
        raise ConfigError(f"FAILOPEN_STORE: {mask_url(url)}: expected redis://host:port/db")


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

        import redis

        self.url = url
        self.prefix = prefix
        self.shown = shown_url(url, password=bool(password))
        self._time = clock_time if clock_time is not None else time.time
        try:
            self.client: Any = open_client(
                url, socket_timeout=timeout, socket_connect_timeout=timeout,
                health_check_interval=0, retry_on_timeout=False, password=password,
            )
        except ValueError:
            # redis-py's message may quote the URL: replaced with the masked one.
            raise ConfigError(f"FAILOPEN_STORE: {self.shown} is not a Redis URL redis-py can "
                              "open; expected redis://[:password@]host:port/db") from None
        self._quick: Any = open_client(
            url, socket_timeout=min(timeout, CONFIRM_TIMEOUT),
            socket_connect_timeout=min(timeout, CONFIRM_TIMEOUT), health_check_interval=0,
            retry_on_timeout=False, password=password)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        # Behind Sentinel an override's write waits for a replica (it must survive a failover).
        self._replicated_within = timeout if is_sentinel_url(url) else None
        self.key_override = prefix + "override"
        self.key_reading = prefix + "reading"
        self.key_probe = prefix + "probe"
        self.key_leader = prefix + "leader"
        self.key_confirm = prefix + "confirm"
        self.key_epoch = prefix + "epoch"
        self.key_fallback_since = prefix + "fallback:since"
        self.key_proc = prefix + "proc:"
        self._renew = self.client.register_script(_RENEW)
        self._release = self.client.register_script(_RELEASE)
        self._restore = self.client.register_script(_RESTORE)
        self._save = self.client.register_script(_SAVE)
        self._save_keys = [self.key_epoch, self.key_override, self.key_fallback_since]
        self._confirm = self._quick.register_script(_CONFIRM)
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
        self.call("SET", self.client.set, self.key_proc + proc, value, px=ttl_ms)

    def forget(self, proc: str) -> None:
        """Remove this process's heartbeat (on a clean stop)."""
        self.call("DEL", self.client.delete, self.key_proc + proc)

    def try_confirm(self, token: str, ttl_ms: int) -> tuple[bool, Any, Any]:
        """Take the confirmation lock; when taken elsewhere, the latest reading's value and the
        holder's token."""
        got, reading, holder = self.call("EVAL", self._confirm,
                                         keys=[self.key_confirm, self.key_reading],
                                         args=[token, ttl_ms])
        return bool(got), reading, holder

    def processes(self) -> list[Any]:
        """The heartbeat values of the processes seen in the last minute."""
        pattern = _glob_escape(self.key_proc) + "*"
        keys = list(self.call("SCAN", lambda: list(self.client.scan_iter(pattern, count=500))))
        return list(self.call("MGET", self.client.mget, keys)) if keys else []

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
