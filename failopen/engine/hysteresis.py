"""The status watcher's judgement: readings in, the flag's automatic value out.

:class:`ReadingHysteresis` holds what the readings so far add up to (the streaks, the failures in a
row, when the last good reading came) and feeds each new one, or each failed poll, through the
hysteresis into the flag; it also ends a bypass that has gone without a good reading for too
long. :class:`~failopen.engine.watcher.StatusWatcher` is the thread that makes the readings and
calls in here; the two halves live apart so each reads on its own. The rules themselves are plain
functions in :mod:`failopen.engine.readings`.

Everything written here is written under ``_observe_lock``: readings arrive from the watcher's
thread, from requests' confirmations and from the fleet, and reach the flag in the order they
were judged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Literal

from failopen._config_fields import default_backoff_max
from failopen._internal.redact import MAX_LOGGED_ERROR, public_error
from failopen.clock import Clock
from failopen.engine.flag import EnforcementFlag
from failopen.engine.readings import PollResult, hysteresis, judge, next_poll_delay
from failopen.engine.turns import ProbeTurn
from failopen.exceptions import StatusUnavailable
from failopen.providers.status import StatusReport

__all__ = ["MAX_SHOWN_REGIONS", "ReadingHysteresis"]

#: Impaired regions kept for the flag endpoint (diagnosis only); the log line names them all.
MAX_SHOWN_REGIONS = 20

# The watcher's logger: these lines were always the watcher's, wherever the code sits.
logger = logging.getLogger("failopen.watcher")


# The longest component id and name the flag endpoint shows (Statuspage's ids are 12 characters).
_SHOWN_ID, _SHOWN_NAME = 64, 128


class ReadingHysteresis:
    """Feeds readings and failed polls through the hysteresis into an EnforcementFlag."""

    def __init__(
        self,
        flag: EnforcementFlag,
        *,
        poll_interval: float,
        jitter: float,
        bypass_on: frozenset[str],
        open_after: int,
        close_after: int,
        stale_after: float | None,
        backoff_max: float | None,
        max_stale_bypass: float | None,
        clock: Clock,
        random_fraction: Callable[[], float],
    ) -> None:
        self.flag = flag
        self.poll_interval = poll_interval
        self.jitter = jitter
        self.bypass_on = bypass_on
        self.open_after = open_after
        self.close_after = close_after
        self.stale_after = stale_after if stale_after is not None else 3 * poll_interval
        self.backoff_max = (
            backoff_max if backoff_max is not None else default_backoff_max(poll_interval)
        )
        # None: a stale bypass never ends by itself (only for tests of the layers underneath).
        self.max_stale_bypass = max_stale_bypass
        self._clock = clock
        self._random = random_fraction
        #: Set by the runtime with FAILOPEN_EVIDENCE=status,probe: the verify probe.
        self.probe: ProbeTurn | None = None
        # Hysteresis and failure counters: written by whoever holds _observe_lock.
        self._observe_lock = threading.RLock()  # a flag listener may feed a reading back in
        self._applied_started = float("-inf")
        self._impaired_streak = 0
        self._operational_streak = 0
        self._failures = 0
        self._last_good: float | None = None
        self._last_error: str | None = None
        self._last_regions: tuple[str, ...] = ()
        self._impaired: tuple[tuple[str, str], ...] = ()
        #: The captcha vendor (FAILOPEN_VENDOR) and the component it is watched by, as set
        #: (FAILOPEN_GLOBAL_COMPONENT; the runtime sets both) until a reading names it.
        self.vendor = "enforcement"
        self._watched: tuple[str, str | None] | None = None

    # Read by the flag endpoint per request: one attribute each, written whole (no lock needed).

    @property
    def last_poll_error(self) -> str | None:
        """The last poll's error (one line, credentials removed), from the first failed poll
        until a good reading; None otherwise."""
        return self._last_error

    @property
    def impaired_regions(self) -> tuple[tuple[str, str], ...]:
        """``(region, status)`` of each region the last good reading showed not operational
        (diagnosis only: regions never decide anything); at most :data:`MAX_SHOWN_REGIONS`."""
        return self._impaired

    @property
    def watching(self) -> dict[str, Any]:
        """``{"vendor", "component": {"id", "name"} | None}``: whose status page decides, and by
        which component (its id and name once a reading chose it)."""
        watched = self._watched
        return {"vendor": self.vendor, "component": None if watched is None else
                {"id": watched[0], "name": watched[1]}}

    def watch_component(self, component: str | None) -> None:
        """The configured component (an id or a name), shown until a reading names it."""
        if component is not None and self._watched is None:
            self._watched = (component[:_SHOWN_NAME], None)

    def forget_streaks(self) -> None:
        """Forget the reading streaks (a bypass ended without them): opening again needs new
        outage readings. Caller holds ``_observe_lock``."""
        self._impaired_streak = self._operational_streak = 0

    def _end_stale_bypass(self) -> None:
        with self._observe_lock:
            # Checked again under the lock: a confirmation may have brought a reading meanwhile.
            last, limit, auto = self._last_good, self.max_stale_bypass, self.flag.automatic_state
            if last is None or limit is None or auto.enforce:
                return
            age = self._clock.monotonic() - last
            if age <= limit:
                return
            # The old streak is no evidence any more: opening again needs new outage readings.
            self._impaired_streak = self._operational_streak = 0
            error = self._last_error
            reason = (
                f"bypass ended: no good status reading for {age:.0f}s "
                f"(FAILOPEN_MAX_STALE_BYPASS={limit:g}s); enforcing until the page shows an "
                "outage again"
            )
            logger.error("%s; last poll error: %s", reason, error or "none", extra={
                "event": "failopen.stale_bypass_ended", "age_seconds": round(age, 3),
                "limit_seconds": limit, "error": error})
            self.flag.set_automatic(
                enforce=True, source="watcher", reason=reason,
                global_status=auto.global_status, stale=True, error=error,
            )

    def observe(
        self,
        report: StatusReport,
        *,
        source: Literal["watcher", "confirmed"] = "watcher",
        started: float | None = None,
        age: float = 0.0,
    ) -> PollResult:
        """Feed one good reading through the hysteresis into the flag.

        ``started`` is when the fetch began (monotonic): a reading whose fetch began before the
        last applied one is stale and dropped, so a slow check cannot undo a newer recovery.
        A ``confirmed`` reading (made on demand for a request) counts as one reading on top of
        the watcher's own streak but does not extend it: request traffic, which a caller
        controls, must not make ``open_after`` readings arrive faster than the polls would.
        ``age`` (seconds) is how old the reading already is (one another process made): it
        counts towards ``stale_after`` and ``max_stale_bypass`` as if it had been made here.
        """
        status = report.global_status
        reading = judge(status, self.bypass_on)
        with self._observe_lock:
            if started is not None:
                if started < self._applied_started:
                    logger.debug("dropped a %s reading older than the last one applied", source,
                                 extra={"event": "failopen.reading_superseded",
                                        "source": source})
                    return PollResult(reading, report, "superseded by a newer reading",
                                      self._next_delay(None))
                self._applied_started = started
            impaired = self._impaired_streak + 1 if reading == "impaired" else 0
            # Any good reading that is not an outage counts towards ending a bypass, a neutral
            # one included: operators hold a component at degraded_performance for hours after
            # an outage, and the evidence for bypassing ended with the last outage reading.
            # Moving towards enforcement needs no attacker-proof evidence; away from it does.
            operational = self._operational_streak + 1 if reading != "impaired" else 0
            if source == "watcher":
                self._impaired_streak, self._operational_streak = impaired, operational
                self._failures = 0
            self._last_good = self._clock.monotonic() - age
            self._last_error = None
            auto = self.flag.automatic_state
            # A probe bypass (failopen.engine.probe) leaves the page's own hysteresis enforcing.
            enforcing = auto.enforce or auto.source == "probe"
            enforce, reason = hysteresis(
                reading, status, impaired=impaired, operational=operational, enforcing=enforcing,
                open_after=self.open_after, close_after=self.close_after,
            )
            applied: Literal["watcher", "confirmed", "probe"] = source
            if self.probe is not None:
                enforce, applied, reason = self.probe.on_reading(reading, status, enforce, source,
                                                             reason)
            # Applied under the lock: readings reach the flag in the order they were judged.
            self.flag.set_automatic(
                enforce=enforce, source=applied, reason=reason, global_status=status
            )
        self._log_regions(report)
        chosen = report.global_component
        if chosen is not None:
            # The flag endpoint is public and asked by every page: a page's names, whatever
            # their size there, are kept short here.
            self._watched = (chosen.id[:_SHOWN_ID], chosen.name[:_SHOWN_NAME])
        if reading == "neutral" and not report.known:
            logger.warning("status page reports unknown global status %r; not acting on it",
                           status, extra={"event": "failopen.unknown_status",
                                          "global_status": status})
        return PollResult(reading, report, None, self._next_delay(None))

    def observe_failure(self, exc: BaseException) -> PollResult:
        """Record a poll that gave no usable answer: never evidence either way."""
        with self._observe_lock:
            self._failures += 1
            failures = self._failures
        retry_after = exc.retry_after if isinstance(exc, StatusUnavailable) else None
        message = public_error(exc)
        self._last_error = message
        logged = public_error(exc, limit=MAX_LOGGED_ERROR)
        logger.warning("status page unusable (%d in a row), flag unchanged: %s", failures,
                       logged, extra={"event": "failopen.poll_failed", "failures": failures,
                                      "error": logged, "retry_after": retry_after})
        return PollResult("failed", None, message, self._next_delay(retry_after))

    # --- internals --------------------------------------------------------------------------

    def _log_regions(self, report: StatusReport) -> None:
        regions = tuple((c.description or c.name, c.status) for c in report.impaired_regions())
        # The flag endpoint is public and asked by every page: what a status page lists there is
        # kept short (at most MAX_SHOWN_REGIONS), whatever size the page itself has.
        self._impaired = regions[:MAX_SHOWN_REGIONS]
        impaired = tuple(f"{name}={status}" for name, status in regions)
        if impaired != self._last_regions:
            self._last_regions = impaired
            if impaired:
                logger.info(
                    "regional impairment (diagnosis only; global is %s): %s",
                    report.global_status, ", ".join(impaired),
                    extra={"event": "failopen.regions_changed",
                           "global_status": report.global_status, "impaired": list(impaired)},
                )
            else:
                logger.info("all regions operational", extra={
                    "event": "failopen.regions_changed", "global_status": report.global_status,
                    "impaired": []})

    def _next_delay(self, retry_after: float | None) -> float:
        return next_poll_delay(
            self.poll_interval, self.jitter, failures=self._failures,
            bypassing=not self.flag.automatic_state.enforce, backoff_max=self.backoff_max,
            random_fraction=self._random, retry_after=retry_after,
        )
