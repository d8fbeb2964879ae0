"""The audit trail of bypasses, on the ``failopen.audit`` logger.

Every bypass is recorded. How it is written is ``FAILOPEN_AUDIT``:

- ``summary`` (default): the first bypass after the flag changes is written at once, in full;
  the rest are counted and written as one line per ``interval`` (how many, which paths, how many
  of each outcome, how many distinct clients and the busiest ones), and when the flag changes
  again. A log record costs
  tens of microseconds in a real server, which during an outage is most of what a bypassed
  request costs; a counter costs a fraction of one.
- ``each``: one line per bypassed request, with its path, client, outcome, route, the route's
  outage policy and the reason.

With ``FAILOPEN_AUDIT_FILE`` set, every bypass is also appended to a JSON-lines file, whatever
the mode (:mod:`failopen.observe.audit_file`), for review after the outage.

Bypasses that follow a confirmed outage of the verify call itself (not the flag) are rare and
always written in full.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Callable
from typing import Literal, Protocol

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.observe.audit_file import AuditFile, window_id

__all__ = ["AuditMode", "BypassAudit"]

audit = logging.getLogger("failopen.audit")

AuditMode = Literal["each", "summary"]
#: The outcome of an open route's bypass while enforcement is off: by far the most common one.
FLAG_OFF = "bypassed_flag_off"

# Paths and clients are chosen by the caller: a flood of distinct ones must not grow memory.
_MAX_KEYS = 1000
_OTHER = "<other>"
_TOP = 5
# ... nor may a long one: a path or client is counted by its first characters only.
_MAX_KEY = 256
# How many bypasses wait to be folded into the counts, and so how many paths and clients are held
# whole meanwhile.
_BATCH = 64


class _Window(Protocol):
    """What names a bypass window: the flag state's source and since when it holds."""

    @property
    def source(self) -> str: ...

    @property
    def since(self) -> float: ...


class _Turn(_Window, Protocol):
    """A flag state as a listener sees it: also whether it enforces, and why."""

    @property
    def enforce(self) -> bool: ...

    @property
    def reason(self) -> str: ...


class BypassAudit:
    """Writes bypasses to the audit log, one by one or summarised. Thread-safe; never raises."""

    def __init__(
        self,
        mode: AuditMode = "summary",
        *,
        interval: float = 10.0,
        clock: Clock = SYSTEM_CLOCK,
        file: AuditFile | None = None,
        window: Callable[[], _Window] | None = None,
    ) -> None:
        self.mode = mode
        #: The JSON-lines audit file (FAILOPEN_AUDIT_FILE), or None.
        self.file = file
        self._window_of = window
        self._window: tuple[object, str] | None = None
        self.interval = interval
        self._clock = clock
        self._monotonic = clock.monotonic
        self._lock = threading.Lock()
        renew_locks_after_fork(self, "_lock")
        self._paths: dict[str, int] = {}
        self._clients: dict[str, int] = {}
        # Outcomes are a handful of names the guard chooses, never the caller: no bound needed.
        self._outcomes: dict[str, int] = {}
        #: Bypasses tallied but not yet folded into the counts: at most about _BATCH each.
        #: ``bypassed_flag_off`` ones (an open route's: by far the most) in their own list, so
        #: that their tally is the same one append it was before outcomes were counted; each
        #: other outcome in its own list, so that a fold counts them exactly without a lock.
        self._pending: list[tuple[str, str]] = []
        self._pending_other: dict[str, list[tuple[str, str]]] = {}
        self._total = 0
        self._since: float | None = None
        #: When the open window's summary is due; while none is open, at once (the next
        #: bypass opens one).
        self._due = -math.inf

    def __repr__(self) -> str:
        return f"BypassAudit(mode={self.mode!r}, interval={self.interval:g})"

    def record(self, path: str, client: str, reason: str, first: bool = False,
               user_agent: str = "", outcome: str = FLAG_OFF, route: str = "",
               policy: str = "open", challenge: str = "") -> None:
        """One bypassed request. ``first``: the first since the flag changed (written in full).

        ``outcome`` says how it was admitted (``bypassed_flag_off``, ``bypassed_fallback``,
        ``bypassed_confirmed_outage``); ``route`` is the protected route it counted under (the
        path when empty) and ``policy`` that route's outage policy: a reviewer tells a request
        that paid a proof of work from one that passed free, and which setting let it through.
        ``challenge`` names what a ``bypassed_fallback`` request passed (``altcha`` or the second
        vendor's name; the audit file's reason says it too).
        """
        if first or self.file is not None or self.mode == "each":
            if self.file is not None:
                self.file.record(path, client, user_agent, outcome, reason, self._window_id())
            if self.mode == "each" or first:
                route = route or path
                # The challenge only where one was passed: an open route's line is unchanged.
                audit.warning(
                    "bypass path=%r client=%r outcome=%s route=%r policy=%s "
                    f"{'challenge=%s ' if challenge else '%s'}reason=%s", path, client, outcome,
                    route, policy, challenge, reason, extra={
                        "event": "failopen.bypass", "path": path, "client": client,
                        "outcome": outcome, "route": route, "policy": policy,
                        "challenge": challenge or None, "reason": reason})
                if self.mode == "each":
                    return
        # Every bypass of an outage comes through here, so it is tallied with one append (a
        # single C call under the GIL: no lock, none lost), and the tallies are folded into the
        # counts under the lock once per batch, when a window opens and when it is due.
        pending = self._pending
        if outcome is not FLAG_OFF and outcome != FLAG_OFF:
            others = self._pending_other
            pending = others.get(outcome) or others.setdefault(outcome, [])
        pending.append((path, client))
        monotonic = self._monotonic  # an attribute read, then a call: both specialised
        if len(pending) >= _BATCH or monotonic() >= self._due:
            self._settle()

    def close(self) -> None:
        """Flush the summary, and write and close the audit file (shutting down)."""
        self.flush()
        if self.file is not None:
            self.file.close()

    def flag_changed(self, old: _Turn, new: _Turn) -> None:
        """A flag listener: write to the audit file when enforcement turned off or came back,
        naming the window as its bypass lines are named. Never raises."""
        try:
            if self.file is None or old.enforce == new.enforce:
                return
            if new.enforce:
                self.file.mark("enforcement_back", window_id(old.source, old.since), new.reason)
            else:
                self.file.mark("enforcement_off", window_id(new.source, new.since), new.reason)
        except Exception:  # noqa: BLE001 - a listener must never fail the flag's writer
            audit.exception("failopen: the audit file could not note a flag change",
                            extra={"event": "failopen.audit_error"})

    def _window_id(self) -> str:
        """The current bypass window's id, computed once per flag state."""
        if self._window_of is None:
            return ""
        try:
            state = self._window_of()
            cached = self._window
            if cached is not None and cached[0] is state:
                return cached[1]
            # A bypass while the flag still enforces: a confirmed outage of the verify call
            # (before the hysteresis turns the flag off); named apart from the watcher's window.
            source = "confirmed" if getattr(state, "enforce", False) else state.source
            self._window = (state, window_id(source, state.since))
            return self._window[1]
        except Exception:  # noqa: BLE001 - never into a request
            return ""

    def flush(self) -> None:
        """Write what is counted but not yet written (the flag changed, or shutting down)."""
        with self._lock:
            self._fold()
            summary = self._take(self._clock.monotonic()) if self._total else None
        if summary is not None:
            audit.warning(*summary[0], extra=summary[1])

    def _settle(self) -> None:
        """Fold the pending bypasses into the counts; open the window, or write its summary
        when it is due."""
        with self._lock:
            self._fold()
            now = self._clock.monotonic()
            summary = None
            if self._total:
                since = self._since
                if since is None:
                    self._since = since = now
                    self._due = now + self.interval
                if now - since >= self.interval:
                    summary = self._take(now)
        if summary is not None:
            audit.warning(*summary[0], extra=summary[1])

    def _fold(self) -> None:
        """Move the pending bypasses into the counts (lock held). Exact without a lock on the
        appending side: what is appended while this runs stays pending, for the next fold."""
        pending = self._pending
        taken = len(pending)
        batch = pending[:taken]
        del pending[:taken]
        outcomes = self._outcomes
        if taken:
            outcomes[FLAG_OFF] = outcomes.get(FLAG_OFF, 0) + taken
        if self._pending_other:
            # list(): one C call, so a list another thread adds meanwhile waits for the next
            # fold; each list is taken as the common one is, exact without a lock.
            for outcome, others in list(self._pending_other.items()):
                taken = len(others)
                if taken:
                    batch += others[:taken]
                    del others[:taken]
                    outcomes[outcome] = outcomes.get(outcome, 0) + taken
        if not batch:
            return
        self._total += len(batch)
        batch_paths, batch_clients = zip(*batch, strict=True)
        paths, clients = self._paths, self._clients
        for path, n in Counter(batch_paths).items():
            _bump(paths, path, n)
        for client, n in Counter(batch_clients).items():
            _bump(clients, client, n)

    def _take(self, now: float) -> tuple[tuple[object, ...], dict[str, object]]:
        """The summary line's format and arguments, and its ``extra``; resets the counters
        (lock held)."""
        span = now - (self._since if self._since is not None else now)
        paths, clients, total = self._paths, self._clients, self._total
        outcomes = dict(sorted(self._outcomes.items()))
        self._paths, self._clients, self._total, self._since = {}, {}, 0, None
        self._outcomes = {}
        self._due = -math.inf
        distinct = len(clients) - (_OTHER in clients)
        extra: dict[str, object] = {
            "event": "failopen.bypass_summary", "requests": total, "seconds": round(span, 3),
            "paths": _busiest(paths), "outcomes": outcomes, "distinct_clients": distinct,
            "busiest_clients": _busiest(clients),
        }
        return (
            "bypass summary: %d requests in %.0fs; paths=%s; outcomes=%s; %d distinct clients, "
            "busiest=%s", total, span, _top(paths), outcomes, distinct, _top(clients),
        ), extra


def _bump(counts: dict[str, int], key: str, n: int) -> None:
    if len(key) > _MAX_KEY:
        key = key[:_MAX_KEY] + "..."
    if key not in counts and len(counts) >= _MAX_KEYS:
        key = _OTHER
    counts[key] = counts.get(key, 0) + n


def _busiest(counts: dict[str, int]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda item: -item[1])[:_TOP])


def _top(counts: dict[str, int]) -> str:
    return "{" + ", ".join(f"{key!r}: {count}" for key, count in _busiest(counts).items()) + "}"
