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

This module is the thread and its turns. What the readings add up to (streaks, staleness, the
flag's automatic value) is :class:`~failopen.engine.hysteresis.ReadingHysteresis`, which
:class:`StatusWatcher` extends; the rules it applies (a reading's kind, the hysteresis, the wait
before the next poll) are plain functions in :mod:`failopen.engine.readings`; what the thread asks
of the fleet and the probe is in :mod:`failopen.engine.turns`. Their public names are re-exported
here.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from failopen._internal.forksafe import BackgroundThread
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.engine.first_reading import FirstReading
from failopen.engine.flag import EnforcementFlag
from failopen.engine.hysteresis import ReadingHysteresis
from failopen.engine.readings import PollResult, Reading, StatusSource, judge
from failopen.engine.turns import FleetTurn, ProbeTurn
from failopen.exceptions import StatusError
from failopen.observe.metrics import NO_METRICS, Metrics

__all__ = ["FleetTurn", "PollResult", "ProbeTurn", "Reading", "StatusSource", "StatusWatcher"]

logger = logging.getLogger("failopen.watcher")


class StatusWatcher(ReadingHysteresis, BackgroundThread):
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
        ReadingHysteresis.__init__(
            self, flag, poll_interval=poll_interval, jitter=jitter, bypass_on=bypass_on,
            open_after=open_after, close_after=close_after, stale_after=stale_after,
            backoff_max=backoff_max, max_stale_bypass=max_stale_bypass, clock=clock,
            random_fraction=random_fraction,
        )
        self.source = source
        self.store_refresh = store_refresh
        self._on_poll = on_poll
        #: Set by the runtime in fleet mode: who polls, and the readings others published.
        self.fleet: FleetTurn | None = None
        #: Set by the runtime: ended by this thread's first turn, which early requests await.
        self.first_reading: FirstReading | None = None
        #: Status page requests this process's watcher has made (``failopen fleet`` shows it).
        self.polls = 0
        BackgroundThread.__init__(self, name="failopen.status-watcher", logger=logger)

    def __repr__(self) -> str:
        return f"StatusWatcher(running={self.running}, interval={self.poll_interval:g}s)"

    # --- the thread (started, stopped and restarted after fork by BackgroundThread) ----------

    def _before_start(self) -> None:
        if self._last_good is None and self.source is not None:
            # Staleness counts from the start: a page unreadable from boot is flagged too.
            # Without a page (overrides only, or FAILOPEN_EVIDENCE=probe) there is no reading
            # to grow stale, and the stale rule must not end the probe's bypasses: the probe
            # has its own limit (FAILOPEN_MAX_STALE_BYPASS, counted from its bypass).
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
            kind = judge(status, self.bypass_on)
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
