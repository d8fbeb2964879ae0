"""Shared by the sync tests: running ``failopen rai sync`` in-process and reading what it wrote."""

from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from failopen.rai import Client
from failopen.rai import cli as rai_cli
from failopen.rai.cli import register_rai
from failopen.testing.rai_emulator import RaiEmulator

KEY = "pk_live_test"
SECRET = "s3cret-never-printed"


class Run:
    """One in-process invocation."""

    def __init__(self, code: int, out: bytes, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def summary(self) -> dict[str, Any]:
        line = self.out.decode().strip().splitlines()[-1]
        return json.loads(line)  # type: ignore[no-any-return]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="failopen")
    register_rai(parser.add_subparsers())
    return parser


def sync_args(state: Path, out: Path | str, *extra: str, since: str | None = None,
              until: str | None = None) -> list[str]:  # fmt: skip
    argv = ["rai", "sync", "--public-key", KEY, "--state", str(state), "--out-dir", str(out)]
    if since is not None:
        argv += ["--since", since]
    if until is not None:
        argv += ["--until", until]
    return [*argv, *extra]


def lines(folder: Path, kind: str) -> list[dict[str, Any]]:
    """Every record in the day files of ``kind``, in file-name order."""
    records = []
    for path in sorted(folder.glob(f"{kind}-*.jsonl")):
        data = path.read_bytes()
        assert data == b"" or data.endswith(b"\n"), f"half line at the end of {path.name}"
        records += [json.loads(line) for line in data.decode().splitlines()]
    return records


def csv_rows(folder: Path, kind: str) -> list[list[str]]:
    rows: list[list[str]] = []
    for path in sorted(folder.glob(f"{kind}-*.csv")):
        rows += list(csv.reader(io.StringIO(path.read_text(), newline="")))
    return rows


def ids(records: list[dict[str, Any]], field: str) -> Counter[str]:
    return Counter(record[field] for record in records)


def expected(emulator: RaiEmulator) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    cohorts = [emulator.cohort_record(c) for c in emulator.cohort_ids()]
    return cohorts, list(emulator.iter_session_records())


def assert_exactly_once(folder: Path, emulator: RaiEmulator) -> None:
    """The day files hold every record of the emulator exactly once, as served."""
    cohorts, sessions = expected(emulator)
    got_cohorts, got_sessions = lines(folder, "cohorts"), lines(folder, "sessions")
    assert sorted(got_cohorts, key=_cid) == sorted(cohorts, key=_cid)
    assert len(got_sessions) == len(sessions)
    assert sorted(got_sessions, key=_sid) == sorted(sessions, key=_sid)


def _cid(record: dict[str, Any]) -> str:
    return str(record["cohort_id"])


def _sid(record: dict[str, Any]) -> str:
    return str(record["session_id"])


Runner = Callable[..., Run]


def cli_runner(monkeypatch: Any, url: str, capsysbinary: Any) -> Runner:
    """``failopen rai ...`` in this process against the service at ``url``, with retries that
    do not sleep: a function of the arguments that returns the :class:`Run`."""
    monkeypatch.setenv("FAILOPEN_RAI_BASE_URL", url)
    monkeypatch.setenv("FAILOPEN_RAI_CLIENT_ID", "test-client")
    monkeypatch.setenv("FAILOPEN_RAI_CLIENT_SECRET", SECRET)
    monkeypatch.setattr(rai_cli, "Client", functools.partial(Client, sleep=lambda _: None))
    cli = parser()

    def run(*argv: str) -> Run:
        args = cli.parse_args(list(argv))
        code = args.func(args)
        captured = capsysbinary.readouterr()
        return Run(code, captured.out, captured.err.decode())

    return run


def files(folder: Path) -> dict[str, bytes]:
    """Every file of an output folder, by name: two runs' outputs compare byte for byte."""
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def output_size(folder: Path) -> int:
    """Bytes of the day files a running sync has written so far (its hidden spools left out)."""
    total = 0
    for entry in os.scandir(folder):
        if not entry.name.startswith("."):
            try:
                total += entry.stat().st_size
            except FileNotFoundError:  # the run removed it meanwhile
                continue
    return total

