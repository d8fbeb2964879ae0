"""What the status watcher makes of a reading: its kind, the hysteresis rule, the next poll's wait.

:class:`~failopen.engine.watcher.StatusWatcher` holds the streaks, the lock and the flag; the
rules it applies to them are plain functions of their arguments here (no lock, no flag, no I/O),
apart from the thread that runs them, so each rule reads on its own. :class:`PollResult` is what
one poll reports, and :class:`StatusSource` what the watcher reads the page through.
:mod:`failopen.engine.watcher` re-exports the public names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from failopen.providers.status import StatusReport

__all__ = ["PollResult", "Reading", "StatusSource", "hysteresis", "judge", "next_poll_delay"]

Reading = Literal["impaired", "operational", "neutral", "failed"]


class StatusSource(Protocol):
    """Anything that reads the status page (``failopen.StatusClient``, or a test double)."""

    def fetch(self) -> StatusReport:
        """One reading. Raises StatusError when there is no usable answer."""
        ...


@dataclass(frozen=True)
class PollResult:
    """The outcome of one poll, for ``failopen watch --json`` and for tests."""

    reading: Reading
    report: StatusReport | None
    error: str | None
    next_delay: float


def judge(status: str, bypass_on: frozenset[str]) -> Reading:
    """The kind of reading a good answer's global status is."""
    if status in bypass_on:
        return "impaired"
    if status == "operational":
        return "operational"
    # Degraded (when not configured as an outage), under_maintenance, or a value the spec does
    # not list: reported, never acted on.
    return "neutral"


def hysteresis(
    reading: Reading, status: str, *, impaired: int, operational: int, enforcing: bool,
    open_after: int, close_after: int,
) -> tuple[bool, str]:
    """Enforce or not, and why, after a good reading: ``impaired`` and ``operational`` are the
    streaks with this reading counted; ``enforcing`` is what the page's evidence said so far."""
    if reading == "impaired" and impaired >= open_after:
        return False, f"global component {status}"
    if reading == "operational" and (enforcing or operational >= close_after):
        return True, "global component operational"
    if reading != "impaired" and (enforcing or operational >= close_after):
        return True, f"global component {status} (not an outage); enforcing"
    if enforcing:
        # An outage reading, but fewer than open_after of them in a row so far.
        return True, f"global component {status}; enforcing"
    return False, (
        f"global component {status}; bypassing until {close_after} "
        "readings that are not an outage"
    )


def next_poll_delay(
    poll_interval: float, jitter: float, *, failures: int, bypassing: bool, backoff_max: float,
    random_fraction: Callable[[], float], retry_after: float | None,
) -> float:
    """Seconds until the next poll, after ``failures`` failed polls in a row."""
    spread = poll_interval * jitter
    if bypassing:
        # Bypassing: every interval, errors or not, and jitter only ever shortens the wait.
        # A Retry-After (which a hostile or broken page chooses) must not stretch a bypass.
        return max(0.0, poll_interval - random_fraction() * spread)
    if failures == 0:
        return max(0.0, poll_interval + (2 * random_fraction() - 1) * spread)
    # Exponential backoff with full jitter while the status page fails.
    ceiling = min(backoff_max, poll_interval * 2.0 ** min(failures, 30))
    delay = random_fraction() * ceiling
    if retry_after is not None:
        delay = max(delay, min(retry_after, backoff_max))
    return delay
