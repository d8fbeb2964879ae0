"""``failopen rai sync --format parquet|jsonl.gz`` against the emulator (issue 32 item 5): three
runs with data arriving between them read back by pyarrow.dataset (Hive partitions) and DuckDB,
every cohort and session once, with the shipped schema's types; a field the vendor adds is kept
and named once per run; without pyarrow the run refuses at start-up naming the extra."""

from __future__ import annotations

import gzip
import json
import logging
import sys
from datetime import timezone
from pathlib import Path
from typing import Any

import pytest
from _sync_helpers import Runner, manifests, outputs, sync_args, temporaries

from failopen.rai import arrow_schema
from failopen.rai._arguments import parse_rfc3339
from failopen.testing.rai_emulator import RaiEmulator

SINCE = "2024-05-01T00:00:00Z"
UNTIL = ["2024-05-08T00:00:00Z", "2024-05-15T00:00:00Z", "2024-06-01T00:00:00Z"]


def _three_runs(
    sync: Runner, emulator: RaiEmulator, tmp_path: Path, fmt: str,
    caplog: pytest.LogCaptureFixture,
) -> tuple[Path, list[dict[str, Any]]]:  # fmt: skip
    """Three runs, cohorts added between them; the last meets a field the schema lacks."""
    out, state = tmp_path / "out", tmp_path / "state.json"
    out.mkdir()
    summaries = []
    for number, until in enumerate(UNTIL):
        if number == 1:
            emulator.add_cohorts(2)
        if number == 2:
            emulator.add_cohorts(1)
            emulator.unknown_fields = True  # the vendor adds a field, to cohorts served too
            caplog.clear()
        run = sync(*sync_args(state, out, "--format", fmt, "--json",
                              since=SINCE if number == 0 else None, until=until))  # fmt: skip
        assert run.code == 0, run.err
        summaries.append(run.summary())
    assert not temporaries(out)
    return out, summaries


def test_parquet_three_runs_read_back_once_with_the_schemas_types(
    sync: Runner, emulator: RaiEmulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ds = pytest.importorskip("pyarrow.dataset", reason='pip install -e ".[parquet]"')
    caplog.set_level(logging.WARNING, logger="failopen.rai")
    out, summaries = _three_runs(sync, emulator, tmp_path, "parquet", caplog)
    sessions = {s["session_id"]: s for s in emulator.iter_session_records()}
    cohorts = {c: emulator.cohort_record(c) for c in emulator.cohort_ids()}
    assert sum(s["sessions"] for s in summaries) == len(sessions)
    assert all(len(outputs(out, kind, "parquet")) > 1 for kind in ("cohorts", "sessions"))

    # A field the schema does not know: named in the run that met it, once per kind, kept.
    assert [s["unknown_fields"] for s in summaries] == [
        {}, {}, {"cohorts": ["future_field"], "sessions": ["future_field"]}
    ]  # fmt: skip
    warned = [r.getMessage() for r in caplog.records if "future_field" in r.getMessage()]
    assert len(warned) == 2 and all("the schema (version 1)" in m for m in warned)
    (last,) = [m for m in manifests(out) if m["run_id"] == summaries[-1]["run_id"]]
    assert last["unknown_fields"] == summaries[-1]["unknown_fields"]

    for kind, expected, key in (("sessions", sessions, "session_id"),
                                ("cohorts", cohorts, "cohort_id")):  # fmt: skip
        table = ds.dataset(out / f"kind={kind}", format="parquet", partitioning="hive").to_table()
        schema = arrow_schema(kind)
        assert table.schema.names == [*schema.names, "dt"]
        for field in schema:
            assert table.schema.field(field.name).type == field.type, field.name
        rows = table.to_pylist()
        assert sorted(r[key] for r in rows) == sorted(expected)  # every record once
        with_field = 0
        for row in rows:
            record = expected[row[key]]
            stamp = "session_created" if kind == "sessions" else "cohort_window_start"
            assert row[stamp] == parse_rfc3339(record[stamp])
            assert str(row["dt"]) == row[stamp].astimezone(timezone.utc).strftime("%Y-%m-%d")
            extra = json.loads(row["extra_fields"]) if row["extra_fields"] else {}
            # Served with the field from the third run on (the emulator now adds it to all).
            assert extra in ({}, {k: v for k, v in record.items() if k not in schema.names})
            with_field += bool(extra)
            plain = {k: v for k, v in record.items() if k in schema.names and k != stamp
                     and not k.startswith("cohort_window") and k != "created_at"}  # fmt: skip
            assert {k: row[k] for k in plain} == plain
        assert with_field == summaries[-1][kind]  # what the third run delivered

    duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed (pip install duckdb)")
    found = duckdb.sql(
        f"select count(*), count(distinct session_id), typeof(any_value(session_created)), "
        f"typeof(any_value(verify)) from read_parquet('{out}/kind=sessions/*/*.parquet', "
        f"hive_partitioning = true)"
    ).fetchall()[0]
    verify = "STRUCT(security_level VARCHAR, solved BOOLEAN, verified BOOLEAN)"
    assert found == (len(sessions), len(sessions), "TIMESTAMP WITH TIME ZONE", verify)


def test_jsonl_gz_three_runs_every_session_once(
    sync: Runner, emulator: RaiEmulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out, summaries = _three_runs(sync, emulator, tmp_path, "jsonl.gz", caplog)
    files = outputs(out, "sessions", "jsonl.gz")
    got = [json.loads(line) for f in files for line in gzip.decompress(f.read_bytes()).split(b"\n")
           if line]  # fmt: skip
    served = {s["session_id"]: s for s in emulator.iter_session_records()}
    assert sorted(s["session_id"] for s in got) == sorted(served)  # every session once
    for session in got:  # as served (the field is there from the third run on)
        assert session in (served[session["session_id"]], {
            k: v for k, v in served[session["session_id"]].items() if k != "future_field"})
    assert summaries[-1]["unknown_fields"] == {"cohorts": ["future_field"],
                                               "sessions": ["future_field"]}  # fmt: skip
    duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed (pip install duckdb)")
    (count,) = duckdb.sql(
        f"select count(distinct session_id) from read_json_auto("
        f"'{out}/kind=sessions/*/*.jsonl.gz', hive_partitioning = true)"
    ).fetchall()[0]
    assert count == len(got)


def test_parquet_without_pyarrow_refuses_at_start_up_naming_the_extra(
    sync: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    out, state = tmp_path / "out", tmp_path / "state.json"
    out.mkdir()
    run = sync(*sync_args(state, out, "--format", "parquet", since=SINCE, until=UNTIL[0]))
    assert run.code == 2
    assert 'pip install "failopen[parquet]"' in run.err and "--format parquet" in run.err
    assert not state.exists() and not list(out.iterdir())


def test_stdout_takes_json_lines_only(sync: Runner, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    for fmt in ("parquet", "jsonl.gz"):
        run = sync(*sync_args(state, "-", "--format", fmt, since=SINCE, until=UNTIL[0]))
        assert run.code == 2 and f"drop --format {fmt}" in run.err


def test_the_summary_says_which_schema_the_files_follow(sync: Runner, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    run = sync(*sync_args(tmp_path / "s.json", out, "--json", since=SINCE, until=UNTIL[0]))
    assert run.code == 0
    assert run.summary()["record_schema_version"] == 1 and run.summary()["unknown_fields"] == {}
    assert run.summary()["unknown_fields_truncated"] == []
