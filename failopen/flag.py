"""The enforcement flag: one immutable state, swapped whole, read with a single attribute access.

Two writers feed it. The automatic side (the status watcher, and the guard when it confirms an
outage) says what the status page shows. Operators place an override, which wins over the automatic
side until it is lifted or its expiry passes. Requests only read.

Forcing enforcement off always ends: one hour when no ttl is given, at most seven days. The rule
lives in :class:`Override` (and :meth:`EnforcementFlag.apply_override` for a window set in the
future), so an override placed by any path (CLI, Django command, either HTTP route) or read from
any store obeys it. Forcing enforcement on may last until lifted.

    precedence: override > watcher / confirmed > default (enforce)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from failopen._forksafe import renew_locks_after_fork
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.exceptions import FailopenError, StoreError

if TYPE_CHECKING:
    from failopen.stores import OverrideStore

__all__ = [
    "FORCE_OFF_DEFAULT_TTL",
    "FORCE_OFF_MAX_TTL",
    "FORCE_ON_MAX_TTL",
    "FlagState",
    "Override",
    "EnforcementFlag",
    "Source",
    "Listener",
    "rfc3339",
]

logger = logging.getLogger("failopen.flag")

Source = Literal["default", "watcher", "confirmed", "override"]
Listener = Callable[["FlagState", "FlagState"], None]

_MAX_REASON = 500
_MAX_SET_BY = 200

#: Seconds a forced-off override lasts when no ttl is given: protection never stays off by default.
FORCE_OFF_DEFAULT_TTL = 3600.0
#: The longest a forced-off override may last (7 days); place it again if the outage goes on.
FORCE_OFF_MAX_TTL = 7 * 86400.0
#: The longest ttl of a forced-on override (30 days); without a ttl it lasts until lifted.
FORCE_ON_MAX_TTL = 30 * 86400.0
# A stored force-off may exceed the maximum by this much (float rounding of set_at + ttl) ...
_ROUNDING = 1.0
# ... and end this much beyond now + the maximum (clocks of processes sharing a store).
_SKEW = 60.0
_WEEK_TEXT = "7 days (604800 s)"


def rfc3339(timestamp: float | None) -> str | None:
    """Seconds since the epoch as an RFC 3339 UTC string (None stays None).

    Never raises: a value no calendar can show (NaN, infinity, past year 9999) comes back as
    ``"invalid time (...)"`` rather than as None, which would read as "no expiry".
    """
    if timestamp is None:
        return None
    try:
        moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    except (ValueError, OverflowError, OSError, TypeError):
        shown = repr(timestamp) if isinstance(timestamp, float) else type(timestamp).__name__
        return f"invalid time ({shown})"
    return moment.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class FlagState:
    """What the flag says right now. Never mutated: a change publishes a new object."""

    enforce: bool
    source: Source
    reason: str
    since: float
    expires_at: float | None = None
    global_status: str | None = None
    stale: bool = False
    #: While stale: the last poll's error (bounded, credentials removed); otherwise None.
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, times as RFC 3339 (the shape of the flag endpoint)."""
        return {
            "enforce": self.enforce,
            "source": self.source,
            "reason": self.reason,
            "since": rfc3339(self.since),
            "expires_at": rfc3339(self.expires_at),
            "global_status": self.global_status,
            "stale": self.stale,
            "error": self.error,
        }


@dataclass(frozen=True)
class Override:
    """An operator's decision: enforce or not, why, and until when (None: until lifted, which
    only forcing on may be; forcing off ends within seven days of ``set_at``, else StoreError)."""

    enforce: bool
    reason: str
    set_at: float
    expires_at: float | None = None
    #: Who placed it: ``cli``, ``admin-token``, ``django:<user id>`` (None: not recorded).
    set_by: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.enforce, bool):
            raise StoreError(
                f"override 'enforce' must be true or false, got {type(self.enforce).__name__}"
            )
        if not isinstance(self.reason, str):
            raise StoreError("override 'reason' must be a string")
        object.__setattr__(self, "reason", self.reason[:_MAX_REASON])
        if self.set_by is not None and (not isinstance(self.set_by, str)
                                        or not self.set_by.isprintable()):
            raise StoreError("override 'set_by' must be a printable string")
        if self.set_by is not None:
            object.__setattr__(self, "set_by", self.set_by[:_MAX_SET_BY])
        # Times must be real seconds in 1970..9999 (the last second a datetime can show):
        # a NaN expiry never lapses, and NaN, infinity or 1e300 break every display of it.
        for name in ("set_at", "expires_at"):
            value: object = getattr(self, name)
            if value is None and name == "expires_at":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise StoreError(
                    f"override '{name}' must be seconds since the epoch, got {type(value).__name__}"
                )
            if not 0 <= value <= 253402300799:  # false for NaN too; no float(): 10**400 overflows
                shown = repr(value) if isinstance(value, float) else "an integer out of range"
                raise StoreError(
                    f"override '{name}' must be a finite time in 1970..9999, got {shown}"
                )
            object.__setattr__(self, name, float(value))
        if self.expires_at is not None and self.expires_at < self.set_at:
            raise StoreError("override 'expires_at' is before its 'set_at'")
        if not self.enforce:
            # The one rule for every way an override arrives (placed, or read from a store that
            # an older version or a hand wrote): forcing enforcement off always ends, and soon.
            if self.expires_at is None:
                raise StoreError(
                    "an override forcing enforcement off has no expiry; forcing off lasts at most "
                    f"{_WEEK_TEXT}: place it again with a ttl"
                )
            if self.expires_at - self.set_at > FORCE_OFF_MAX_TTL + _ROUNDING:
                raise StoreError(
                    "an override forcing enforcement off lasts longer than the maximum of "
                    f"{_WEEK_TEXT}: place it again with a shorter ttl"
                )

    def expired(self, now: float) -> bool:
        """True once the expiry has passed."""
        return self.expires_at is not None and now >= self.expires_at

    def to_json(self) -> dict[str, Any]:
        """The stored form."""
        stored: dict[str, Any] = {
            "enforce": self.enforce,
            "reason": self.reason,
            "set_at": self.set_at,
            "expires_at": self.expires_at,
        }
        if self.set_by is not None:
            stored["set_by"] = self.set_by
        return stored

    @classmethod
    def from_json(cls, data: Any) -> Override:
        """Parse the stored form; anything else is a StoreError, never a guess."""
        if not isinstance(data, dict):
            raise StoreError("stored override is not an object")
        try:
            # Values go in as stored: __post_init__ checks them (numbers only, never a string
            # coerced with float(), which would also let "nan" in).
            return cls(
                enforce=data["enforce"],
                reason=data.get("reason", ""),
                set_at=data["set_at"],
                expires_at=data.get("expires_at"),
                set_by=data.get("set_by"),
            )
        except KeyError as exc:
            raise StoreError(f"stored override is malformed (missing {exc})") from None


class EnforcementFlag:
    """The in-process flag every adapter consults. Thread-safe; reads take no lock."""

    def __init__(
        self,
        *,
        store: OverrideStore | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        self._store = store
        self._lock = threading.Lock()
        renew_locks_after_fork(self, "_lock")
        self._listeners: list[Listener] = []
        self._auto = FlagState(
            enforce=True, source="default", reason="no status reading yet", since=clock.time()
        )
        self._override: Override | None = None
        self._state = self._auto
        if store is not None:
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
        source: Literal["watcher", "confirmed"],
        reason: str,
        global_status: str | None,
        stale: bool = False,
        error: str | None = None,
    ) -> FlagState:
        """What the status page says (watcher, or a confirmation by the guard)."""
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
        if self._store is not None:
            self._store.save(None)
        with self._lock:
            if self._override is not None:
                logger.warning("override lifted: %s", reason[:_MAX_REASON])
            self._override = None
            old, new = self._swap()
        return self._notify(old, new)

    @property
    def override(self) -> Override | None:
        """The override in force, if any."""
        override = self._override
        if override is not None and override.expired(self._clock.time()):
            return None
        return override

    def apply_override(self, override: Override | None) -> FlagState:
        """Adopt an override read from the shared store (no write back).

        StoreError for a force-off that would end more than seven days from now (set in the
        future): its own window looks short, but it would keep protection off for as long.
        """
        now = self._clock.time()
        if (override is not None and not override.enforce and override.expires_at is not None
                and override.expires_at > now + FORCE_OFF_MAX_TTL + _SKEW):
            raise StoreError(
                f"an override forcing enforcement off ends {rfc3339(override.expires_at)}, more "
                f"than {_WEEK_TEXT} from now; place it again with a ttl"
            )
        with self._lock:
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
            if force or store.changed():
                self.apply_override(store.load())
        except FailopenError as exc:
            # An unreadable store keeps the override we last knew: losing an operator's
            # "force on" because a file was half-written would be the wrong way to fail.
            logger.error("override store unreadable, keeping the last known override: %s", exc)

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
                f"forcing enforcement off lasts at most {_WEEK_TEXT}, got a ttl of {ttl:g} s; "
                "place it again when it lapses if the outage goes on"
            )
        if enforce and not ttl <= FORCE_ON_MAX_TTL:
            raise ValueError(
                f"a forced-on override's ttl is at most 30 days ({FORCE_ON_MAX_TTL:g} s), got "
                f"{ttl:g} s; give no ttl to enforce until lifted"
            )
        return Override(enforce, reason, now, now + ttl, set_by=set_by)

    def _place(self, override: Override) -> FlagState:
        if self._store is not None:
            self._store.save(override)
        ttl = override.expires_at - override.set_at if override.expires_at is not None else None
        logger.warning(
            "override placed: enforce=%s ttl=%s reason=%s",
            override.enforce, "none" if ttl is None else f"{round(ttl, 3):g}s", override.reason,
        )
        return self.apply_override(override)

    def _lapse(self) -> FlagState:
        with self._lock:
            if self._override is None or not self._override.expired(self._clock.time()):
                return self._state
            logger.warning("override expired: %s", self._override.reason)
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
        self._state = new
        return old, new

    def _notify(self, old: FlagState, new: FlagState) -> FlagState:
        """Tell listeners about a transition. Runs outside the lock, so a listener may read or
        write the flag; a failing listener is logged and never breaks the writer."""
        if old.enforce != new.enforce:
            _log_transition(new)
        if old != new:
            for listener in list(self._listeners):
                try:
                    listener(old, new)
                except Exception:
                    logger.exception("flag listener %r failed", listener)
        return new


def _log_transition(new: FlagState) -> None:
    # Once per change of the value (not per poll, nor per change of reason or staleness): the
    # line an operator greps for to learn when and why protection went off and came back.
    if new.enforce:
        logger.info(
            "enforcement on: source=%s reason=%r global_status=%s",
            new.source, new.reason, new.global_status,
        )
    else:
        logger.warning(
            "enforcement off: source=%s reason=%r global_status=%s%s",
            new.source, new.reason, new.global_status,
            "" if new.expires_at is None else f" until={rfc3339(new.expires_at)}",
        )
