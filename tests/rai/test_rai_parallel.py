"""``--parallel N`` on ``failopen rai cohorts|sessions``: same output as one window at a time."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable, Generator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from _sync_helpers import SECRET, Run, window

from failopen.rai._output import AtomicFile
from failopen.rai._parallel import parallel_export, slices
from failopen.rai.models import Page
from failopen.testing.rai_emulator import RaiEmulator


@pytest.fixture
def emulator() -> RaiEmulator:
    # 50 days: the 30-day split and the slices both apply.
    return RaiEmulator(client_secret=SECRET, cohorts=20, span_days=50, unknown_fields=True)


@pytest.mark.parametrize("verb", ["sessions", "cohorts"])
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_parallel_output_is_byte_for_byte_the_sequential_output(
    rai: Callable[..., Run], emulator: RaiEmulator, verb: str, fmt: str
) -> None:
    outputs = {}
    for n in ("1", "4", "7"):
        result = rai(verb, *window(emulator), "--format", fmt, "--page-size", "40",
                     "--parallel", n)  # fmt: skip
        assert result.code == 0, result.err
        outputs[n] = result.out
    assert outputs["1"] == outputs["4"] == outputs["7"]
    if fmt == "jsonl" and verb == "sessions":
        records = [json.loads(line) for line in outputs["4"].splitlines()]
        assert records == list(emulator.iter_session_records())


def test_parallel_windows_really_overlap(rai: Callable[..., Run], emulator: RaiEmulator) -> None:
    assert rai("sessions", *window(emulator), "--parallel", "4").code == 0
    windows = {tuple(r.query["from"]) for r in emulator.history if r.path.endswith("/sessions")}
    assert len(windows) >= 16  # at least four slices per worker


def test_a_failure_mid_parallel_export_leaves_no_file_and_no_spool(
    rai: Callable[..., Run], emulator: RaiEmulator, tmp_path: Path
) -> None:
    emulator.fail_every = 5
    out = tmp_path / "s.jsonl"
    result = rai("sessions", *window(emulator), "--page-size", "20", "--max-attempts", "1",
                 "--out", str(out), "--parallel", "4")  # fmt: skip
    assert result.code == 5 and "internal (HTTP 500)" in result.err
    assert list(tmp_path.iterdir()) == []


def test_slices_cover_the_window_in_whole_seconds_of_at_most_30_days() -> None:
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    end = start + timedelta(days=200, seconds=7)
    cuts = slices(start, end, 2)
    assert cuts[0][0] == start and cuts[-1][1] == end
    assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:], strict=False))
    assert all(timedelta(0) < b - a <= timedelta(days=30) for a, b in cuts)
    assert len(cuts) >= 8
    assert len(slices(start, start + timedelta(seconds=3), 4)) == 3  # never below a second
    odd = start + timedelta(microseconds=250_000)
    cuts = slices(odd, odd + timedelta(hours=5), 2)
    assert cuts[0][0] == odd and cuts[-1][1] == odd + timedelta(hours=5)
    assert all(a[1] == b[0] and a[1].microsecond == 0 for a, b in zip(cuts, cuts[1:], strict=False))


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + ".000Z"


def test_a_record_at_a_slice_boundary_returned_by_both_slices_is_written_once() -> None:
    # A service whose windows include both ends: the record stamped exactly at each boundary
    # comes back from the slice before it and the slice after it.
    start = datetime(2024, 5, 1, tzinfo=timezone.utc)
    end = start + timedelta(hours=8)
    cuts = slices(start, end, 1)
    stamps = [start + timedelta(minutes=30 * i) for i in range(16)]

    def fetch(first: datetime, last: datetime) -> Generator[Page[dict[str, Any]], None, None]:
        items = [{"session_id": f"s{i}", "cohort_id": "c", "session_created": _stamp(t)}
                 for i, t in enumerate(stamps) if first <= t <= last]  # fmt: skip
        yield Page(items, None, "rai-v1")

    def encode(records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
        return b"".join(json.dumps(r).encode() + b"\n" for r in records)

    chunks = list(parallel_export("sessions", start, end, 3, fetch, encode))
    records = [json.loads(line) for line in b"".join(c.data for c in chunks).splitlines()]
    assert [r["session_id"] for r in records] == [f"s{i}" for i in range(16)]
    assert sum(c.records for c in chunks) == 16
    assert len(cuts) == 4


def test_a_slim_record_held_at_a_slice_boundary_is_written_from_its_text() -> None:
    # JSONL pages keep only a record's time and ids; its text carries the rest. A record held
    # back at a slice's end must be written from that text, never from the cut-down dict.
    start = datetime(2024, 5, 1, tzinfo=timezone.utc)
    end = start + timedelta(hours=8)
    cuts = slices(start, end, 1)
    inner = [b for _, b in cuts[:-1]]

    def fetch(first: datetime, last: datetime) -> Generator[Page[dict[str, Any]], None, None]:
        full = [{"session_id": f"s{i}", "cohort_id": "c", "session_created": _stamp(t),
                 "future_field": {"kept": i}} for i, t in enumerate(inner) if first < t <= last]
        slim = [{k: r[k] for k in ("session_id", "cohort_id", "session_created")} for r in full]
        yield Page(slim, None, "rai-v1", [json.dumps(r) for r in full])

    def encode(records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
        text = lines if lines is not None else [json.dumps(r) for r in records]
        return "".join(line + "\n" for line in text).encode()

    data = b"".join(c.data for c in parallel_export("sessions", start, end, 1, fetch, encode))
    records = [json.loads(line) for line in data.splitlines()]
    assert [r["future_field"] for r in records] == [{"kept": i} for i in range(len(inner))]


@pytest.mark.parametrize("stamp", ["2024-05-01T04:00:00+24:00", "2024-05-01T04:00:00+23:60"])
def test_a_record_with_an_unusable_offset_is_written_once_not_a_crash(stamp: str) -> None:
    # +24:00 matches the pattern of an offset, but no time zone can be that far from UTC: the
    # record is a bad one (written once, as an undated record is), never a traceback on every run.
    start = datetime(2024, 5, 1, tzinfo=timezone.utc)
    end = start + timedelta(hours=8)
    # When the service filters on: its own clock's reading of each record.
    records = [(start + timedelta(hours=1),
                {"session_id": "s0", "cohort_id": "c", "session_created": _stamp(start)}),
               (start + timedelta(hours=4),
                {"session_id": "bad", "cohort_id": "c", "session_created": stamp})]

    def fetch(first: datetime, last: datetime) -> Generator[Page[dict[str, Any]], None, None]:
        yield Page([r for t, r in records if first <= t < last], None, "rai-v1")

    def encode(batch: list[dict[str, Any]], lines: list[str] | None) -> bytes:
        return b"".join(json.dumps(r).encode() + b"\n" for r in batch)

    data = b"".join(c.data for c in parallel_export("sessions", start, end, 2, fetch, encode))
    written = [json.loads(line)["session_id"] for line in data.splitlines()]
    assert sorted(written) == ["bad", "s0"]


def test_progress_counts_each_record_once(rai: Callable[..., Run], emulator: RaiEmulator,
                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert rai("sessions", *window(emulator), "--parallel", "3").code == 0
    last = terminal.getvalue().splitlines()[-1].lstrip("\r")
    assert last.startswith(f"{emulator.total_sessions:,} records, ")


@pytest.mark.parametrize("parallel", ["1", "4"])
def test_a_long_export_reaches_the_disk_as_it_goes(
    rai: Callable[..., Run], emulator: RaiEmulator, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, parallel: str,
) -> None:  # fmt: skip
    # Else the commit waits for the whole file at once (0.6-0.8 s for a million sessions).
    synced: list[int] = []
    real = getattr(os, "fdatasync", os.fsync)
    monkeypatch.setattr(AtomicFile, "SYNC_EVERY", 20_000)
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1], raising=False)
    out = tmp_path / "s.jsonl"
    result = rai("sessions", *window(emulator), "--page-size", "50", "--out", str(out),
                 "--parallel", parallel)  # fmt: skip
    assert result.code == 0, result.err
    assert len(synced) >= 3  # a 0.66 MB file, flushed every 20 kB or so
    records = [json.loads(line) for line in out.read_bytes().splitlines()]
    assert records == list(emulator.iter_session_records())
