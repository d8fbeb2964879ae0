"""``failopen rai sync``: each new cohort and its sessions exactly once, run after run.

A run lists, per public key, the cohorts of ``[through - lookback, until)`` (``--since`` the first
time), skips the cohort ids already delivered, and fetches the sessions of each new cohort (up to
``--parallel`` cohorts at once). The lookback is the API's 30-day reach unless narrowed: a cohort
that appears up to 30 days after the time the API filters on (its window start or its created_at;
the spec does not say which) is delivered by the next run, and the delivered ids are remembered
for twice that (``_state.FORGET_AFTER``), so no run lists one again after it is forgotten. A key
last listed more than 30 days ago is named in ``Summary.gaps``: the API may no longer list what
appeared in between. Whole cohorts are the unit of work: they are spooled to temporary
files, written as new files per batch (hidden, fsynced, recorded as delivered in the state file
with the renames still to do, then renamed). A run killed at any point is resumed by the next one:
a batch's recorded renames are completed, a batch not recorded is left hidden and removed, and
the cohorts not recorded are fetched again from their first page (page tokens may
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
from failopen.rai._manifest import Summary, new_run_id
from failopen.rai._output import Progress, signals_held
from failopen.rai._pager import cohort_sessions_pager
from failopen.rai._sink import UNDATED, Move, Sink, Spool, complete_renames
from failopen.rai._state import FORGET_AFTER, KeyState, SyncState
from failopen.rai.exceptions import Forbidden, RaiError, RaiValidationError

__all__ = ["SyncOptions", "Summary", "MissingSince", "run_sync", "listed_cohorts", "REACH",
           "CLOCK_SKEW"]  # fmt: skip

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
    #: A batch is written once it holds this many records (or the key is done): fewer fsyncs,
    #: at the price of refetching up to this many records after a crash.
    batch_records: int = 20_000
    #: The wall clock (injectable): a state's ``through`` later than now is a stale future.
    now: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))


@dataclass
class _Done:
    """A fetched cohort waiting for its batch."""

    cohort_id: str
    delay: float | None  # created_at - cohort_window_start, seconds (None when unreadable)
    spool: Spool
    created_at: datetime | None = None


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
        self.seq = 0  # batches committed: the last part of the run's file names
        self.public_key = ""
        self.newest: datetime | None = None

    # -- one unit of work, on a worker thread --

    def fetch(self, record: dict[str, Any], cohort_id: str, delay: float | None) -> _Done:
        spool = self.sink.spool()
        try:
            spool.add("cohorts", [record])
            # JSONL copies each record's text: its dict keeps only the day field (and ids).
            pages = self.client.export_pages(
                cohort_sessions_pager(cohort_id, page_size=self.options.page_size),
                slim=self.sink.format.keeps_lines,
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
        return _Done(cohort_id, delay, spool, _created(record))

    # -- committing, on the main thread --

    def commit(self, keystate: KeyState, batch: _Batch, forget: str) -> None:
        if not batch.done:
            return
        # SIGTERM waits for the batch: written, recorded and counted, or none of it; the run
        # then stops with a summary that counts what the state records.
        with signals_held():
            self._commit(keystate, batch, forget)

    def _commit(self, keystate: KeyState, batch: _Batch, forget: str) -> None:
        spools = [item.spool for item in batch.done]
        self.seq += 1
        try:
            # Hidden files first: a failure (a full disk) leaves nothing and delivers nothing.
            moves = self.sink.prepare(spools, self.summary.run_id, self.seq)
            try:
                for item in batch.done:
                    keystate.delivered[item.cohort_id] = forget
                # Written ahead: from here the batch is delivered; a run killed before the
                # renames below are done has them completed by the next run.
                self.state.renames = [(move.temp, move.final) for move in moves]
                self.state.save()
            except BaseException:
                for item in batch.done:
                    keystate.delivered.pop(item.cohort_id, None)
                self.state.renames = []
                self.sink.discard(moves)
                raise
            self.sink.publish(moves)
            self.state.renames = []
            if moves:
                self.state.save()
        finally:
            for spool in spools:
                spool.discard()
        self._count(batch, spools, moves)
        batch.done, batch.records = [], 0

    def _count(self, batch: _Batch, spools: list[Spool], moves: list[Move]) -> None:
        summary = self.summary
        summary.files.update(move.path for move in moves)
        summary.written += [move.to_json() for move in moves]
        counts = summary.by_key.setdefault(self.public_key, {"cohorts": 0, "sessions": 0})
        for spool in spools:
            for kind in ("cohorts", "sessions"):
                counts[kind] += spool.records[kind]
        summary.cohorts += sum(spool.records["cohorts"] for spool in spools)
        summary.sessions += sum(spool.records["sessions"] for spool in spools)
        for spool in spools:
            for kind, names in spool.unknown.items():
                summary.add_unknown(kind, names)  # a warning once per field and run
        for item in batch.done:
            if item.delay is not None and item.delay > self.options.lookback.total_seconds() / 2:
                summary.late += 1
                summary.late_max = max(summary.late_max, item.delay)
            created = item.created_at
            if created is not None and (self.newest is None or created > self.newest):
                self.newest = created
                summary.newest_created_at = format_rfc3339(created)
        undated = sum(spool.undated for spool in spools)
        if undated:
            # Delivered once like any other record, but no day can hold it: say so, as a reader
            # of the day partitions would otherwise never see it.
            summary.undated += undated
            logger.warning(
                "%d record(s) had no usable timestamp (not RFC 3339 with an offset "
                "within ±23:59); written to the dt=%s partition",
                undated,
                UNDATED,
            )

    # -- one public key --

    def listed(self, public_key: str, keystate: KeyState,
               start: datetime) -> Iterator[tuple[dict[str, Any], str, float | None]]:  # fmt: skip
        """New cohorts of the key, in listing order: (record, cohort_id, its delay)."""
        seen: set[str] = set()
        listed = listed_cohorts(self.client, public_key, start, self.options.until,
                                self.options.page_size)  # fmt: skip
        for cohort_id, record in listed:
            if cohort_id in keystate.delivered or cohort_id in seen:
                continue
            seen.add(cohort_id)
            yield record, cohort_id, _delay(record)

    def key(self, public_key: str) -> None:
        keystate = self.state.key(public_key)
        self.public_key = public_key
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


def listed_cohorts(client: Client, public_key: str, start: datetime, until: datetime,
                   page_size: int) -> Iterator[tuple[str, dict[str, Any]]]:  # fmt: skip
    """(cohort_id, record) of the key's cohorts listed in ``[start, until)``, in listing order;
    one without a usable id is skipped with a warning (its sessions cannot be asked for)."""
    for first, last in split_window(start, until):
        pages = client.iter_cohort_pages(first, last, [public_key], page_size=page_size, raw=True)
        with closing(pages):
            for page in pages:
                for record in page.items:
                    value = record.get("cohort_id")
                    cohort_id = value if isinstance(value, str) else ""  # not a string: blank
                    try:
                        check_cohort_id(cohort_id)
                    except RaiValidationError:
                        logger.warning("a listed cohort has no usable cohort_id; skipped")
                        continue
                    yield cohort_id, record


def _delay(record: dict[str, Any]) -> float | None:
    """Seconds from a cohort's window start to its created_at; None when either is unreadable."""
    try:
        start, created = record.get("cohort_window_start"), record.get("created_at")
        if not isinstance(start, str) or not isinstance(created, str):
            return None
        return (parse_rfc3339(created) - parse_rfc3339(start)).total_seconds()
    except RaiValidationError:
        return None


def _created(record: dict[str, Any]) -> datetime | None:
    """A cohort's created_at; None when unreadable."""
    created = record.get("created_at")
    try:
        return parse_rfc3339(created) if isinstance(created, str) else None
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
    now = options.now()
    summary.run_id = summary.run_id or new_run_id(now)
    summary.started_at = summary.started_at or format_rfc3339(now.replace(microsecond=0))
    summary.until = format_rfc3339(options.until)
    summary.public_keys = list(options.public_keys)
    # What a killed run left is cleaned first, whatever this run goes on to do: the renames of a
    # batch it recorded as delivered are completed (roll forward), then its temporaries go.
    summary.resumed = state.running or bool(state.pending) or bool(state.renames)
    if state.pending:
        sink.rollback(state.pending)  # an earlier release died mid-append to a day file
        state.pending = {}
    if state.renames:
        summary.recovered = [sink.relative(p) for p in complete_renames(state.renames)]
        state.renames = []
        state.save()
    sink.remove_stale_spools()
    state.remove_stale_temporaries()
    new = [key for key in options.public_keys if not _started(state, key)]
    for public_key in new:
        if options.since is None:
            raise MissingSince(public_key, state.exists)
    for public_key in options.public_keys:
        recorded = state.keys[public_key].since if public_key not in new else None
        if (
            recorded is not None
            and state.keys[public_key].through is None
            and (options.since is not None and format_rfc3339(options.since) != recorded)
        ):
            logger.warning("--since ignored for %s: its first run, interrupted, started at %s; "
                           "this run goes on from there", public_key, recorded)  # fmt: skip
    for public_key in new:
        assert options.since is not None
        # Saved below, before anything is fetched: a run killed from now on resumes from it.
        state.key(public_key).since = format_rfc3339(options.since)
    state.running = True
    state.save()
    summary.listing = True  # from here on the run has a manifest, whatever happens
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
