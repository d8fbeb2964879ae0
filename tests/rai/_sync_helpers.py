"""Shared by the sync tests: running ``failopen rai sync`` in-process and reading what it wrote."""

from __future__ import annotations

import argparse
import csv
import functools
import hashlib
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

    def jsonl(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.decode().splitlines()]


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


def window(emulator: RaiEmulator, *extra: str) -> list[str]:
    """The export flags for every record ``emulator`` holds, under :data:`KEY`."""
    start, end = emulator.data_window
    return ["--from", start, "--to", end, "--public-key", KEY, *extra]


def process_env(url: str) -> dict[str, str]:
    """The environment of a ``failopen rai`` child process against the service at ``url``."""
    return {**os.environ, "FAILOPEN_RAI_BASE_URL": url, "FAILOPEN_RAI_CLIENT_ID": "test-client",
            "FAILOPEN_RAI_CLIENT_SECRET": SECRET}  # fmt: skip


def outputs(folder: Path, kind: str, suffix: str = "jsonl") -> list[Path]:
    """The visible files of ``kind`` under ``folder/kind=<kind>/dt=*/``, in path order."""
    return sorted(folder.glob(f"kind={kind}/dt=*/*.{suffix}"))


def lines(folder: Path, kind: str) -> list[dict[str, Any]]:
    """Every record of ``kind`` in the partitions, in path order."""
    records = []
    for path in outputs(folder, kind):
        data = path.read_bytes()
        assert data.endswith(b"\n"), f"empty, or a half line at the end of {path}"
        records += [json.loads(line) for line in data.decode().splitlines()]
    return records


def csv_rows(folder: Path, kind: str) -> list[list[str]]:
    rows: list[list[str]] = []
    for path in outputs(folder, kind, "csv"):
        rows += list(csv.reader(io.StringIO(path.read_text(), newline="")))
    return rows


def snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    """(size, mtime_ns, sha256) of every visible file under ``folder``, by relative path."""
    found = {}
    for path in folder.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            info = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[path.relative_to(folder).as_posix()] = (info.st_size, info.st_mtime_ns, digest)
    return found


def partitions(folder: Path) -> dict[str, list[bytes]]:
    """The lines of each visible partition (``kind=.../dt=...``), sorted: two outputs written
    by different runs (other file names) compare as data."""
    found: dict[str, list[bytes]] = {}
    for path in folder.glob("kind=*/dt=*/*"):
        if not path.name.startswith("."):
            key = path.parent.relative_to(folder).as_posix()
            found.setdefault(key, []).extend(path.read_bytes().splitlines())
    return {key: sorted(rows) for key, rows in found.items()}


def temporaries(folder: Path) -> list[Path]:
    """Hidden sync temporaries anywhere under ``folder``."""
    return sorted(folder.rglob(".failopen-sync-*"))


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


def output_size(folder: Path) -> int:
    """Bytes of the visible files a running sync has written so far (hidden temporaries and
    manifests left out)."""
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            if not name.startswith(".") and "_manifests" not in root:
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except FileNotFoundError:  # the run removed it meanwhile
                    continue
    return total


def manifests(folder: Path) -> list[dict[str, Any]]:
    """The run manifests in ``folder``, oldest run first."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("_manifests/*.json"))]
