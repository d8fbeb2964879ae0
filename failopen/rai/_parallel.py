"""``--parallel N`` for ``failopen rai cohorts|sessions``: disjoint sub-windows fetched at once.

Cursor pagination is sequential within one query, but queries of disjoint time windows are
independent. The window is cut into slices (at least four per worker, none over 30 days); N + 1
threads fetch them (N requests at most at once: the client's ``max_in_flight``), each encoding
its records into its own spool file (so memory stays flat however far ahead a slice is
fetched), and the slices are written out in time order, so the output is the same whatever N is.
The threads share one client: its token cache, its retries, and its backoff (one request told to
back off holds back all of them).

Adjacent slices share a boundary instant and the spec does not say whether ``to`` is inclusive,
so a record stamped exactly at a boundary could come back in both slices. A slice holds back the
records it got at or after its own end and writes them after its spool, minus those the next
slice also returned (matched by id among the next slice's records stamped exactly at the
boundary): a few records, never a whole slice's ids.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import threading
from collections.abc import Callable, Generator, Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from failopen.rai._arguments import MAX_WINDOW, format_rfc3339, parse_rfc3339
from failopen.rai.exceptions import RaiValidationError

__all__ = ["Encoded", "parallel_export", "slices"]

Record = dict[str, Any]
Encode = Callable[[list[Record], "list[str] | None"], bytes]
_TIME = {"cohorts": "cohort_window_start", "sessions": "session_created"}
_COPY_CHUNK = 1 << 20


@dataclass
class Encoded:
    """Output bytes ready to write, and the records and pages they finish (counted once)."""

    data: bytes
    records: int = 0
    pages: int = 0


def slices(start: datetime, end: datetime, parallel: int) -> list[tuple[datetime, datetime]]:
    """``[start, end)`` cut into whole-second slices: ``4 * parallel`` or more, each <= 30 days."""
    span = (end - start).total_seconds()
    count = max(4 * parallel, math.ceil(span / MAX_WINDOW.total_seconds()))
    step = max(1, math.ceil(span / count))
    # Inner boundaries fall on whole seconds even when ``start`` has a fraction: a record's
    # place against a boundary is then read from its text without parsing (_position).
    base = start.replace(microsecond=0)
    cuts = []
    first, k = start, 1
    while first < end:
        last = min(end, base + timedelta(seconds=step * k))
        k += 1
        if last > first:
            cuts.append((first, last))
            first = last
    return cuts


def _position(value: Any, boundary: str) -> int:
    """-1, 0 or 1 as timestamp ``value`` is before, at or after ``boundary`` (whole seconds,
    UTC, ``...Z``); 2 when it is no timestamp."""
    if isinstance(value, str) and len(value) >= 20 and value[-1] in "Zz" and value[10] == "T":
        head = value[:19]
        if head != boundary[:19]:
            return -1 if head < boundary[:19] else 1
        fraction = value[19:-1]
        return 0 if fraction.strip(".0") == "" else 1
    try:
        moment = parse_rfc3339(value) if isinstance(value, str) else None
    except RaiValidationError:
        moment = None
    if moment is None:
        return 2
    mark = parse_rfc3339(boundary)
    return -1 if moment < mark else (0 if moment == mark else 1)


@dataclass
class _Slice:
    spool: str
    records: int = 0
    pages: int = 0
    # Stamped at or after the slice's end, with their text when the page had lines (a slim
    # record is only its time and ids: its text is what is written).
    held: list[tuple[Record, str | None]] = field(default_factory=list)
    head: set[Hashable] = field(default_factory=set)  # ids stamped exactly at the slice's start


def _identity(kind: str, record: Record) -> Hashable:
    if kind == "cohorts":
        return record.get("cohort_id")
    return (record.get("session_id"), record.get("cohort_id"))


def parallel_export(
    kind: str,
    start: datetime,
    end: datetime,
    parallel: int,
    fetch: Callable[[datetime, datetime], Generator[Any, None, None]],
    encode: Encode,
    spool_dir: str | None = None,
) -> Iterator[Encoded]:
    """The encoded records of ``[start, end)``, slice by slice in time order.

    ``fetch(first, last)`` gives the raw pages of one slice (the client's ``iter_*_pages`` with
    ``raw=True``); ``encode`` turns records into output bytes (no CSV header).
    """
    cuts = slices(start.astimezone(timezone.utc), end.astimezone(timezone.utc), parallel)
    marks = [format_rfc3339(first) for first, _ in cuts] + [format_rfc3339(cuts[-1][1])]
    time_field = _TIME[kind]
    stop = threading.Event()  # the reader went away: the threads stop at their next page

    def run(i: int) -> _Slice:
        fd, path = tempfile.mkstemp(prefix=".failopen-rai-", suffix=".part", dir=spool_dir)
        result = _Slice(path)
        try:
            fill(i, fd, result)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        return result

    def fill(i: int, fd: int, result: _Slice) -> None:
        low = marks[i][:19] if i > 0 else None
        high = marks[i + 1][:19] if i < len(cuts) - 1 else None
        with os.fdopen(fd, "wb", buffering=1 << 18) as spool:
            pages = fetch(*cuts[i])
            try:
                for page in pages:
                    if stop.is_set():
                        break
                    kept = []
                    lines = page.lines
                    for index, record in enumerate(page.items):
                        stamp = record.get(time_field)
                        # Most records are well inside the slice: told by their whole seconds,
                        # as _position would, without a call per boundary.
                        if (type(stamp) is str and len(stamp) >= 20 and stamp[10] == "T"
                                and stamp[-1] in "Zz" and stamp[:19] != low
                                and (high is None or stamp[:19] < high)):  # fmt: skip
                            kept.append(index)
                            continue
                        if i > 0 and _position(stamp, marks[i]) == 0:
                            result.head.add(_identity(kind, record))
                        if i < len(cuts) - 1 and _position(stamp, marks[i + 1]) in (0, 1):
                            result.held.append((record, None if lines is None else lines[index]))
                        else:
                            kept.append(index)
                    if kept:
                        if len(kept) == len(page.items):
                            spool.write(encode(page.items, lines))
                        else:
                            spool.write(encode([page.items[k] for k in kept],
                                               None if lines is None else [lines[k] for k in kept]))
                    result.records += len(page.items)
                    result.pages += 1
            finally:
                pages.close()

    # One thread more than N: while a slice's last page is decoded, the next slice's first
    # request is already out (the CLI's client sends N requests at most at once).
    executor = ThreadPoolExecutor(parallel + 1, thread_name_prefix="failopen.rai.window")
    futures: list[Future[_Slice]] = []

    def submit_up_to(count: int) -> None:
        # At most 2N slices fetched ahead of the writer: the spools never hold the whole export.
        while len(futures) < min(count, len(cuts)):
            futures.append(executor.submit(run, len(futures)))

    try:
        for i in range(len(cuts)):
            submit_up_to(i + 1 + 2 * parallel)
            done = futures[i].result()
            with open(done.spool, "rb") as f:
                while chunk := f.read(_COPY_CHUNK):
                    yield Encoded(chunk)
            os.unlink(done.spool)
            held = done.held
            dropped = 0
            if held:
                nxt = futures[i + 1].result().head  # the next slice's copies win
                held = [(r, line) for r, line in held if _identity(kind, r) not in nxt]
                dropped = len(done.held) - len(held)
            data = b"".join([encode([r], None if line is None else [line]) for r, line in held])
            yield Encoded(data, done.records - dropped, done.pages)
    finally:
        stop.set()
        for future in futures:
            future.cancel()
        executor.shutdown(wait=True, cancel_futures=True)
        for future in futures:
            if future.done() and not future.cancelled() and future.exception() is None:
                with contextlib.suppress(OSError):
                    os.unlink(future.result().spool)
