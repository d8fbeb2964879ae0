"""The enforcement flag: one immutable state, swapped whole, read with a single attribute access.

Two writers feed it. The automatic side (the status watcher, and the guard when it confirms an
outage) says what the status page shows. Operators place an override, which wins over the automatic
side until it is lifted or its expiry passes. Requests only read.

Forcing enforcement off always ends: one hour when no ttl is given, at most seven days. The rule
lives in :class:`failopen.stores.override.Override` (and :meth:`EnforcementFlag.apply_override`
for a window set in the future), so an override placed by any path or read from any store obeys
it. Forcing enforcement on may last until lifted.

    precedence: override > watcher / confirmed / probe > default (enforce)

The state the flag publishes (:class:`FlagState`) and the lines a change of it logs live in
:mod:`failopen.engine.flag_state`; their names are re-exported here.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.engine.flag_state import (
    FlagState,
    Listener,
    Source,
    log_staleness,
    log_transition,
    rfc3339,
)
from failopen.exceptions import FailopenError, StoreError
from failopen.observe.paced import PacedLog
from failopen.stores.override import (
    CLOCK_SKEW,
    FORCE_OFF_DEFAULT_TTL,
    FORCE_OFF_MAX_TEXT,
    FORCE_OFF_MAX_TTL,
    FORCE_ON_MAX_TTL,
    MAX_REASON,
    Override,
)

if TYPE_CHECKING:
    from failopen.stores import OverrideStore

__all__ = [
    "FORCE_OFF_DEFAULT_TTL",
    "FORCE_OFF_MAX_TTL",
    "FORCE_ON_MAX_TTL",
    "FlagState",
    "Override",
    "EnforcementFlag",
    "check_stored_override",
    "Source",
    "Listener",
    "rfc3339",
]

logger = logging.getLogger("failopen.flag")

def check_stored_override(override: Override | None, now: float) -> Override | None:
    """The stored ``override`` as it stands at ``now``: None once expired; StoreError for a
    force-off that would end more than seven days from now (set in the future: its own window
    looks short, but it would keep protection off for as long)."""
    if (override is not None and not override.enforce and override.expires_at is not None
            and override.expires_at > now + FORCE_OFF_MAX_TTL + CLOCK_SKEW):
        raise StoreError(
            f"an override forcing enforcement off ends {rfc3339(override.expires_at)}, more "
            f"than {FORCE_OFF_MAX_TEXT} from now; place it again with a ttl"
        )
    return None if override is None or override.expired(now) else override


def _resumed_before(resumed: float | None, since: float) -> float | None:
    """When enforcement resumed, as an off state that began at ``since`` tells it: never after
    ``since``. An override placed on a machine whose clock is behind (or this clock stepped
    back) can date the outage before the resumption; every challenge of that outage carries
    that date, and none would pass. An earlier outage still began before it."""
    return None if resumed is None else min(resumed, since)


class EnforcementFlag:
    """The in-process flag every adapter consults. Thread-safe; reads take no lock."""

    def __init__(
        self,
        *,
        store: OverrideStore | None = None,
        clock: Clock = SYSTEM_CLOCK,
        load: bool = True,
    ) -> None:
        self._clock = clock
        self._store = store
        self._lock = threading.Lock()
        # Placements (and lifts) made in this process, counted before the store write and again
        # once applied: a refresh that read the store meanwhile holds an older value, and must
        # not undo the operator's change (the store, holding that change, would then say that
        # nothing changed, and it would stay undone).
        self._placements = 0
        renew_locks_after_fork(self, "_lock")
        self._listeners: list[Listener] = []
        self._listener_failures = PacedLog(clock=clock)
        self._auto = FlagState(
            enforce=True, source="default", reason="no status reading yet", since=clock.time()
        )
        self._override: Override | None = None
        self._state = self._auto
        # When enforcement last resumed (see FlagState.resumed_at); None until it first does.
        self._resumed: float | None = None
        # load=False leaves the first read to the watcher thread's first turn (the runtime does
        # so for a store that ``loads_in_background``: Django builds the runtime inside a
        # worker's first request, which must never wait on Redis). Until then: enforce (a
        # request that would be refused waits for that turn: failopen.engine.first_reading).
        if store is not None and load:
            self.refresh(force=True)

    def __repr__(self) -> str:
        s = self._state
        return f"EnforcementFlag(enforce={s.enforce}, source={s.source!r})"

    # --- reading: the request path ----------------------------------------------------------

    @property
    def state(self) -> FlagState:
        """The current state. One attribute read; an expired override lapses here."""
        state = self._state
        if state.expires_at is not None and self._clock.time() >= state.expires_at:
            return self._lapse()
        return state

    @property
    def enforce(self) -> bool:
        """True while enforcement tokens must be validated."""
        return self.state.enforce

    # --- the automatic side -----------------------------------------------------------------

    @property
    def automatic_state(self) -> FlagState:
        """What the status page alone says, whatever override is in force."""
        return self._auto

    def set_automatic(
        self,
        *,
        enforce: bool,
        source: Literal["watcher", "confirmed", "probe"],
        reason: str,
        global_status: str | None,
        stale: bool = False,
        error: str | None = None,
    ) -> FlagState:
        """What the evidence says (the watcher, a confirmation by the guard, or the probe)."""
        with self._lock:
            auto = self._auto
            since = auto.since if auto.enforce == enforce else self._clock.time()
            self._auto = FlagState(
                enforce=enforce, source=source, reason=reason, since=since,
                global_status=global_status, stale=stale, error=error if stale else None,
            )
            old, new = self._swap()
        return self._notify(old, new)

    def set_stale(self, stale: bool, *, error: str | None = None) -> None:
        """Mark the automatic state as resting on an old reading (the flag keeps its value);
        ``error`` is the last poll's, shown while stale."""
        error = error if stale else None
        with self._lock:
            if self._auto.stale == stale and self._auto.error == error:
                return
            self._auto = replace(self._auto, stale=stale, error=error)
            old, new = self._swap()
        self._notify(old, new)

    # --- overrides ----------------------------------------------------------------------------

    def force_off(self, reason: str, *, ttl: float | None = None,
                  set_by: str | None = None) -> FlagState:
        """Stop enforcing until lifted or until ``ttl`` seconds pass (default one hour, at most
        seven days: ValueError beyond). Nothing turns protection off for good."""
        ttl = FORCE_OFF_DEFAULT_TTL if ttl is None else ttl
        return self._place(self._new_override(False, reason, ttl, set_by))

    def force_on(self, reason: str, *, ttl: float | None = None,
                 set_by: str | None = None) -> FlagState:
        """Enforce whatever the status page says, until lifted or until ``ttl`` seconds pass
        (at most 30 days; without a ttl, until lifted)."""
        return self._place(self._new_override(True, reason, ttl, set_by))

    def automatic(self, reason: str = "override lifted") -> FlagState:
        """Lift any override: the status page decides again."""
        with self._lock:
            self._placements += 1
        if self._store is not None:
            self._store.save(None)
        with self._lock:
            if self._override is not None:
                logger.warning("override lifted: %s", reason[:MAX_REASON], extra={
                    "event": "failopen.override_lifted", "reason": reason[:MAX_REASON],
                    "enforce": self._override.enforce})
            self._override = None
            self._placements += 1
            old, new = self._swap()
        return self._notify(old, new)

    @property
    def override(self) -> Override | None:
        """The override in force, if any."""
        override = self._override
        if override is not None and override.expired(self._clock.time()):
            return None
        return override

    def apply_override(self, override: Override | None, *,
                       placements: int | None = None) -> FlagState:
        """Adopt an override read from the shared store (no write back).

        StoreError for a force-off that would end more than seven days from now (set in the
        future): its own window looks short, but it would keep protection off for as long.
        ``placements``: the count read before the store was (nothing is adopted if this process
        placed or lifted an override since).
        """
        check_stored_override(override, self._clock.time())
        with self._lock:
            if placements is not None and placements != self._placements:
                return self._state  # older than this process's own placement: it stands
            if override is not None and override.expired(self._clock.time()):
                override = None
            self._override = override
            old, new = self._swap()
        return self._notify(old, new)

    def refresh(self, *, force: bool = False) -> None:
        """Pick up an override another process wrote to the store. Never raises."""
        store = self._store
        if store is None:
            return
        try:
            placements = self._placements
            if force or store.changed():
                self.apply_override(store.load(), placements=placements)
        except FailopenError as exc:
            # An unreadable store keeps the override we last knew: losing an operator's
            # "force on" because a file was half-written would be the wrong way to fail.
            logger.error("override store unreadable, keeping the last known override: %s", exc,
                         extra={"event": "failopen.store_unreadable", "error": str(exc)})

    # --- listeners ------------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(old, new)`` whenever the visible state changes (value, source,
        reason, expiry, staleness); repeating the same reading is not a change."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling a listener."""
        self._listeners.remove(listener)

    # --- internals --------------------------------------------------------------------------

    def _new_override(self, enforce: bool, reason: str, ttl: float | None,
                      set_by: str | None = None) -> Override:
        """The override to place; ValueError for a ttl out of range (nothing is placed)."""
        now = self._clock.time()  # read once: expires_at - set_at is exactly the ttl given
        if ttl is None:
            return Override(enforce, reason, now, set_by=set_by)
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
            raise ValueError(f"override ttl must be positive seconds, got {ttl!r}")
        if not enforce and not ttl <= FORCE_OFF_MAX_TTL:
            raise ValueError(
                f"forcing enforcement off lasts at most {FORCE_OFF_MAX_TEXT}, got a ttl of "
                f"{ttl:g} s; place it again when it lapses if the outage goes on"
            )
        if enforce and not ttl <= FORCE_ON_MAX_TTL:
            raise ValueError(
                f"a forced-on override's ttl is at most 30 days ({FORCE_ON_MAX_TTL:g} s), got "
                f"{ttl:g} s; give no ttl to enforce until lifted"
            )
        return Override(enforce, reason, now, now + ttl, set_by=set_by)

    def _place(self, override: Override) -> FlagState:
        with self._lock:
            self._placements += 1
        if self._store is not None:
            self._store.save(override)
        ttl = override.expires_at - override.set_at if override.expires_at is not None else None
        logger.warning(
            "override placed: enforce=%s ttl=%s reason=%s",
            override.enforce, "none" if ttl is None else f"{round(ttl, 3):g}s", override.reason,
            extra={"event": "failopen.override_set", "enforce": override.enforce,
                   "ttl": ttl, "expires_at": rfc3339(override.expires_at),
                   "reason": override.reason, "set_by": override.set_by},
        )
        state = self.apply_override(override)
        with self._lock:
            self._placements += 1
        return state

    def _lapse(self) -> FlagState:
        with self._lock:
            if self._override is None or not self._override.expired(self._clock.time()):
                return self._state
            logger.warning("override expired: %s", self._override.reason, extra={
                "event": "failopen.override_expired", "reason": self._override.reason,
                "enforce": self._override.enforce,
                "expires_at": rfc3339(self._override.expires_at)})
            self._override = None
            old, new = self._swap()
        return self._notify(old, new)

    def _swap(self) -> tuple[FlagState, FlagState]:
        """Compute and publish the visible state. Caller holds _lock."""
        old, auto, override = self._state, self._auto, self._override
        if override is None:
            new = auto
        else:
            new = FlagState(
                enforce=override.enforce, source="override", reason=override.reason,
                since=override.set_at, expires_at=override.expires_at,
                global_status=auto.global_status, stale=auto.stale, error=auto.error,
            )
        if (override is None and not new.enforce and old.enforce and self._resumed is not None
                and new.since < self._resumed):
            # An override enforced over the page's outage and has ended: enforcement goes off
            # now, not when the page's outage began. Dated then, it would date this outage
            # before the resumption, and the challenges stocked before the override would pass.
            self._auto = new = replace(auto, since=self._clock.time())
        elif not new.enforce and not old.enforce and old.since < new.since:
            # Still off (an override placed again to go on, one placed over the page's outage,
            # or lifted while the page still shows it): the outage goes on, and so does its
            # start. Dated anew, it refused every challenge fetched more than issue_skew before.
            new = replace(new, since=old.since)
        if new.enforce:
            # Resumed: from off, or on the first evidence (a reading, an override) after the
            # start-up default, which is no evidence: a process started during an outage must
            # still admit the challenges its siblings issued in it before it started.
            if not old.enforce or (old.source == "default" and new.source != "default"):
                self._resumed = self._clock.time()
        elif new.resumed_at != (resumed := _resumed_before(self._resumed, new.since)):
            new = replace(new, resumed_at=resumed)
        self._state = new
        return old, new

    def _notify(self, old: FlagState, new: FlagState) -> FlagState:
        """Tell listeners about a transition. Runs outside the lock, so a listener may read or
        write the flag; a failing listener is logged and never breaks the writer."""
        if old.enforce != new.enforce:
            log_transition(new)
        if old.stale != new.stale:
            log_staleness(new)
        if old != new:
            for listener in list(self._listeners):
                try:
                    listener(old, new)
                except Exception:
                    # Paced: a listener failing on every change must not flood the log.
                    suppressed = self._listener_failures.due()
                    if suppressed is not None:
                        logger.exception(
                            "flag listener %r failed (%d more failures since the last line)",
                            listener, suppressed,
                            extra={"event": "failopen.listener_failed",
                                   "callback": repr(listener)[:200], "suppressed": suppressed})
        return new
