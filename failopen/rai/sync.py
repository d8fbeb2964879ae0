"""``failopen rai sync``: each new cohort and its sessions exactly once, run after run.

A run lists, per public key, the cohorts of ``[through - lookback, until)`` (``--since`` the first
time), skips the cohort ids already delivered, and fetches the sessions of each new cohort (up to
``--parallel`` cohorts at once). The lookback is the API's 30-day reach unless narrowed: a cohort
that appears up to 30 days after the time the API filters on (its window start or its created_at;
the spec does not say which) is delivered by the next run, and the delivered ids are remembered
for twice that (``_state.FORGET_AFTER``), so no run lists one again after it is forgotten. A key
last listed more than 30 days ago is named in ``Summary.gaps``: the API may no longer list what
appeared in between. Whole cohorts are the unit of work: they are spooled to temporary
files, appended to the day files in listing order in batches, and only then recorded as delivered
in the state file. A run killed at any point is resumed by the next one: an append cut short is
cut back, and the cohorts not recorded are fetched again from their first page (page tokens may
have expired; nothing resumes from a cursor). The state, lock and spools are ``_state.py`` and
``_sink.py``; the command line is ``_sync_cli.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from failopen.rai._arguments import (
    MAX_WINDOW,
    check_cohort_id,
    format_rfc3339,
    parse_rfc3339,
    split_window,
)
from failopen.rai._client import Client
from failopen.rai._output import Progress, signals_held
from failopen.rai._pager import cohort_sessions_pager
from failopen.rai._sink import Sink, Spool
from failopen.rai._state import FORGET_AFTER, KeyState, SyncState
from failopen.rai.exceptions import Forbidden, RaiError, RaiValidationError

__all__ = ["SyncOptions", "Summary", "MissingSince", "run_sync", "REACH", "CLOCK_SKEW"]

#: How far back a run lists (``--lookback`` at most): the longest window the API accepts.
REACH = MAX_WINDOW
#: How far ahead of this machine's clock an --until (or a state's ``through``) may be.
CLOCK_SKEW = timedelta(minutes=5)

logger = logging.getLogger("failopen.rai")


class _Stopped(Exception):
    """A fetching thread told to stop because the run is failing."""


class MissingSince(Exception):
    """A key has no state yet and no ``--since`` was given (exit 2).

    ``args``: the key, and whether the state file existed.
    """


@dataclass
class SyncOptions:
    """What one run does."""

    public_keys: list[str]
    since: datetime | None
    lookback: timedelta
    until: datetime
    parallel: int = 4
    page_size: int = 1000
    #: A batch is appended once it holds this many records (or the key is done): fewer fsyncs,
    #: at the price of refetching up to this many records after a crash.
    batch_records: int = 20_000
    #: The wall clock (injectable): a state's ``through`` later than now is a stale future.
    now: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))


@dataclass
class Summary:
    """The run report (``--json``)."""

    cohorts: int = 0
    sessions: int = 0
    files: set[str] = field(default_factory=set)
    seconds: float = 0.0
    resumed: bool = False
    undated: int = 0  # records with no usable time, in the ``-undated`` files
    #: Keys the service refused (403: not the credentials' key, or no right to it), in order,
    #: with the error; the other keys were synced and the state keeps these where they were.
    refused: dict[str, RaiError] = field(default_factory=dict)
    #: Cohorts delivered this run created more than half the lookback after their window
    #: started, and the longest such delay (seconds): what a narrower lookback would miss.
    late: int = 0
    late_max: float = 0.0
    #: Keys whose last listing was more than the reach ago (or in the future): public_key and
    #: listed_through. What the API no longer lists could have been missed: exit 6.
    gaps: list[dict[str, str]] = field(default_factory=list)

    def to_json(self, exit_code: int) -> dict[str, Any]:
        return {
            "cohorts": self.cohorts, "sessions": self.sessions, "files": sorted(self.files),
            "seconds": round(self.seconds, 3), "resumed": self.resumed, "exit_code": exit_code,
            "undated": self.undated, "refused_keys": list(self.refused), "gaps": self.gaps,
            "late_cohorts": {"count": self.late, "max_delay_seconds": round(self.late_max)},
        }  # fmt: skip


@dataclass
class _Done:
    """A fetched cohort waiting for its batch."""

    cohort_id: str
    delay: float | None  # created_at - cohort_window_start, seconds (None when unreadable)
    spool: Spool


class _Batch:
    def __init__(self) -> None:
        self.done: list[_Done] = []
        self.records = 0

    def add(self, item: _Done) -> None:
        self.done.append(item)
        self.records += sum(item.spool.records.values())


class _Run:
    def __init__(self, client: Client, state: SyncState, sink: Sink, options: SyncOptions,
                 summary: Summary, progress: Progress) -> None:  # fmt: skip
        self.client, self.state, self.sink, self.options = client, state, sink, options
        self.summary, self.progress = summary, progress
        self.stop = threading.Event()  # a failure elsewhere: fetching threads stop at a page

    # -- one unit of work, on a worker thread --

    def fetch(self, record: dict[str, Any], cohort_id: str, delay: float | None) -> _Done:
        spool = self.sink.spool()
        try:
            spool.add("cohorts", [record])
            # JSONL copies each record's text: its dict keeps only the day field (and ids).
            pages = self.client.export_pages(
                cohort_sessions_pager(cohort_id, page_size=self.options.page_size),
                slim=self.sink.fmt == "jsonl",
            )
            with closing(pages):
                for page in pages:
                    if self.stop.is_set():
                        raise _Stopped
                    spool.add("sessions", page.items, page.lines)
                    self.progress.add(len(page.items))
            spool.close()
        except BaseException:
            spool.discard()
            raise
        return _Done(cohort_id, delay, spool)

    # -- committing, on the main thread --

    def commit(self, keystate: KeyState, batch: _Batch, forget: str) -> None:
        if not batch.done:
            return
        # SIGTERM waits for the batch: appended, recorded and counted, or none of it; the run
        # then stops with a summary that counts what the state records.
        with signals_held():
            self._commit(keystate, batch, forget)

    def _commit(self, keystate: KeyState, batch: _Batch, forget: str) -> None:
        spools = [item.spool for item in batch.done]
        try:
            names = sorted({name for spool in spools for name in spool.parts})
            # Written ahead: a crash during the append is cut back by the next run.
            self.state.pending = self.sink.sizes(names)
            if self.state.pending:
                self.state.save()
            written = self.sink.append(spools, self.state.pending)
            for item in batch.done:
                keystate.delivered[item.cohort_id] = forget
            self.state.pending = {}
            self.state.save()
        finally:
            for spool in spools:
                spool.discard()
        self.summary.files.update(written)
        undated = sum(spool.undated for spool in spools)
        for spool in spools:
            self.summary.cohorts += spool.records["cohorts"]
            self.summary.sessions += spool.records["sessions"]
        for item in batch.done:
            if item.delay is not None and item.delay > self.options.lookback.total_seconds() / 2:
                self.summary.late += 1
                self.summary.late_max = max(self.summary.late_max, item.delay)
        if undated:
            # Delivered once like any other record, but no day file can hold it: say so, as a
            # reader of the day files would otherwise never see it.
            self.summary.undated += undated
            logger.warning("%d record(s) had no usable timestamp (not RFC 3339 with an offset "
                           "within ±23:59); written to the -undated files", undated)
        batch.done, batch.records = [], 0

    # -- one public key --

    def listed(self, public_key: str, keystate: KeyState,
               start: datetime) -> Iterator[tuple[dict[str, Any], str, float | None]]:  # fmt: skip
        """New cohorts of the key, in listing order: (record, cohort_id, its delay)."""
        seen: set[str] = set()
        for first, last in split_window(start, self.options.until):
            pages = self.client.iter_cohort_pages(
                first, last, [public_key], page_size=self.options.page_size, raw=True
            )
            with closing(pages):
                for page in pages:
                    for record in page.items:
                        cohort_id = record.get("cohort_id")
                        try:
                            if not isinstance(cohort_id, str):
                                raise RaiValidationError("not a string")
                            check_cohort_id(cohort_id)
                        except RaiValidationError:
                            # Its sessions cannot be asked for; skipped, not a stuck sync.
                            logger.warning("a listed cohort has no usable cohort_id; skipped")
                            continue
                        if cohort_id in keystate.delivered or cohort_id in seen:
                            continue
                        seen.add(cohort_id)
                        yield record, cohort_id, _delay(record)

    def key(self, public_key: str) -> None:
        keystate = self.state.key(public_key)
        until = self.options.until
        through = None
        if keystate.through is not None:
            through = parse_rfc3339(keystate.through, name="state through")
            if through > self.options.now() + CLOCK_SKEW:
                # Written by a run with a future --until (refused since): it never listed what
                # appeared after it ran, and when that was is unknown. Listed again from here.
                self.summary.gaps.append({"public_key": public_key,
                                          "listed_through": keystate.through})  # fmt: skip
                through = None
            elif until - through > REACH:
                self.summary.gaps.append({"public_key": public_key,
                                          "listed_through": keystate.through})  # fmt: skip
            start = min(through or until, until) - self.options.lookback
            if through is not None:
                # Ids delivered before through - FORGET_AFTER may be forgotten: a run with an
                # --until in the past lists nothing older, or it would write them again.
                start = max(start, through - FORGET_AFTER)
        elif keystate.since is not None:  # a first run, or one resumed after it was killed
            start = parse_rfc3339(keystate.since, name="state since")
        else:
            raise MissingSince(public_key, self.state.exists)
        forget = format_rfc3339(until + FORGET_AFTER)
        if start < until:
            self._deliver(public_key, keystate, start, forget)
        # Never moved back by a run with an earlier --until: what was listed stays listed.
        keystate.through = format_rfc3339(max(through or until, until))
        keystate.delivered = {
            cohort: at for cohort, at in keystate.delivered.items()
            if parse_rfc3339(at, name="state delivered") > until
        }  # fmt: skip
        self.state.save()

    def _deliver(self, public_key: str, keystate: KeyState, start: datetime, forget: str) -> None:
        batch = _Batch()
        in_flight: deque[Future[_Done]] = deque()
        # One thread more than --parallel: while a cohort's last page is decoded, the next
        # cohort's first request is already out (the client sends N requests at most at once).
        executor = ThreadPoolExecutor(self.options.parallel + 1, thread_name_prefix="failopen.sync")
        try:
            for record, cohort_id, end in self.listed(public_key, keystate, start):
                in_flight.append(executor.submit(self.fetch, record, cohort_id, end))
                # 2N queued for N threads: they keep fetching while this thread appends.
                if len(in_flight) >= 2 * self.options.parallel:
                    self._next(in_flight, keystate, batch, forget)
            while in_flight:
                self._next(in_flight, keystate, batch, forget)
            self.commit(keystate, batch, forget)
        except BaseException:
            self.stop.set()
            for future in in_flight:
                future.cancel()
            executor.shutdown(wait=True, cancel_futures=True)
            self._discard(in_flight, batch)
            raise
        executor.shutdown(wait=True)

    def _next(self, in_flight: deque[Future[_Done]], keystate: KeyState, batch: _Batch,
              forget: str) -> None:  # fmt: skip
        future = in_flight[0]
        try:
            done = future.result()
        except RaiError:
            # Keep what is complete: the cohorts fetched before this one are committed first.
            in_flight.popleft()
            self.commit(keystate, batch, forget)
            raise
        in_flight.popleft()
        batch.add(done)
        if batch.records >= self.options.batch_records:
            self.commit(keystate, batch, forget)

    @staticmethod
    def _discard(in_flight: deque[Future[_Done]], batch: _Batch) -> None:
        for item in batch.done:
            item.spool.discard()
        for future in in_flight:
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result().spool.discard()


def _delay(record: dict[str, Any]) -> float | None:
    """Seconds from a cohort's window start to its created_at; None when either is unreadable."""
    try:
        start, created = record.get("cohort_window_start"), record.get("created_at")
        if not isinstance(start, str) or not isinstance(created, str):
            return None
        return (parse_rfc3339(created) - parse_rfc3339(start)).total_seconds()
    except RaiValidationError:
        return None


def _started(state: SyncState, public_key: str) -> bool:
    """Whether the state knows where the key's runs start (if not, the first needs --since)."""
    keystate = state.keys.get(public_key)
    return keystate is not None and (keystate.through is not None or keystate.since is not None)


def run_sync(client: Client, state: SyncState, sink: Sink, options: SyncOptions,
             progress: Progress, summary: Summary | None = None,
             clock: Callable[[], float] = time.monotonic) -> Summary:  # fmt: skip
    """One sync run under the state's lock (the caller holds it); the summary of what was done.

    Raises RaiError, OSError (output or state), MissingSince; the state then records every
    cohort committed before the failure and nothing after it. A key the service refuses (403)
    does not stop the others: it is in ``summary.refused``, for the caller to name.
    """
    summary = summary if summary is not None else Summary()
    started = clock()
    # What a killed run left is cleaned first, whatever this run goes on to do.
    summary.resumed = state.running or bool(state.pending)
    if state.pending:
        sink.rollback(state.pending)  # the previous run died mid-append
        state.pending = {}
    sink.remove_stale_spools()
    state.remove_stale_temporaries()
    new = [key for key in options.public_keys if not _started(state, key)]
    for public_key in new:
        if options.since is None:
            raise MissingSince(public_key, state.exists)
    for public_key in options.public_keys:
        recorded = state.keys[public_key].since if public_key not in new else None
        if recorded is not None and state.keys[public_key].through is None and (
            options.since is not None and format_rfc3339(options.since) != recorded
        ):
            logger.warning("--since ignored for %s: its first run, interrupted, started at %s; "
                           "this run goes on from there", public_key, recorded)  # fmt: skip
    for public_key in new:
        assert options.since is not None
        # Saved below, before anything is fetched: a run killed from now on resumes from it.
        state.key(public_key).since = format_rfc3339(options.since)
    state.running = True
    state.save()
    run = _Run(client, state, sink, options, summary, progress)
    try:
        for public_key in options.public_keys:
            try:
                run.key(public_key)
            except Forbidden as exc:
                # This key's alone (spec 7: forbidden_public_key, or no right to its cohorts):
                # what it committed is kept, it is retried next run, the other keys go on.
                summary.refused[public_key] = exc
                run.stop.clear()
        state.running = False
        state.save()
    finally:
        summary.seconds = clock() - started
    return summary
