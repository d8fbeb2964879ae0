"""Where an override arrived: which live processes of this deployment have applied it.

Each fleet member names the override it has applied in its heartbeat (``override``: a short hash
of the override's stored form, None for "no override") and how often it beats (``beat``). After
``failopen override`` or the override endpoint writes the store, :func:`measure_reach` reads the
heartbeats until every live member names the new state or the wait is over, and says "reached N
of M processes".

Only members of this deployment count: a heartbeat whose ``page`` (the hash of the status page it
watches, :mod:`failopen.engine.fleet_identity`) differs from ours is another deployment's, and its
word is never evidence that ours applied anything. A member that beat no more recently than two
of its own beat intervals (measured by Redis's clock, the key's remaining TTL, so the clocks of
the machines do not matter) is counted as gone. A heartbeat without ``override`` (an older
failopen) is live but never counted as reached: it does not say.

Right after Redis lost its keys (FLUSHALL, a restart without persistence) the heartbeats are
gone with them, and a live member is missing from the count until it beats again. The count is
final only once the keys have been back (``fallback:since``, Redis's clock) for as long as a live
member may go without beating; until then the wait goes on even when every member seen has
applied the override, and a wait that ends first says the count may be short.

A file store keeps no heartbeats: there the reach is not measured, and the answer says that each
process applies the file when it next reads it, rather than invent a number.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.engine.fleet_identity import stored_hash
from failopen.stores.redis import RedisStore

if TYPE_CHECKING:
    import threading

    from failopen.stores import OverrideStore
    from failopen.stores.override import Override

__all__ = ["DEFAULT_WAIT", "HEARTBEAT_TTL", "LONGEST_BEAT", "MAX_WAIT", "Reach", "measure_reach",
           "override_id"]

#: Seconds ``failopen override`` and the endpoint wait for the members, unless told otherwise.
DEFAULT_WAIT = 5.0
#: The longest the override endpoint may be asked to wait (it holds a worker meanwhile).
MAX_WAIT = 30.0
#: Seconds a member's heartbeat key lives (``failopen fleet`` lists those seen in the last minute).
HEARTBEAT_TTL = 60.0
#: The longest a live member goes between two heartbeats (less with a short lease: a third of it).
LONGEST_BEAT = 10.0
_POLL = 0.1  # seconds between two reads of the heartbeats while waiting

How = Literal["measured", "not_waited", "unmeasured", "unattributed", "unknown"]
_MIXED: Any = object()  # the live members watch different pages, and we know none


def override_id(override: Override | None) -> str | None:
    """The short hash a member reports for the override it applied (None: no override)."""
    if override is None:
        return None
    canonical = json.dumps(override.to_json(), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Reach:
    """How many live processes of this deployment applied an override (None: not known)."""

    how: How
    reached: int | None = None
    processes: int | None = None
    waited: float = 0.0
    note: str = ""

    @property
    def reached_none(self) -> bool:
        """True when it was measured and no live process applied it (none seen counts too)."""
        return self.how == "measured" and not self.reached

    @property
    def unconfirmed(self) -> bool:
        """True when it must not read as done: none reached, or the store went away before the
        members could be counted (the override may be lost with it)."""
        return self.reached_none or self.how == "unknown"

    @property
    def partial(self) -> bool:
        """True when some but not all live processes applied it within the wait."""
        return self.how == "measured" and 0 < (self.reached or 0) < (self.processes or 0)

    def to_json(self) -> dict[str, Any]:
        """The fields the CLI's JSON and the endpoint's answer gain."""
        shown: dict[str, Any] = {"reached": self.reached, "processes": self.processes,
                                 "reach": self.how, "waited_seconds": round(self.waited, 3)}
        if self.note:
            shown["reach_note"] = self.note
        warning = self.warning()
        if warning:
            shown["warning"] = warning
        return shown

    def line(self) -> str:
        """The one line the CLI prints."""
        if self.how == "measured":
            return f"reached {self.reached} of {self.processes} processes"
        return self.note

    def warning(self) -> str | None:
        """What the operator must not miss (None: nothing)."""
        if self.how == "unknown":
            return (f"{self.note}; whether any process applied the override is unknown, and if "
                    "Redis lost its keys it is gone: check failopen fleet and place it again")
        if self.how != "measured":
            return None  # the note, printed as the line, already says why there is no count
        shortfall = self._shortfall()
        # A note on a measured count says the count itself may be short (keys lost just now).
        return "; ".join(said for said in (shortfall, self.note) if said) or None

    def _shortfall(self) -> str | None:
        if not self.reached_none:
            if self.partial:
                return (f"{(self.processes or 0) - (self.reached or 0)} of {self.processes} live "
                        f"processes had not applied it within {self.waited:g}s; they apply it at "
                        "their next sync unless stuck (see failopen fleet)")
            return None
        if not self.processes:
            return ("no live process of this deployment was seen in the store: the override is "
                    "stored, but check that the servers use this FAILOPEN_STORE and "
                    "FAILOPEN_REDIS_PREFIX and are running (failopen fleet)")
        return (f"no process applied the override within {self.waited:g}s: it is stored, but "
                "until a process applies it nothing has changed, and if Redis loses its keys "
                "before then the override is lost; check failopen fleet and place it again")


def measure_reach(
    store: OverrideStore, override: Override | None, *, page: str | None, wait: float,
    clock: Clock = SYSTEM_CLOCK, stop: threading.Event | None = None,
) -> Reach:
    """Wait up to ``wait`` seconds for the live members of the deployment watching ``page``
    (None: whatever page every live member shares) to apply ``override``. Raises StoreError
    only when the store cannot be read at all."""
    if wait <= 0:
        return Reach("not_waited", note="not waited for the processes (--wait 0); "
                                        "failopen fleet shows what each applied")
    if not isinstance(store, RedisStore):
        return Reach("unmeasured", note=(
            "reach not measured: the file store keeps no heartbeats; each process on this "
            "machine applies the override when it next reads the file (every "
            "FAILOPEN_STORE_REFRESH, 1s by default)"))
    import threading

    target = override_id(override)
    event = stop if stop is not None else threading.Event()
    start = clock.monotonic()
    while True:
        members, keys_age = _live_members(store)
        reference = page if page is not None else _shared_page(members)
        waited = clock.monotonic() - start
        if reference is _MIXED:
            if waited >= wait:
                return Reach("unattributed", waited=waited, note=(
                    "reach not measured: the live processes watch different status pages and "
                    "this command knows none; set FAILOPEN_STATUS_URL and "
                    "FAILOPEN_GLOBAL_COMPONENT as the servers do"))
        else:
            ours = [m for m in members if stored_hash(m.get("page")) == reference]
            reached = sum(1 for m in ours if "override" in m and m["override"] == target)
            short = _count_may_be_short(ours, keys_age)
            if (ours and reached == len(ours) and not short) or waited >= wait:
                note = (f"the store's keys were put back {keys_age:.1f}s ago (a new Redis, or "
                        "one that lost its keys): a live process that has not beaten since is "
                        "not counted yet (failopen fleet)") if short else ""
                return Reach("measured", reached, len(ours), waited, note=note)
        if clock.wait(event, min(_POLL, max(0.0, wait - waited))):
            return Reach("not_waited", note="the wait was interrupted")


def _shared_page(members: list[dict[str, Any]]) -> Any:
    pages = {stored_hash(m.get("page")) for m in members}
    return pages.pop() if len(pages) == 1 else (None if not pages else _MIXED)


def _count_may_be_short(ours: list[dict[str, Any]], keys_age: float | None) -> bool:
    """True while a live member may not have beaten since the keys came back: for two of the
    longest beat interval seen, and a second (when a member counts as gone, the other way).
    No member beats less often than LONGEST_BEAT: a heartbeat saying otherwise is not believed,
    so no value in Redis stretches the wait past that (nor the wait itself, which always ends)."""
    if keys_age is None:
        return False  # no record of a loss (an older failopen wrote the keys): nothing to add
    beats = [every for m in ours if (every := _interval(m.get("beat"))) is not None]
    return keys_age <= 2 * min(max(beats, default=0.0), LONGEST_BEAT) + 1


def _interval(every: Any) -> float | None:
    """A heartbeat's ``beat`` in seconds; None unless a positive, finite number."""
    if not isinstance(every, (int, float)) or isinstance(every, bool):
        return None
    try:
        seconds = float(every)  # an integer of 400 digits is JSON too: OverflowError
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _live_members(store: RedisStore) -> tuple[list[dict[str, Any]], float | None]:
    """The heartbeats of members that beat within two of their beat intervals, and how long
    ago (Redis's clock, seconds) the keys were last put back after a loss (None: not recorded)."""
    beats, since, now = store.live_beats()
    live = []
    for raw, ttl_ms in beats:
        try:
            beat = json.loads(raw) if raw is not None else None
        except (ValueError, RecursionError, TypeError, UnicodeDecodeError):
            continue  # garbage: no member of ours wrote it
        if not isinstance(beat, dict) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
            continue
        every = _interval(beat.get("beat"))
        if every is not None and HEARTBEAT_TTL - ttl_ms / 1000 > 2 * every + 1:
            continue  # missed two beats: gone (killed), though its key lingers a minute
        live.append(beat)
    return live, _age(since, now)


def _age(since: Any, now: Any) -> float | None:
    """Seconds from ``since`` (ms, as the store writes it; '0' means never lost) to Redis's
    ``TIME``; None when there is no such record or it is not a number failopen wrote."""
    try:
        since_ms = int(since)
        now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    except (TypeError, ValueError, IndexError):
        return None
    # '0' is "never lost"; a start later than Redis's clock is not one failopen wrote (TIME).
    return None if since_ms <= 0 or since_ms > now_ms else (now_ms - since_ms) / 1000
