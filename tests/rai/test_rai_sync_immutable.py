"""``failopen rai sync`` output for lakes and shippers (issue 32 item 4): each batch writes new
files in Hive partitions, never touching a file once visible, even across kill -9; a manifest
per run; nothing from a crashed batch is visible, and the next run delivers it once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _sync_helpers import (
    KEY,
    SECRET,
    Runner,
    assert_exactly_once,
    cli_runner,
    lines,
    manifests,
    outputs,
    snapshot,
    sync_args,
    temporaries,
)

from failopen.rai._sink import DirSink, owner_tag
from failopen.rai._state import SyncState
from failopen.testing._server import LoopbackServer
from failopen.testing.rai_emulator import RaiEmulator

SINCE = "2024-05-01T00:00:00Z"
MIDDLE = "2024-05-10T12:00:00Z"
END = "2024-05-21T00:00:00Z"


def _data_files(snap: dict[str, tuple[int, int, str]]) -> set[str]:
    return {path for path in snap if path.startswith("kind=")}


def test_a_second_run_never_changes_a_file_the_first_wrote(
    sync: Runner, emulator: RaiEmulator, tmp_path: Path, out: Path
) -> None:
    state = tmp_path / "state.json"
    # Cohort 4 appears late: its sessions share 2024-05-07 with cohort 3's, delivered first.
    emulator.hide_cohorts([4])
    assert sync(*sync_args(state, out, since=SINCE, until=END)).code == 0
    first = snapshot(out)
    time.sleep(0.01)  # a rewrite within the same clock tick would keep mtime_ns
    emulator.reveal_cohorts()
    emulator.add_cohorts(3)
    second = sync(*sync_args(state, out, "--json", until="2024-06-01T00:00:00Z"))
    assert second.code == 0
    after = snapshot(out)
    assert {path: after.get(path) for path in first} == first  # same size, mtime, sha256
    added = _data_files(after) - _data_files(first)
    assert added and added == set(second.summary()["files"])
    # Same partitions written again by the second run: new files beside the first run's.
    assert len(list(out.glob("kind=sessions/dt=2024-05-07/*.jsonl"))) == 2
    assert_exactly_once(out, emulator)


def test_the_manifest_lists_the_files_with_their_records_and_counts_per_key(
    sync: Runner, emulator: RaiEmulator, tmp_path: Path, out: Path
) -> None:
    result = sync(*sync_args(tmp_path / "s.json", out, "--json", "--batch-records", "500",
                             since=SINCE, until=END))  # fmt: skip
    assert result.code == 0
    summary = result.summary()
    (manifest,) = manifests(out)
    assert summary["manifest"] == str(out / "_manifests" / f"{summary['run_id']}.json")
    assert manifest["run_id"] == summary["run_id"] and manifest["exit_code"] == 0
    assert manifest["schema_version"] == 1 and manifest["until"] == END
    assert manifest["public_keys"] == [KEY]
    assert manifest["started_at"] <= manifest["finished_at"]
    assert manifest["newest_created_at"] == max(
        emulator.cohort_record(c)["created_at"] for c in emulator.cohort_ids()
    )
    assert [f["path"] for f in manifest["files"]] == summary["files"]
    for entry in manifest["files"]:
        path = out / entry["path"]
        data = path.read_bytes()
        assert entry["bytes"] == len(data) and entry["records"] == data.count(b"\n")
        assert entry["path"] == f"kind={entry['kind']}/dt={entry['dt']}/{path.name}"
        assert all(json.loads(line)[_day(entry["kind"])][:10] == entry["dt"]
                   for line in data.splitlines())  # fmt: skip
    for kind in ("cohorts", "sessions"):
        total = sum(f["records"] for f in manifest["files"] if f["kind"] == kind)
        assert total == manifest["counts"][kind] == summary[kind] == len(lines(out, kind))
    assert manifest["counts_by_key"] == {KEY: {"cohorts": 12, "sessions": emulator.total_sessions}}
    for field in ("late_cohorts", "gaps", "refused_keys", "undated"):
        assert manifest[field] == summary[field]


def _day(kind: str) -> str:
    return "session_created" if kind == "sessions" else "cohort_window_start"


def test_the_manifest_of_a_run_with_a_refused_key_counts_the_others(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path,
    out: Path,
) -> None:  # fmt: skip
    emulator = RaiEmulator(client_secret=SECRET, public_keys=("pk_live_a", "pk_live_c"))
    with emulator.serve() as server:
        sync = cli_runner(monkeypatch, server.url, capsysbinary)
        argv = ["rai", "sync", "--state", str(tmp_path / "s.json"), "--out-dir", str(out),
                "--since", SINCE, "--until", END, "--json"]  # fmt: skip
        for key in ("pk_live_a", "pk_live_b", "pk_live_c"):
            argv += ["--public-key", key]
        result = sync(*argv)
    assert result.code == 3
    (manifest,) = manifests(out)
    assert manifest["exit_code"] == 3 and manifest["refused_keys"] == ["pk_live_b"]
    cohorts = [emulator.cohort_record(c) for c in emulator.cohort_ids()]
    for key in ("pk_live_a", "pk_live_c"):
        mine = [c for c in cohorts if c["public_key"] == key]
        assert manifest["counts_by_key"][key] == {
            "cohorts": len(mine), "sessions": sum(c["session_count"] for c in mine)
        }  # fmt: skip
    assert "pk_live_b" not in manifest["counts_by_key"]
    assert sorted(f["path"] for f in manifest["files"]) == sorted(
        p.relative_to(out).as_posix() for p in out.glob("kind=*/dt=*/*")
    )


def test_a_stale_temporary_of_another_state_is_left_alone(
    sync: Runner, emulator: RaiEmulator, tmp_path: Path, out: Path
) -> None:
    state = tmp_path / "state.json"
    day = out / "kind=sessions" / "dt=2024-05-02"
    day.mkdir(parents=True)
    theirs = [
        out / f".failopen-sync-{owner_tag('/elsewhere/other.json')}-abcd1234.part",
        day / f".failopen-sync-{owner_tag('/elsewhere/other.json')}-efgh5678.part",
    ]
    mine = [out / f".failopen-sync-{owner_tag(str(state))}-abcd1234.part",
            day / f".failopen-sync-{owner_tag(str(state))}-efgh5678.part"]  # fmt: skip
    for path in [*theirs, *mine]:
        path.write_bytes(b"another sync's batch, being written")
    assert sync(*sync_args(state, out, since=SINCE, until=END)).code == 0
    assert all(p.exists() for p in theirs) and not any(p.exists() for p in mine)
    assert_exactly_once(out, emulator)


def test_a_partition_that_is_a_file_fails_the_batch_and_the_next_run_delivers_it_once(
    sync: Runner, emulator: RaiEmulator, tmp_path: Path, out: Path
) -> None:
    state = tmp_path / "state.json"
    (out / "kind=sessions").write_bytes(b"not a directory")
    failed = sync(*sync_args(state, out, "--json", since=SINCE, until=END))
    assert failed.code == 1 and "kind=sessions" in failed.err
    assert not temporaries(out) and failed.summary()["cohorts"] == 0
    assert json.loads(state.read_text())["keys"][KEY]["delivered"] == {}
    (out / "kind=sessions").unlink()
    assert sync(*sync_args(state, out, until=END)).code == 0
    assert_exactly_once(out, emulator)


def test_a_state_cannot_ask_to_rename_anything_but_a_sync_temporary_in_a_partition(
    tmp_path: Path,
) -> None:
    part = "/data/kind=sessions/dt=2024-05-01"
    good = [f"{part}/.failopen-sync-{'a' * 16}-x1y2z3w4.part",
            f"{part}/20240501T000000Z-0123abcd-0001.jsonl"]  # fmt: skip
    bad = [
        [good[0], "/data/kind=sessions/dt=2024-05-02/20240501T000000Z-0123abcd-0001.jsonl"],
        [good[0], f"{part}/../../etc/20240501T000000Z-0123abcd-0001.jsonl"],
        ["/etc/passwd", good[1]],
        [good[0], f"{part}/state.json"],
        [f"/d/../kind=sessions/dt=2024-05-01/{good[0].rsplit('/', 1)[1]}",
         f"/d/../kind=sessions/dt=2024-05-01/{good[1].rsplit('/', 1)[1]}"],
    ]  # fmt: skip
    state = tmp_path / "state.json"
    for renames in [[good], *([pair] for pair in bad)]:
        state.write_text(json.dumps({"version": 3, "running": True, "keys": {},
                                     "renames": renames}))  # fmt: skip
        if renames == [good]:
            assert SyncState.load(str(state)).renames == [tuple(good)]
        else:
            with pytest.raises(Exception, match="renames is not a list"):
                SyncState.load(str(state))


# --- kill -9 in a real process --------------------------------------------------------------

# Runs the real CLI with one step made to stop (and wait to be killed) at a chosen point.
DRIVER = textwrap.dedent("""
    import os, sys, threading, time
    from failopen.rai import _sink, _sync_cli
    from failopen.cli import main

    STAGE, FLAG, AT = os.environ["STAGE"], os.environ["FLAG"], int(os.environ["AT"])

    def stop():
        open(FLAG, "w").close()
        time.sleep(3600)

    class Stopping(_sink.DirSink):
        calls = {"prepare": 0, "publish": 0}

        def prepare(self, spools, run_id, seq):
            self.calls["prepare"] += 1
            if STAGE == "mid-batch" and self.calls["prepare"] == AT:
                real = self.write
                def write(f, data):  # half a file written, then the process hangs
                    if threading.current_thread() is threading.main_thread():  # not a spool
                        real(f, data[: len(data) // 2])
                        f.flush()
                        stop()
                    return real(f, data)
                self.write = write
            return super().prepare(spools, run_id, seq)

        def publish(self, moves):
            self.calls["publish"] += 1
            if STAGE.startswith("renames") and self.calls["publish"] == AT:
                real, done = os.rename, []
                before = int(STAGE.split(":")[1])  # renames done before the process hangs
                def rename(a, b):
                    if len(done) == before:
                        stop()
                    done.append(b)
                    return real(a, b)
                _sink.os.rename = rename
            return super().publish(moves)

    _sync_cli.DirSink = Stopping
    sys.exit(main(sys.argv[1:]))
""")


def _start(server: LoopbackServer, tmp_path: Path, state: Path, out: Path, stage: str,
           at: int = 2) -> tuple[subprocess.Popen[bytes], Path]:  # fmt: skip
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    flag = tmp_path / f"stopped-{time.monotonic_ns()}"
    env = {**os.environ, "FAILOPEN_RAI_BASE_URL": server.url,
           "FAILOPEN_RAI_CLIENT_ID": "test-client", "FAILOPEN_RAI_CLIENT_SECRET": SECRET,
           "STAGE": stage, "FLAG": str(flag), "AT": str(at)}  # fmt: skip
    argv = [sys.executable, str(driver), "rai", "sync", "--public-key", KEY, "--state",
            str(state), "--out-dir", str(out), "--since", SINCE, "--until", END,
            "--batch-records", "400", "--parallel", "2", "--json"]  # fmt: skip
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE), flag


def _kill_when_stopped(run: subprocess.Popen[bytes], flag: Path) -> None:
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, "the run never reached the point to kill it at"
        time.sleep(0.005)
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=10)


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["mid-batch", "renames:0", "renames:1"])
def test_kill_9_mid_batch_or_mid_renames_then_the_next_run_delivers_each_record_once(
    server: LoopbackServer, emulator: RaiEmulator, tmp_path: Path, out: Path, stage: str
) -> None:
    state = tmp_path / "state.json"
    run, flag = _start(server, tmp_path, state, out, stage)
    _kill_when_stopped(run, flag)
    finished = snapshot(out)  # the first batch's files: visible before the kill
    assert _data_files(finished)
    body = json.loads(state.read_text())
    if stage.startswith("renames"):
        # Killed after the write-ahead save: the batch is delivered, its renames pending.
        assert body["version"] == 3 and body["renames"]
        hidden = [Path(temp) for temp, _ in body["renames"]]
        assert sum(p.exists() for p in hidden) == len(hidden) - int(stage[-1])
    else:
        # Killed while writing the batch: only hidden files, nothing a reader sees of it.
        assert "renames" not in body and temporaries(out)
    assert all(p.name.startswith(".") for p in out.rglob("*.part"))
    assert not list(out.glob("kind=*/dt=*/*.jsonl.part"))
    resumed = subprocess.run(
        [str(Path(sys.executable).with_name("failopen")), *sync_args(state, out, "--json",
                                                                       until=END)],
        env={**os.environ, "FAILOPEN_RAI_BASE_URL": server.url,
             "FAILOPEN_RAI_CLIENT_ID": "test-client", "FAILOPEN_RAI_CLIENT_SECRET": SECRET},
        capture_output=True, timeout=60,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr.decode()
    summary = json.loads(resumed.stdout.decode().splitlines()[-1])
    assert summary["resumed"] is True
    after = snapshot(out)
    assert {path: after.get(path) for path in finished} == finished  # finished files untouched
    assert not temporaries(out) and "renames" not in json.loads(state.read_text())
    assert_exactly_once(out, emulator)
    (manifest,) = manifests(out)  # the killed run wrote none; the resumed run names what
    if stage.startswith("renames"):  # it made visible for the killed one
        assert manifest["recovered_files"] and all(
            (out / path).exists() and path not in finished for path in manifest["recovered_files"]
        )
    else:
        assert manifest["recovered_files"] == []


# --- readers --------------------------------------------------------------------------------


def test_duckdb_reads_every_session_once_from_the_partitions(
    sync: Runner, emulator: RaiEmulator, tmp_path: Path, out: Path
) -> None:
    duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed (pip install duckdb)")
    state = tmp_path / "state.json"
    assert sync(*sync_args(state, out, since=SINCE, until=MIDDLE)).code == 0
    emulator.add_cohorts(2)
    assert sync(*sync_args(state, out, until="2024-06-01T00:00:00Z")).code == 0
    (out / ".failopen-sync-0123456789abcdef-x.part").write_bytes(b"{not json")
    rows = duckdb.sql(
        f"select session_id, session_created, dt from read_json_auto("
        f"'{out}/kind=sessions/*/*.jsonl', hive_partitioning=true)"
    ).fetchall()
    assert sorted(r[0] for r in rows) == sorted(s["session_id"] for s in
                                                emulator.iter_session_records())  # fmt: skip
    assert all(str(dt) == _utc_day(created) for _, created, dt in rows)
    assert len(outputs(out, "sessions")) > 1


def _utc_day(created: object) -> str:
    from datetime import datetime, timezone

    if isinstance(created, datetime):
        return created.astimezone(timezone.utc).strftime("%Y-%m-%d")
    return str(created)[:10]


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files in /proc")
def test_a_cohort_spanning_hundreds_of_days_holds_few_files_open(tmp_path: Path) -> None:
    sink = DirSink(str(tmp_path), "jsonl", owner=str(tmp_path / "state.json"))
    spool = sink.spool()
    before = _open_files()
    days = [f"2024-{m:02d}-{d:02d}T10:00:00Z" for m in range(1, 13) for d in range(1, 29)]
    peak = 0
    for page in range(3):  # each page touches every day again: files are reopened, not kept
        spool.add("sessions", [{"session_id": f"s{page}-{i}", "session_created": day}
                               for i, day in enumerate(days)])  # fmt: skip
        peak = max(peak, _open_files() - before)
    spool.close()
    assert peak <= 8 and _open_files() == before
    moves = sink.prepare([spool], "20240101T000000Z-00000000", 1)
    assert _open_files() == before and len(moves) == len(days)
    sink.publish(moves)
    spool.discard()
    assert sorted(p.read_bytes().count(b"\n") for p in tmp_path.glob("kind=sessions/*/*")) == [
        3
    ] * len(days)
    assert not temporaries(tmp_path)


def test_a_manifest_that_cannot_be_written_fails_the_run_after_delivering(
    sync: Runner, emulator: RaiEmulator, tmp_path: Path, out: Path
) -> None:
    (out / "_manifests").write_bytes(b"not a directory")
    result = sync(*sync_args(tmp_path / "s.json", out, "--json", since=SINCE, until=END))
    assert result.code == 1 and "manifest could not be written" in result.err
    assert result.summary()["manifest"] is None and result.summary()["exit_code"] == 1
    assert_exactly_once(out, emulator)  # the data is delivered and recorded; only the manifest
    assert not temporaries(out)
