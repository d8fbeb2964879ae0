"""The dlt source (failopen.rai.dlt) into DuckDB, against the emulator on loopback playing time:
three runs with cohorts appearing between them (one late, inside a window days old) load every
session exactly once, and no cohort's sessions are fetched by two runs."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from failopen.rai._client import Client
from failopen.rai.dlt import rai_source
from failopen.testing.clock import FakeClock
from failopen.testing.rai_emulator import RaiEmulator


def test_importing_the_module_does_not_import_dlt() -> None:
    """dlt is imported by rai_source only: the package (and its docs build) work without it."""
    code = "import sys, failopen.rai.dlt; assert 'dlt' not in sys.modules, 'dlt imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


try:
    import dlt
    import duckdb
except ImportError:  # the [dlt] extra (and dlt[duckdb]) not installed
    dlt = duckdb = None

needs_dlt = pytest.mark.skipif(
    dlt is None or duckdb is None,
    reason='dlt and duckdb are not installed: pip install -e ".[dlt]" "dlt[duckdb]"',
)


HOUR = 3600.0


def run(pipeline: Any, client: Client, clock: FakeClock) -> dict[str, int]:
    """One run; the rows it extracted per table (what a reloaded cohort would add to)."""
    source = rai_source(
        client,
        ["pk_live_test"],
        page_size=17,
        now=lambda: datetime.fromtimestamp(clock.time(), timezone.utc),
    )
    pipeline.run(source)
    counts = pipeline.last_trace.last_normalize_info.row_counts
    return {t: counts.get(t, 0) for t in ("cohorts", "sessions")}


@contextmanager
def loading(emulator: RaiEmulator, tmp_path: Path, name: str) -> Iterator[tuple[Any, Client]]:
    """``emulator`` served, a dlt pipeline ``name`` into ``tmp_path/lake.duckdb``, and a client
    of the emulator; the client closed and the emulator stopped after."""
    emulator.serve()
    pipeline = dlt.pipeline(
        pipeline_name=name,
        pipelines_dir=str(tmp_path / "dlt"),
        destination=dlt.destinations.duckdb(str(tmp_path / "lake.duckdb")),
        dataset_name="rai",
    )
    client = Client(emulator.url, "test-client", "test-secret", sleep=lambda _: None)
    try:
        yield pipeline, client
    finally:
        client.close()
        emulator.server.stop()


@needs_dlt
def test_three_runs_load_every_session_once(tmp_path: Path) -> None:
    clock = FakeClock()
    emulator = RaiEmulator(
        live=True, clock=clock, cohorts=6, span_days=10, sessions_per_cohort=(20, 40)
    )
    with loading(emulator, tmp_path, "rai_test") as (pipeline, client):
        loaded = [run(pipeline, client, clock)]
        assert loaded[0]["cohorts"] > 0
        # New attacks found, and one cohort created now inside a window three days old.
        clock.advance(HOUR)
        emulator.add_cohort("now-3d", sessions=30)
        emulator.add_cohort("now-2h", sessions=25)
        loaded.append(run(pipeline, client, clock))
        assert loaded[1] == {"cohorts": 2, "sessions": 55}
        clock.advance(HOUR)
        emulator.add_cohort("now-26h", sessions=11)
        loaded.append(run(pipeline, client, clock))
        assert loaded[2] == {"cohorts": 1, "sessions": 11}
        clock.advance(HOUR)
        assert run(pipeline, client, clock) == {"cohorts": 0, "sessions": 0}  # idle run
        # What the API holds now, listed and fetched afresh.
        end = datetime.fromtimestamp(clock.time(), timezone.utc)
        cohorts = list(client.iter_cohorts(end.replace(year=end.year - 1), end, ["pk_live_test"]))
        expected = {s.session_id for c in cohorts for s in client.iter_cohort_sessions(c.cohort_id)}
    with duckdb.connect(str(tmp_path / "lake.duckdb"), read_only=True) as db:
        rows = db.execute("select session_id, cohort_id from rai.sessions").fetchall()
        cohort_rows = db.execute("select cohort_id from rai.cohorts").fetchall()
    assert Counter(Counter(s for s, _ in rows).values()) == {1: len(expected)}
    assert {s for s, _ in rows} == expected
    assert sorted(c for (c,) in cohort_rows) == sorted(c.cohort_id for c in cohorts)
    # Extracted once: the runs together extracted exactly the rows the tables hold.
    assert sum(r["sessions"] for r in loaded) == len(expected)
    assert sum(r["cohorts"] for r in loaded) == len(cohorts)


@needs_dlt
def test_a_run_that_fails_mid_extract_is_fetched_again_once(tmp_path: Path) -> None:
    """The source marks a cohort delivered before its sessions are fetched: a run whose
    sessions request fails (500 past the client's retries) must not keep that mark, so the
    next run loads the cohort, once."""
    clock = FakeClock()
    emulator = RaiEmulator(live=True, clock=clock, cohorts=3, span_days=10)
    with loading(emulator, tmp_path, "rai_fail") as (pipeline, client):
        run(pipeline, client, clock)
        clock.advance(HOUR)
        emulator.add_cohort("now-3d", sessions=30)
        emulator.inject_error("internal", times=4, endpoint="list_cohort_sessions")
        with pytest.raises(Exception, match="internal"):
            run(pipeline, client, clock)
        assert run(pipeline, client, clock) == {"cohorts": 1, "sessions": 30}
        assert run(pipeline, client, clock) == {"cohorts": 0, "sessions": 0}


@needs_dlt
def test_a_run_after_more_than_30_days_says_what_may_be_missing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    emulator = RaiEmulator(live=True, clock=clock, cohorts=2, span_days=5)
    with loading(emulator, tmp_path, "rai_gap") as (pipeline, client):
        run(pipeline, client, clock)
        clock.advance(30 * 24 * HOUR)
        with caplog.at_level("WARNING", logger="failopen.rai"):
            run(pipeline, client, clock)
        assert not [r for r in caplog.records if "more than 30 days" in r.getMessage()]
        clock.advance(30 * 24 * HOUR + 1)
        with caplog.at_level("WARNING", logger="failopen.rai"):
            run(pipeline, client, clock)
        assert [r for r in caplog.records if "more than 30 days" in r.getMessage()]
