"""docs/rai.md, "A day of hourly runs, into DuckDB": the commands and queries of the docs, as
written, against the emulator on the wall clock; DuckDB reads every session once."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rai.md"
FAILOPEN = Path(sys.executable).with_name("failopen")
duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed: pip install duckdb")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not FAILOPEN.exists(), reason="the failopen entry point is not installed"),
]


def _section() -> tuple[list[list[str]], list[str]]:
    """The section's shell commands (split, comments and continuations removed) and SQL."""
    text = DOCS.read_text()
    section = text.split("### A day of hourly runs, into DuckDB", 1)[1].split("\n### ", 1)[0]
    shell = re.search(r"```sh\n(.*?)```", section, re.S)
    sql = re.search(r"```sql\n(.*?)```", section, re.S)
    assert shell and sql, "the section lost its sh or sql block"
    joined = shell[1].replace("\\\n", " ")
    commands = [shlex.split(line, comments=True) for line in joined.splitlines()]
    statements = [s.strip() for s in sql[1].split(";") if s.strip()]
    return [c for c in commands if c], statements


def test_three_hourly_runs_load_into_duckdb_with_every_session_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands, statements = _section()
    served = subprocess.Popen(
        [str(FAILOPEN), "emulate", "rai", "--live", "--start", "now-2d", "--span-days", "3",
         "--cohorts", "72", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert served.stdout is not None
        banner = [served.stdout.readline() for _ in range(9)]
        url = banner[1].strip().split("=", 1)[1]
        printed = banner[7].split()
        since = printed[printed.index("--since") + 1]
        env = {**os.environ, "FAILOPEN_RAI_BASE_URL": url, "FAILOPEN_RAI_CLIENT_ID": "test-client",
               "FAILOPEN_RAI_CLIENT_SECRET": "test-secret"}  # fmt: skip
        (tmp_path / "rai-out").mkdir()
        summaries = []
        before: dict[str, bytes] = {}
        for argv in commands:
            assert argv[0] == "failopen", argv
            argv = [str(FAILOPEN), *(since if a == "SINCE" else a for a in argv[1:])]
            if argv[1] == "emulate":
                argv += ["--url", url]
            done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=120)  # fmt: skip
            assert done.returncode == 0, (argv, done.stderr)
            if argv[1:3] == ["rai", "sync"]:
                summaries.append(json.loads(done.stdout.strip().splitlines()[-1]))
                if len(summaries) == 1:
                    before = _visible(tmp_path / "rai-out")
        assert len(summaries) == 3
        # The docs' words: the second run delivers 2 cohorts (65 sessions), the third 1 (30).
        assert [(s["cohorts"], s["sessions"]) for s in summaries[1:]] == [(2, 65), (1, 30)]
        after = _visible(tmp_path / "rai-out")
        assert {name: after[name] for name in before} == before  # the first run's files, as left
        monkeypatch.chdir(tmp_path)  # the docs' paths are relative
        con = duckdb.connect()
        results = [con.execute(statement).fetchall() for statement in statements]
        [(total, distinct)] = results[2]
        assert total == distinct == sum(s["sessions"] for s in summaries)
        per_day = results[3]
        assert sum(n for _, n in per_day) == total and all(day is not None for day, _ in per_day)
        per_cohort = results[4]
        assert len(per_cohort) == sum(s["cohorts"] for s in summaries)
        assert sum(n for _, n in per_cohort) == total
    finally:
        served.send_signal(signal.SIGINT)
        served.communicate(timeout=30)


def _visible(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and not p.name.startswith(".")}  # fmt: skip
