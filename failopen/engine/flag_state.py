"""The flag's published state, and the log lines a change of it writes.

:class:`FlagState` is what the flag publishes and every reader reads: requests, listeners, the
flag endpoint, ``failopen watch``. The flag (:mod:`failopen.engine.flag`) decides when a new state
replaces the old one; what a state holds, how it shows as JSON and how a change is logged lives
here, apart from those rules. :mod:`failopen.engine.flag` re-exports the public names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

__all__ = ["FlagState", "Listener", "Source", "log_staleness", "log_transition", "rfc3339"]

# The flag's own logger: a transition is logged under the same name wherever the line is written.
logger = logging.getLogger("failopen.flag")

#: Who set the flag: no reading yet, the status watcher, a confirmation made for a request, the
#: verify probe (opt-in, ``FAILOPEN_EVIDENCE=status,probe``), or an operator's override.
Source = Literal["default", "watcher", "confirmed", "probe", "override"]
Listener = Callable[["FlagState", "FlagState"], None]


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
    # Milliseconds, always: one format in every JSON answer, log line and terminal line.
    return f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}.{moment.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class FlagState:
    """What the flag says right now. Never mutated: a change publishes a new object."""

    enforce: bool
    source: Source
    reason: str
    #: When this value began: while off, when enforcement last went off (an override placed
    #: while already off, again or over the page's outage, does not move it).
    since: float
    expires_at: float | None = None
    global_status: str | None = None
    stale: bool = False
    #: While stale: the last poll's error (bounded, credentials removed); otherwise None.
    error: str | None = None
    #: While off: when this process last saw enforcement resume before this off period began
    #: (None: not since it started). A fallback challenge from an outage that began before it
    #: belongs to an earlier outage and is refused. Not in :meth:`to_dict`: the gate's alone.
    resumed_at: float | None = None

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


def log_transition(new: FlagState) -> None:
    """Log a change of the flag's value (the flag calls it outside its lock)."""
    # Once per change of the value (not per poll, nor per change of reason or staleness): the
    # line an operator greps for to learn when and why protection went off and came back.
    extra = {"event": "failopen.flag_changed", **_fields(new)}
    if new.enforce:
        logger.info(
            "enforcement on: source=%s reason=%r global_status=%s",
            new.source, new.reason, new.global_status, extra=extra,
        )
    else:
        logger.warning(
            "enforcement off: source=%s reason=%r global_status=%s%s",
            new.source, new.reason, new.global_status,
            "" if new.expires_at is None else f" until={rfc3339(new.expires_at)}", extra=extra,
        )


def log_staleness(new: FlagState) -> None:
    """Log a change of the flag's staleness (the flag calls it outside its lock)."""
    # Once when the last good reading grows too old, once when a good reading arrives again.
    if new.stale:
        logger.warning(
            "status reading stale: no good status page reading for a while; the flag keeps "
            "enforce=%s (%s); last poll error: %s", new.enforce, new.reason, new.error or "none",
            extra={"event": "failopen.stale", **_fields(new)},
        )
    else:
        logger.info("status reading fresh again: enforce=%s (%s)", new.enforce, new.reason,
                    extra={"event": "failopen.stale_ended", **_fields(new)})


def _fields(state: FlagState) -> dict[str, Any]:
    # Names chosen not to collide with LogRecord attributes (logging raises on those).
    return {
        "enforce": state.enforce, "source": state.source, "reason": state.reason,
        "global_status": state.global_status, "expires_at": rfc3339(state.expires_at),
        "stale": state.stale, "error": state.error,
    }
