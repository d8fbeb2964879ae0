"""Refused override attempts in the log, paced: a flood of wrong tokens is one line per interval.

Each refusal still answers at once; only the log is paced. The first refusal of an interval is
logged with who sent it; the rest of that interval are counted, and the count rides on the first
line of the next interval that sees a refusal. Nothing is held per client, so a flood from many
addresses costs no memory.
"""

from __future__ import annotations

import logging
import threading

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.clock import SYSTEM_CLOCK, Clock

__all__ = ["REFUSAL_LOG_INTERVAL", "RefusalLog"]

#: Seconds between log lines about refused override attempts.
REFUSAL_LOG_INTERVAL = 60.0


class RefusalLog:
    """Logs refusals as one WARNING line per interval, with the count of the ones not logged."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = REFUSAL_LOG_INTERVAL,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        renew_locks_after_fork(self, "_lock")
        self._quiet_until: float | None = None
        self._unlogged = 0

    def refused(self, why: str, client: str) -> None:
        """Record one refusal: logged when it is the first of an interval, else counted."""
        now = self._clock.monotonic()
        with self._lock:
            if self._quiet_until is not None and now < self._quiet_until:
                self._unlogged += 1
                return
            unlogged, self._unlogged = self._unlogged, 0
            self._quiet_until = now + self._interval
        if unlogged:
            self._logger.warning(
                "override refused: %s from %s (%d more refused since the last line; one line "
                "per %gs)", why, client or "an unknown client", unlogged, self._interval,
                extra={"event": "failopen.override_refused", "why": why, "client": client,
                       "unlogged": unlogged})
        else:
            self._logger.warning(
                "override refused: %s from %s (more within %gs are counted, not logged)",
                why, client or "an unknown client", self._interval,
                extra={"event": "failopen.override_refused", "why": why, "client": client,
                       "unlogged": 0})
