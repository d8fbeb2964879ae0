"""Fleet mode: many processes on many machines share one status poller through a Redis store.

Each process's watcher thread calls :meth:`Fleet.sync` at least once a second (never a request):

* one ``MGET`` reads the epoch marker, the override, the published reading and the leader; the
  override goes to the flag through the store (the flag is each process's local snapshot, so a
  request never touches Redis);
* the leader election: ``SET leader token NX PX lease``; the holder renews at a third of the
  lease with a compare-and-expire script and releases with a compare-and-delete one. Only the
  leader polls the status page and publishes its readings; if it dies, its lease lapses and
  another process takes over within one lease;
* followers feed each new published reading through their own hysteresis, with the reading's
  age (not the moment they saw it) counting towards ``stale_after`` and ``max_stale_bypass``,
  so a bypass ends as it would in the process that made the reading.

Two leaders for a moment (a lease that lapsed while its holder was paused) are harmless: the
writes are idempotent (the same kind of reading, overwritten whole), and followers count two
publishers' readings less than half a poll interval apart as one, so hysteresis is not sped up
either (one leader's own readings all count, however its jitter spaced them).

Another deployment sharing the Redis and the prefix (staging beside production, a laptop with
production's store URL) writes the same keys. Every record says what its writer watched
(:mod:`failopen.engine.fleet_identity`); a process acts only on readings of its own status page and
global component and on probe results of its own verify URL. Under another deployment's lease
it polls (and probes) its own page, as when Redis is down; the override stays shared (the prefix
is the operator's choice of fleet). One paced ERROR says what to change.

When Redis is down, slow (a command over its timeout), answers garbage or has lost the keys,
the process falls back: it polls the status page itself, keeps the override it last saw until
that override's own expiry, logs once, and rejoins when Redis answers properly again. A marker
key without TTL tells lost keys (FLUSHALL) from "no override": the first process to notice puts
the marker back together with the override it last knew (what is left of its TTL), unless it
saw an operator lift it (:mod:`failopen.engine.fleet_override`). Heartbeats name the override
applied, so ``failopen override`` says how many processes it reached.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
from typing import TYPE_CHECKING, Any, Literal

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.engine.fleet_identity import ForeignRecords, Watched, stored_hash
from failopen.engine.fleet_override import OverrideMemory
from failopen.engine.fleet_reading import FleetReading, Kind, parse_reading
from failopen.engine.override_reach import HEARTBEAT_TTL, LONGEST_BEAT, override_id
from failopen.engine.probe_record import ProbeResult, parse_probe
from failopen.exceptions import StoreError
from failopen.providers.status_documents import StatusReport

if TYPE_CHECKING:
    from failopen.engine.watcher import StatusWatcher
    from failopen.stores.redis import RedisStore

__all__ = ["Fleet", "FleetReading", "HEARTBEAT_TTL", "parse_reading"]

logger = logging.getLogger("failopen.fleet")

_HEARTBEAT_EVERY = LONGEST_BEAT  # or a third of the lease, if shorter


def _identity() -> str:
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{secrets.token_hex(4)}"


class Fleet:
    """This process's membership of a fleet sharing one Redis store."""

    def __init__(self, store: RedisStore, watcher: StatusWatcher, *, lease: float = 10.0,
                 confirm_ttl: float = 10.0, clock: Clock = SYSTEM_CLOCK,
                 watched: Watched | None = None) -> None:
        self.store = store
        #: What this process acts on (its page, its verify URL): records of another are ignored.
        self.watched = watched if watched is not None else Watched()
        self._foreign = ForeignRecords(self.watched, f"{store.shown} with prefix {store.prefix!r}",
                                       clock=clock)
        store.fleet_syncs = True  # a plain GET would read keys lost to a FLUSHALL as "none"
        self.watcher = watcher
        self.lease = lease
        self.confirm_ttl = confirm_ttl
        self._clock = clock
        self._lock = threading.Lock()  # sync and stop: one at a time
        renew_locks_after_fork(self, "_lock")  # a child of a fork mid-sync must not hang
        self._reset_identity()
        #: ``redis`` while this process follows the shared state, ``local`` while fallen back.
        self.store_state: Literal["redis", "local"] = "redis"
        self._why_local: str | None = None
        self._pending: FleetReading | None = None
        self._seq = 0
        self._seen_epoch = False
        self._epoch: Any = None  # the marker's value at the last sync
        #: Overrides this process saw lifted: never restored nor applied again (fleet_override).
        self._overrides = OverrideMemory()
        self._reported: str | None = None  # the override the last heartbeat said was applied

    def _reset_identity(self) -> None:
        self._pid = os.getpid()
        self.id = _identity()
        self.leader = False
        self.leader_since: float | None = None
        self._token = self._lease_token(self._clock.time())
        #: The id of another deployment's process holding the lease (we poll ourselves), or None.
        self.foreign_leader: str | None = None
        self._renew_due = 0.0
        self._heartbeat_due = 0.0
        self._last_id: str | None = None
        self._last_watcher_at = float("-inf")
        self._last_watcher_by: str | None = None
        self.last_reading: FleetReading | None = None
        self._last_probe_id: str | None = None
        self._last_probe_at = float("-inf")
        self._last_probe_by: str | None = None

    def __repr__(self) -> str:
        return f"Fleet(id={self.id!r}, leader={self.leader}, store={self.store_state!r})"

    @property
    def polls(self) -> bool:
        """True when this process must poll the status page itself (leader, fallen back, or the
        lease is another deployment's)."""
        return self.leader or self.store_state == "local" or self.foreign_leader is not None

    def _lease_token(self, since: float) -> str:
        # What the leader watches goes with its lease: a member of another deployment that finds
        # it polls its own page rather than wait for readings it would never act on.
        return json.dumps({"id": self.id, "since": since, "page": self.watched.page,
                           "verify": self.watched.verify}, sort_keys=True)

    # --- the background thread -------------------------------------------------------------

    def sync(self) -> None:
        """Read the shared state, take part in the election, apply a new reading. Never raises."""
        with self._lock:
            if os.getpid() != self._pid:  # a forked child is a new member, never the leader
                self._reset_identity()
            try:
                self._sync()
            except _Unfollowable as exc:
                self._fall_back(str(exc), override_usable=True)
            except StoreError as exc:
                self._fall_back(str(exc))
            except Exception:
                logger.exception("fleet sync failed unexpectedly",
                                 extra={"event": "failopen.fleet_error"})
                self._fall_back("fleet sync failed unexpectedly")

    def _sync(self) -> None:
        store, now, mono = self.store, self._clock.time(), self._clock.monotonic()
        probing = self.watcher.probe is not None
        epoch, override_raw, reading_raw, leader_raw, *rest = store.snapshot(probe=probing)
        if epoch is None:
            # No marker: a new store, or one that lost its keys. The first process to notice
            # puts the marker back with the override it knew; the state is then read again.
            override = self._overrides.restorable(self.watcher.flag.override, now)
            first = store.restore(override)
            # The heartbeats went with the keys: beat again at once, so failopen override and
            # failopen fleet count this process without waiting out its beat interval.
            self._heartbeat_due = 0.0
            if self._seen_epoch:
                raise StoreError(
                    "the Redis store lost its keys (FLUSHALL, or a new server)"
                    + ("; put back the override this process last knew" if first and override
                       else "")
                )
            epoch, override_raw, reading_raw, leader_raw, *rest = store.snapshot(probe=probing)
        if epoch != self._epoch:
            # A marker other than the one this process last read: the keys were lost and another
            # member put the marker back first. This process's heartbeat went with them too.
            if self._epoch is not None:
                self._heartbeat_due = 0.0
            self._epoch = epoch
        self._seen_epoch = True
        # Garbage is a fallback, the same as no answer; an override this process saw lifted is
        # never followed again, whoever put it back.
        override_raw = self._overrides.observe(store, epoch, override_raw, now,
                                               self.watcher.flag.override)
        # The override is usable whatever the other keys hold: an operator lifting a force-off
        # (or forcing on) must reach this process even while it polls for itself.
        store.note_synced(override_raw)
        try:
            reading = parse_reading(reading_raw, now=now)
            probe = parse_probe(rest[0], now=now) if rest else None
            if leader_raw is not None and not _is_token(leader_raw):
                raise StoreError("the leader key holds a value failopen did not write")
        except StoreError as exc:
            raise _Unfollowable(str(exc)) from None
        self._elect(leader_raw, now, mono)
        self._check_leader(leader_raw)
        applied, every = override_id(self.watcher.flag.override), min(_HEARTBEAT_EVERY,
                                                                      self.lease / 3)
        if mono >= self._heartbeat_due or applied != self._reported:
            # At once when the applied override changed: ``failopen override`` is waiting.
            store.heartbeat(self.id, json.dumps({
                "id": self.id, "pid": os.getpid(), "leader": self.leader, "seen": now,
                "polls": self.watcher.polls, "page": self.watched.page, "override": applied,
                "beat": every,
            }, sort_keys=True), int(HEARTBEAT_TTL * 1000))
            self._heartbeat_due, self._reported = mono + every, applied
        pending, self._pending = self._pending, None
        if pending is not None:
            store.publish(pending.to_json(), self._reading_ttl_ms())
        if self.store_state == "local":
            logger.warning("fleet store %s answers again: following the shared override and "
                           "status reading", store.shown,
                           extra={"event": "failopen.fleet_store_back", "store": store.shown})
            self.store_state, self._why_local = "redis", None
        if reading is not None:
            self._apply(reading, now)
        if probe is not None:
            self._apply_probe(probe, now)

    def _elect(self, leader_raw: Any, now: float, mono: float) -> None:
        store, lease_ms = self.store, int(self.lease * 1000)
        if self.watcher.source is None:
            return  # nothing to poll: never lead
        ours = leader_raw is not None and leader_raw.decode() == self._token
        if self.leader and (not ours or (mono >= self._renew_due
                                         and not store.renew(self._token, lease_ms))):
            self._set_leader(False, now, "its lease was lost")
        if not self.leader and leader_raw is None:
            # The token says since when this process leads (``failopen fleet`` shows it).
            self._token = self._lease_token(now)
            if store.acquire(self._token, lease_ms):
                self._renew_due = mono + self.lease / 3
                self._set_leader(True, now, "the lease was free")
        elif self.leader and mono >= self._renew_due:
            self._renew_due = mono + self.lease / 3

    def _check_leader(self, leader_raw: Any) -> None:
        """Another deployment's lease: poll our own page (and probe) rather than follow it."""
        foreign = None
        if not self.leader and leader_raw is not None and self.watched.page is not None:
            token = json.loads(leader_raw)  # an object with an id: checked by _is_token
            why = self._foreign.leader_differs(token)
            if why is not None:
                foreign = token["id"]
                if foreign != self.foreign_leader:  # once per lease; paced beyond that
                    self._foreign.ignored("the poller's lease", foreign, why)
        if foreign is None and self.foreign_leader is not None:
            logger.warning("the poller's lease is no longer another deployment's; this "
                           "process follows the fleet again", extra={
                               "event": "failopen.fleet_foreign_ended", "leader": self.leader})
        self.foreign_leader = foreign

    def _set_leader(self, leader: bool, now: float, why: str) -> None:
        if leader != self.leader:
            self.leader = leader
            self.leader_since = now if leader else None
            self._heartbeat_due = 0.0  # say so in the heartbeat now
            if leader:
                logger.info("this process (%s) now polls the status page for the fleet (%s)",
                            self.id, why, extra={"event": "failopen.fleet_leader",
                                                 "leader": True, "member": self.id, "why": why})
            else:
                logger.warning("this process (%s) no longer polls for the fleet (%s)", self.id, why,
                               extra={"event": "failopen.fleet_leader", "leader": False,
                                      "member": self.id, "why": why})

    def _fall_back(self, why: str, *, override_usable: bool = False) -> None:
        if not override_usable:
            self.store.stop_syncing()
        if self.leader:
            self.leader = False  # the lease lapses by itself; nobody renews it from here
            self.leader_since = None
        if self.store_state != "local":  # once per change of state, not per attempt
            logger.error(
                "fleet store unusable: %s; this process polls the status page itself and %s",
                why, "follows the override in the store" if override_usable else
                "keeps the override it last saw until that override's expiry",
                extra={"event": "failopen.fleet_store_unusable", "why": why})
        self.store_state, self._why_local = "local", why

    def _apply(self, reading: FleetReading, now: float) -> None:
        """Feed a reading someone else published through this process's hysteresis."""
        if reading.id == self._last_id or reading.by == self.id:
            return
        self._last_id = reading.id
        if self.watched.page is None:
            return  # no status page of its own: no reading is about this process's page
        why = self._foreign.page_differs(reading.page)
        if why is not None:
            status = repr(reading.report.global_status)[:40]
            self._foreign.ignored(f"a status reading (global {status})", reading.by, why)
            return
        age = max(0.0, now - reading.at)
        if age > self.watcher.stale_after:
            return  # old already: it would open nothing a fresh reading does not
        if reading.kind == "watcher":
            # Two leaders for a moment: their readings closer than half an interval count once.
            # One leader's own are never duplicates: jitter (up to all but a sliver of the
            # interval while bypassing) puts them closer, and each counts towards ending it.
            if reading.by != self._last_watcher_by \
                    and reading.at < self._last_watcher_at + self.watcher.poll_interval / 2:
                return
            self._last_watcher_at, self._last_watcher_by = reading.at, reading.by
        self.last_reading = reading
        started = self._clock.monotonic() - age
        self.watcher.observe(reading.report, source=reading.kind, started=started, age=age)

    def _apply_probe(self, result: ProbeResult, now: float) -> None:
        """Count a probe result the leader published, once, through this process's probe."""
        probe = self.watcher.probe
        if probe is None or result.id == self._last_probe_id or result.by == self.id:
            return
        self._last_probe_id = result.id
        why = self._foreign.verify_differs(result.verify)
        if why is not None:
            self._foreign.ignored(f"a {result.verdict!r} verify probe result", result.by, why)
            return
        if now - result.at > 2 * probe.interval:
            return  # old already: a result is evidence about the moment it was made
        # Two leaders for a moment: their results closer than half an interval count once.
        if result.by != self._last_probe_by \
                and result.at < self._last_probe_at + probe.interval / 2:
            return
        self._last_probe_at, self._last_probe_by = result.at, result.by
        probe.observe(result)

    def published_probe(self, result: ProbeResult) -> None:
        """A probe result this process (the leader) made, to publish now (the watcher thread)."""
        self._seq += 1
        self._last_probe_at, self._last_probe_by = result.at, self.id
        stored = ProbeResult(result.verdict, result.outcome, result.reason, result.at,
                             id=f"{self.id}:{self._seq}", by=self.id, verify=self.watched.verify)
        try:
            self.store.publish_probe(stored.to_json(), self._reading_ttl_ms())
        except StoreError as exc:
            with self._lock:
                self._fall_back(str(exc))

    def _reading_ttl_ms(self) -> int:
        return int(max(60.0, 4 * self.watcher.stale_after) * 1000)

    # --- what the watcher and the confirmer tell the fleet -----------------------------------

    def published(self, report: StatusReport, at: float, kind: Kind = "watcher") -> None:
        """A reading this process made, to publish (the leader's now; a confirmation's at the
        next sync, off the request path)."""
        self._seq += 1
        reading = FleetReading(f"{self.id}:{self._seq}", self.id, at, kind, report,
                               page=self.watched.page)
        if kind == "confirmed":
            self._pending = reading
            return
        if kind == "watcher":
            self._last_watcher_at, self._last_watcher_by = at, self.id
        try:
            self.store.publish(reading.to_json(), self._reading_ttl_ms())
        except StoreError as exc:
            with self._lock:
                self._fall_back(str(exc))

    def may_confirm(self) -> bool:
        """The fleet-wide confirmation lock (request path, rare: once per ``confirm_ttl``).

        True: this process checks the status page. False: another did within ``confirm_ttl``;
        its reading, if published, is applied here. Redis unusable: True (check locally).
        """
        if self.store_state != "redis":
            return True
        try:
            mine = json.dumps({"id": self.id, "page": self.watched.page}, sort_keys=True)
            got, raw, holder = self.store.try_confirm(mine, int(self.confirm_ttl * 1000))
            if got or self._foreign.page_differs(_lock_page(holder)) is not None:
                # Another deployment's check says nothing about this process's page.
                return True
            if raw is not None:
                reading = parse_reading(raw, now=self._clock.time())
                if reading is not None and reading.kind == "confirmed":
                    self._apply(reading, self._clock.time())
            return False
        except StoreError:
            return True

    def stop(self) -> None:
        """Leave the fleet: release the lease (if ours) and the heartbeat. Never raises."""
        with self._lock:
            try:
                if self.leader:
                    self.store.release(self._token)
                self.store.forget(self.id)
            except StoreError:
                pass
            self.leader = False


class _Unfollowable(StoreError):
    """Redis answers and the override is readable, but the reading or the lease is not."""


def _is_token(raw: Any) -> bool:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError, TypeError, UnicodeDecodeError):  # nested: garbage too
        return False
    return isinstance(data, dict) and isinstance(data.get("id"), str)


def _lock_page(raw: Any) -> str | None:
    """The page of the process holding the confirmation lock (None: unknown, or no holder)."""
    try:
        data = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError, TypeError, UnicodeDecodeError):
        return None
    return stored_hash(data.get("page")) if isinstance(data, dict) else None
