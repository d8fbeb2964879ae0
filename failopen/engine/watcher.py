"""The status watcher: a background thread that turns status-page readings into the flag's value.

Only readings of the *global* component count (spec 3.2: a regional impairment with the global
component operational means failover worked, so there is nothing to bypass). Readings pass through
hysteresis: ``open_after`` consecutive impaired readings stop enforcement, ``close_after``
consecutive operational readings restore it. A poll that fails is not a reading at all: the flag
keeps its value, and after ``stale_after`` without a good reading the state is marked stale.

A bypass rests on evidence, so nothing may stretch it past the evidence:

- while the automatic side holds enforcement off, the page is polled every interval whatever it
  answers (no error backoff, no ``Retry-After`` beyond the interval): the polls that would end the
  bypass are never delayed, so once the page reads operational again enforcement is back within
  ``close_after`` intervals plus one status timeout. Backoff applies only while enforcing.
- a bypass with no good reading for ``max_stale_bypass`` seconds ends (someone who can drop the
  connections to the status page must not keep enforcement off), and only a new outage reading
  opens it again. An operator's override is a separate layer and is not touched.

In fleet mode (a ``redis://`` store, :mod:`failopen.engine.fleet`) the thread also syncs with the
fleet each turn: only the leader polls the page; the others apply the leader's published readings
through the same hysteresis, a reading's age counting as if they had made it.

The thread starts lazily, restarts itself in a forked child (gunicorn ``--preload``), sleeps on an
Event so ``stop()`` is immediate, and survives any single bad poll.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from failopen._internal.forksafe import BackgroundThread
from failopen._internal.redact import MAX_LOGGED_ERROR, public_error
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.config import default_backoff_max
from failopen.engine.first_reading import FirstReading
from failopen.engine.flag import EnforcementFlag
from failopen.engine.fleet_reading import FleetReading, Kind
from failopen.engine.probe_record import ProbeResult
from failopen.exceptions import StatusError, StatusUnavailable
from failopen.observe.metrics import NO_METRICS, Metrics
from failopen.vendor.status import StatusReport

__all__ = ["FleetTurn", "PollResult", "ProbeTurn", "Reading", "StatusSource", "StatusWatcher"]

logger = logging.getLogger("failopen.watcher")


Reading = Literal["impaired", "operational", "neutral", "failed"]


class StatusSource(Protocol):
    """Anything that reads the status page (``failopen.StatusClient``, or a test double)."""

    def fetch(self) -> StatusReport:
        """One reading. Raises StatusError when there is no usable answer."""
        ...


# The fleet and the probe hold the watcher and call back into it; the watcher knows them only by
# what it asks of them, so the engine's modules import each other in one direction.
class FleetTurn(Protocol):
    """What the watcher (and the probe) ask of the fleet: :class:`failopen.engine.fleet.Fleet`."""

    leader: bool
    last_reading: FleetReading | None

    @property
    def polls(self) -> bool: ...

    def sync(self) -> None: ...

    def published(self, report: StatusReport, at: float, kind: Kind = "watcher") -> None: ...

    def published_probe(self, result: ProbeResult) -> None: ...


class ProbeTurn(Protocol):
    """What the watcher (and the fleet) ask of the verify probe:
    :class:`failopen.engine.probe.VerifyProbe`."""

    interval: float

    def due(self) -> bool: ...

    def run_due(self) -> ProbeResult | None: ...

    def check_open(self) -> None: ...

    def observe(self, result: ProbeResult) -> None: ...

    def on_reading(
        self, reading: Reading, status: str, enforce: bool,
        source: Literal["watcher", "confirmed"], reason: str,
    ) -> tuple[bool, Literal["watcher", "confirmed", "probe"], str]: ...


@dataclass(frozen=True)
class PollResult:
    """The outcome of one poll, for ``failopen watch --json`` and for tests."""

    reading: Reading
    report: StatusReport | None
    error: str | None
    next_delay: float


class StatusWatcher(BackgroundThread):
    """Polls the status page and drives an EnforcementFlag."""

    #: Set by the runtime (failopen.metrics): counts and times the polls.
    metrics: Metrics = NO_METRICS

    def __init__(
        self,
        source: StatusSource | None,
        flag: EnforcementFlag,
        *,
        poll_interval: float = 30.0,
        jitter: float = 0.1,
        bypass_on: frozenset[str] = frozenset({"partial_outage", "major_outage"}),
        open_after: int = 1,
        close_after: int = 2,
        stale_after: float | None = None,
        backoff_max: float | None = None,
        max_stale_bypass: float | None = 900.0,
        store_refresh: float = 1.0,
        clock: Clock = SYSTEM_CLOCK,
        random_fraction: Callable[[], float] = random.random,
        on_poll: Callable[[PollResult], None] | None = None,
    ) -> None:
        self.source = source
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
        self.store_refresh = store_refresh
        self._clock = clock
        self._random = random_fraction
        self._on_poll = on_poll
        #: Set by the runtime in fleet mode: who polls, and the readings others published.
        self.fleet: FleetTurn | None = None
        #: Set by the runtime with FAILOPEN_EVIDENCE=status,probe: the verify probe.
        self.probe: ProbeTurn | None = None
        #: Set by the runtime: ended by this thread's first turn, which early requests await.
        self.first_reading: FirstReading | None = None
        # Hysteresis and failure counters: written by whoever holds _observe_lock.
        self._observe_lock = threading.RLock()  # a flag listener may feed a reading back in
        self._applied_started = float("-inf")
        self._impaired_streak = 0
        self._operational_streak = 0
        self._failures = 0
        self._last_good: float | None = None
        self._last_error: str | None = None
        self._last_regions: tuple[str, ...] = ()
        #: Status page requests this process's watcher has made (``failopen fleet`` shows it).
        self.polls = 0
        BackgroundThread.__init__(self, name="failopen.status-watcher", logger=logger)

    def __repr__(self) -> str:
        return f"StatusWatcher(running={self.running}, interval={self.poll_interval:g}s)"

    # --- the thread (started, stopped and restarted after fork by BackgroundThread) ----------

    def _before_start(self) -> None:
        if self._last_good is None:
            # Staleness counts from the start: a page unreadable from boot is flagged too.
            self._last_good = self._clock.monotonic()

    def _after_fork(self) -> None:
        # The parent's thread does not exist in the child, and it may hold this lock.
        self._observe_lock = threading.RLock()
        if self.first_reading is not None:
            self.first_reading.after_fork()

    def _loop(self) -> None:
        stop = self._stop
        # Without a status page the thread still keeps overrides from the store current.
        next_poll = self._clock.monotonic() if self.source is not None else float("inf")
        last_poll = next_poll
        polled = True
        began = self._clock.monotonic()
        while not stop.is_set():
            turn = self._clock.monotonic()
            fleet = self.fleet
            if fleet is not None:
                fleet.sync()
            polls = fleet is None or fleet.polls
            started = self._clock.monotonic()
            if polls and not polled and self.source is not None:
                next_poll = started  # just became the leader, or fell back: poll now
            polled = polls
            probe, probe_next = self.probe if polls else None, False
            if started >= next_poll:
                result = self.poll_once() if polls else self.follow_once()
                # Counted from the start of the poll: a poll that took the whole status timeout
                # does not push the next one back (the bound on ending a bypass relies on it).
                last_poll, next_poll = started, started + result.next_delay
                # Never a poll and a probe in one turn: a sync (the lease) comes between them.
                probe_next = probe is not None and probe.due()
            elif probe is not None:
                probe.run_due()
            self.tick()
            first = self.first_reading
            if first is not None and first.pending:
                # This process read the page itself, or adopted a reading or an override (a
                # fleet follower whose leader has published nothing yet tries again next turn).
                flag = self.flag
                first.turn_ended(evidence=polls or flag.automatic_state.source != "default"
                                 or flag.override is not None,
                                 elapsed=self._clock.monotonic() - began)
            if not self.flag.automatic_state.enforce:
                # A bypass that began between polls (a request's confirmation) while the page
                # failed: the backoff chosen while enforcing must not delay the polls that end it.
                next_poll = min(next_poll, last_poll + self.poll_interval)
            # The refresh period counts from the turn's start: a store read (a Redis round trip)
            # does not stretch "at least once per store_refresh". A fleet member turns twice per
            # period, so an override reaches every process within one period even when a busy
            # machine runs a turn late.
            period = self.store_refresh if fleet is None else self.store_refresh / 2
            now = self._clock.monotonic()
            wait = 0.0 if probe_next else max(min(next_poll, turn + period) - now, 0.0)
            if self._clock.wait(stop, wait):
                break

    # --- one step at a time (the thread's body; tests drive these directly) ----------------

    def tick(self) -> None:
        """Between polls: pick up overrides from the store, mark an old reading stale, and end a
        bypass that has had no good reading for ``max_stale_bypass``."""
        try:
            self.flag.refresh()
            self.flag.state  # noqa: B018 - reading it lets an expired override lapse
            last = self._last_good
            age = self._clock.monotonic() - last if last is not None else 0.0
            stale = last is not None and age > self.stale_after
            limit = self.max_stale_bypass
            bypassing = not self.flag.automatic_state.enforce
            if stale and bypassing and limit is not None and age > limit:
                self._end_stale_bypass()
            self.flag.set_stale(stale, error=self._last_error if stale else None)
            probe = self.probe
            if probe is not None:
                probe.check_open()  # a probe bypass ends when its results stop coming
        except Exception:
            logger.exception("status watcher tick failed; continuing",
                             extra={"event": "failopen.watcher_error"})
        try:
            self.metrics.flush()  # the decision counters, for a multi-process collector
        except Exception:
            logger.exception("metrics failed", extra={"event": "failopen.metrics_failed"})

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

    def follow_once(self) -> PollResult:
        """A follower's turn: what the fleet's latest reading said (readings are applied as
        the fleet syncs); reported like a poll, for ``failopen watch``. Never raises."""
        fleet = self.fleet
        reading = fleet.last_reading if fleet is not None else None
        fresh = reading is not None and self._last_good is not None and (
            self._clock.monotonic() - self._last_good <= self.stale_after)
        if reading is None or not fresh:
            result = PollResult("failed", None, "no fresh reading from the fleet's poller",
                                self.poll_interval)
        else:
            status = reading.report.global_status
            kind: Reading = ("impaired" if status in self.bypass_on else
                             "operational" if status == "operational" else "neutral")
            result = PollResult(kind, reading.report, None, self.poll_interval)
        self._report(result)
        return result

    def poll_once(self) -> PollResult:
        """Read the status page once and feed the reading in. Never raises."""
        started = self._clock.monotonic()
        if self.source is None:
            return PollResult("failed", None, "no status page configured", self.poll_interval)
        at = self._clock.time()
        self.polls += 1
        try:
            report = self.source.fetch()
        except StatusError as exc:
            result = self.observe_failure(exc)
        except Exception as exc:  # a bug must not kill the thread, nor count as evidence
            logger.exception("status poll failed unexpectedly",
                             extra={"event": "failopen.watcher_error"})
            result = self.observe_failure(exc)
        else:
            result = self.observe(report, source="watcher", started=started)
            fleet = self.fleet
            if fleet is not None and fleet.leader:
                fleet.published(report, at)
        try:
            self.metrics.status_poll(result.reading, self._clock.monotonic() - started)
        except Exception:  # counting must never cost the thread a poll
            logger.exception("metrics failed", extra={"event": "failopen.metrics_failed"})
        self._report(result)
        return result

    def _report(self, result: PollResult) -> None:
        if self._on_poll is not None:
            try:
                self._on_poll(result)
            except Exception:  # the caller's callback must not kill the thread
                logger.exception("on_poll callback failed",
                                 extra={"event": "failopen.watcher_error"})

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
        if status in self.bypass_on:
            reading: Reading = "impaired"
        elif status == "operational":
            reading = "operational"
        else:
            # Degraded (when not configured as an outage), under_maintenance, or a value the
            # spec does not list: reported, never acted on.
            reading = "neutral"
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
            if reading == "impaired" and impaired >= self.open_after:
                enforce, reason = False, f"global component {status}"
            elif reading == "operational" and (enforcing or operational >= self.close_after):
                enforce, reason = True, "global component operational"
            elif reading != "impaired" and (enforcing or operational >= self.close_after):
                enforce, reason = True, f"global component {status} (not an outage); enforcing"
            elif enforcing:
                # An outage reading, but fewer than open_after of them in a row so far.
                enforce, reason = True, f"global component {status}; enforcing"
            else:
                enforce = False
                reason = (
                    f"global component {status}; bypassing until {self.close_after} "
                    "readings that are not an outage"
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
        impaired = tuple(
            f"{c.description or c.name}={c.status}" for c in report.impaired_regions()
        )
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
        failures = self._failures
        spread = self.poll_interval * self.jitter
        if not self.flag.automatic_state.enforce:
            # Bypassing: every interval, errors or not, and jitter only ever shortens the wait.
            # A Retry-After (which a hostile or broken page chooses) must not stretch a bypass.
            return max(0.0, self.poll_interval - self._random() * spread)
        if failures == 0:
            return max(0.0, self.poll_interval + (2 * self._random() - 1) * spread)
        # Exponential backoff with full jitter while the status page fails.
        ceiling = min(self.backoff_max, self.poll_interval * 2.0 ** min(failures, 30))
        delay = self._random() * ceiling
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max))
        return delay
