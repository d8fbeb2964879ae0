"""``failopen rai`` in operation (issue 32, items 6 and 7): every key every time, cut-off answers
retried, SIGTERM ends a sync cleanly, a dead host is one line, a summary for the exports, CSV ids.
"""

from __future__ import annotations

import csv
import io
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _sync_helpers import (
    SECRET,
    Runner,
    assert_exactly_once,
    manifests,
    output_size,
    process_env,
)

from failopen.testing.rai_emulator import RaiEmulator

SINCE = "2024-05-01T00:00:00Z"
UNTIL = "2024-06-01T00:00:00Z"
FAILOPEN = Path(sys.executable).with_name("failopen")
OWNED = ("pk_live_a", "pk_live_c")


@pytest.fixture
def emulator() -> RaiEmulator:
    return RaiEmulator(client_secret=SECRET, public_keys=OWNED)


def _keys(keys: tuple[str, ...]) -> list[str]:
    return [flag for key in keys for flag in ("--public-key", key)]


def _sync_argv(state: Path, out: Path, *keys: str) -> list[str]:
    """``failopen rai ...`` arguments: a sync of ``keys`` from SINCE to UNTIL, with --json."""
    return ["sync", "--state", str(state), "--out-dir", str(out), "--since", SINCE,
            "--until", UNTIL, "--json", *_keys(keys)]  # fmt: skip


def _export_argv(verb: str, *keys: str) -> list[str]:
    """``failopen rai ...`` arguments: an export of ``keys`` from SINCE to UNTIL."""
    return [verb, "--from", SINCE, "--to", UNTIL, *_keys(keys)]


# --- item 6: every key, every time ----------------------------------------------------------


def test_an_unowned_key_between_two_is_named_and_the_others_are_delivered(
    rai: Runner, emulator: RaiEmulator, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    state = tmp_path / "state.json"
    run = rai(*_sync_argv(state, out, "pk_live_a", "pk_live_b", "pk_live_c"))
    assert run.code == 3, run.err
    err = [line for line in run.err.splitlines() if line.strip()]
    named = [line for line in err if "pk_live_b" in line]
    assert len(named) == 1, run.err
    assert "forbidden_public_key" in named[0] and "HTTP 403" in named[0]
    assert not any("pk_live_a" in line or "pk_live_c" in line for line in err), run.err
    assert_exactly_once(out, emulator)  # both owned keys' cohorts and sessions, once
    summary = run.summary()
    assert summary["exit_code"] == 3 and summary["refused_keys"] == ["pk_live_b"]
    # The owned keys advanced: a second run delivers nothing again, and still names the key.
    again = rai(*_sync_argv(state, out, "pk_live_a", "pk_live_b", "pk_live_c"))
    assert again.code == 3 and again.summary()["cohorts"] == 0
    assert_exactly_once(out, emulator)


def test_a_sync_of_owned_keys_only_still_exits_0(
    rai: Runner, emulator: RaiEmulator, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    run = rai(*_sync_argv(tmp_path / "state.json", out, *OWNED))
    assert run.code == 0, run.err
    assert run.summary()["refused_keys"] == []


# --- item 7a: a cut-off or empty 200 is retried ---------------------------------------------


@pytest.mark.parametrize("cut", ["half", "empty", "after_brace"])
def test_a_cut_off_or_empty_200_is_retried_then_the_sync_succeeds(
    rai: Runner, emulator: RaiEmulator, tmp_path: Path, cut: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # after_brace: the body still ends with "}" (a record's), so only decoding it tells.
    out = tmp_path / "out"
    out.mkdir()
    how = {"empty": cut == "empty", "after_brace": cut == "after_brace"}
    emulator.cut_off_answers(times=1, endpoint="list_cohorts", **how)
    emulator.cut_off_answers(times=2, endpoint="list_cohort_sessions", **how)
    run = rai(*_sync_argv(tmp_path / "state.json", out, *OWNED))
    assert run.code == 0, run.err
    # Retried like a network error, and logged like one.
    assert sum("incomplete_answer" in r.getMessage() for r in caplog.records) == 3
    assert_exactly_once(out, emulator)


@pytest.mark.parametrize("after_brace", [False, True])
def test_a_cut_off_answer_every_time_fails_after_the_attempts(
    rai: Runner, emulator: RaiEmulator, tmp_path: Path, after_brace: bool
) -> None:
    emulator.cut_off_answers(times=100, endpoint="list_sessions", after_brace=after_brace)
    before = emulator.data_requests
    # One window (30 days): no request for a next window is guessed ahead of the cut answer.
    run = rai("sessions", "--from", SINCE, "--to", "2024-05-31T00:00:00Z",
              "--public-key", OWNED[0],
              "--parallel", "1", "--max-attempts", "3", "--out", str(tmp_path / "s.jsonl"))
    assert run.code == 5
    assert emulator.data_requests - before == 3
    assert "incomplete_answer" in run.err.splitlines()[-1]
    assert not (tmp_path / "s.jsonl").exists()


# --- item 7b: SIGTERM -----------------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_mid_sync_ends_cleanly_and_the_next_run_delivers_the_rest_once(
    tmp_path: Path,
) -> None:
    emulator = RaiEmulator(client_secret=SECRET, public_keys=OWNED, cohorts=30,
                           sessions_per_cohort=(30, 150), latency=0.004)  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    state = tmp_path / "state.json"
    argv = [str(FAILOPEN), "rai", *_sync_argv(state, out, *OWNED), "--page-size", "25",
            "--parallel", "3", "--batch-records", "120"]  # fmt: skip
    with emulator.serve() as server:
        run = subprocess.Popen(argv, env=process_env(server.url), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)  # fmt: skip
        while run.poll() is None and output_size(out) < 20_000:
            time.sleep(0.002)
        assert run.poll() is None, "finished before it could be stopped"
        run.send_signal(signal.SIGTERM)
        stdout, stderr = run.communicate(timeout=60)
        assert run.returncode == 143, stderr.decode()
        err = stderr.decode()
        assert "terminated" in err and "next run" in err, err
        summary = json.loads(stdout.decode().strip().splitlines()[-1])
        # The batch being appended when the signal came is finished and counted first.
        assert summary["exit_code"] == 143 and summary["sessions"] > 0, (summary, err)
        assert summary["sessions"] < emulator.total_sessions
        assert not list(out.rglob(".failopen-sync-*"))  # no spool left behind
        # The stopped run's manifest: what it wrote, every file of it there, counts matching.
        (manifest,) = manifests(out)
        assert manifest["exit_code"] == 143 and manifest["run_id"] == summary["run_id"]
        assert summary["manifest"] == str(out / "_manifests" / f"{summary['run_id']}.json")
        assert (
            [f["path"] for f in manifest["files"]]
            == summary["files"]
            == sorted(p.relative_to(out).as_posix() for p in out.glob("kind=*/dt=*/*"))
        )
        assert (
            sum(f["records"] for f in manifest["files"] if f["kind"] == "sessions")
            == sum(counts["sessions"] for counts in manifest["counts_by_key"].values())
            == summary["sessions"]
        )
        after = subprocess.run(argv, env=process_env(server.url), capture_output=True, timeout=60)
        assert after.returncode == 0, after.stderr.decode()
        assert json.loads(after.stdout.decode().splitlines()[-1])["resumed"] is True
    assert_exactly_once(out, emulator)


# --- item 7c: a dead host is one line -------------------------------------------------------


def _dead_url() -> str:
    with socket.socket() as sock:  # a port just freed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("verb", ["sessions", "sync"])
def test_a_dead_host_gives_exactly_one_line(tmp_path: Path, verb: str) -> None:
    env = process_env(_dead_url())
    if verb == "sync":
        argv = [str(FAILOPEN), "rai", *_sync_argv(tmp_path / "st.json", tmp_path, *OWNED)]
    else:
        argv = [str(FAILOPEN), "rai", *_export_argv("sessions", *OWNED), "--parallel", "4"]
    # Two attempts keep the backoff short; the lines must not grow with attempts anyway.
    done = subprocess.run([*argv, "--max-attempts", "2"], env=env, capture_output=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 5
    err = [line for line in done.stderr.decode().splitlines() if line.strip()]
    assert len(err) == 1, err
    assert "127.0.0.1:" in err[0] and "refused" in err[0].lower() and "2 attempts" in err[0]


@pytest.fixture
def blackhole() -> Iterator[str]:
    """A URL whose connections time out: a listening socket whose backlog is full, so the
    kernel drops further SYNs unanswered, as a firewall does."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    address = server.getsockname()
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(address)
        fillers.append(filler)
    time.sleep(0.1)
    probe = socket.socket()
    probe.settimeout(0.3)
    try:
        if probe.connect_ex(address) == 0:
            pytest.skip("this kernel answers connections past a full backlog")
    except TimeoutError:
        pass
    finally:
        probe.close()
    try:
        yield f"http://127.0.0.1:{address[1]}"
    finally:
        for sock in (*fillers, server):
            sock.close()


def test_connect_time_outs_are_one_warning_and_the_error(blackhole: str, tmp_path: Path) -> None:
    argv = [str(FAILOPEN), "rai", *_export_argv("sessions", OWNED[0]), "--parallel", "2",
            "--timeout", "0.3s", "--max-attempts", "3"]  # fmt: skip
    done = subprocess.run(argv, env=process_env(blackhole), capture_output=True, timeout=60)
    assert done.returncode == 5
    err = [line for line in done.stderr.decode().splitlines() if line.strip()]
    host = blackhole.removeprefix("http://")
    assert len(err) == 2, err  # was one per attempt and slice: 11 lines here
    assert "WARNING" in err[0] and host in err[0] and "later connect time-outs" in err[0]
    assert "ConnectTimeout" in err[1] and host in err[1] and "3 attempts" in err[1]


# --- item 7d: the exports' --json summary ---------------------------------------------------


@pytest.mark.parametrize("verb", ["sessions", "cohorts"])
def test_the_exports_print_a_json_summary(
    rai: Runner, emulator: RaiEmulator, tmp_path: Path, verb: str
) -> None:
    target = tmp_path / "x.jsonl"
    run = rai(*_export_argv(verb, *OWNED), "--out", str(target), "--json")
    assert run.code == 0, run.err
    summary = json.loads(run.out.decode().strip().splitlines()[-1])
    records = len(target.read_text().splitlines())
    want = emulator.total_sessions if verb == "sessions" else emulator.cohort_count
    assert summary["records"] == records == want
    assert summary["exit_code"] == 0 and summary["files"] == [str(target)]
    # To stdout the records go, so the summary goes to stderr (as sync's with --out-dir -).
    piped = rai(*_export_argv(verb, OWNED[0]), "--json")
    assert json.loads(piped.err.strip().splitlines()[-1])["exit_code"] == 0
    assert all(json.loads(line).get("summary") is None for line in piped.out.splitlines())


def test_a_failed_export_still_prints_its_summary(rai: Runner, tmp_path: Path) -> None:
    run = rai(*_export_argv("sessions", "pk_live_b"), "--out", str(tmp_path / "x.jsonl"), "--json")
    assert run.code == 3
    summary = json.loads(run.out.decode().strip().splitlines()[-1])
    assert summary == {**summary, "exit_code": 3, "records": 0, "files": []}


def test_an_export_of_several_keys_refused_says_which_keys_it_asked_for(
    rai: Runner, tmp_path: Path
) -> None:
    run = rai(*_export_argv("sessions", OWNED[0], "pk_live_b"), "--out", str(tmp_path / "x.jsonl"))
    assert run.code == 3
    assert f"one or more of {OWNED[0]}, pk_live_b" in run.err.splitlines()[-1]


# --- item 7e: CSV keeps ticket ids as strings ----------------------------------------------


def test_csv_keeps_a_ticket_id_with_leading_zeros_as_written(
    rai: Runner, emulator: RaiEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan_record = emulator.cohort_record(emulator.cohort_ids()[0])
    original = emulator._data.plan

    def plan(index: int):  # type: ignore[no-untyped-def]
        found = original(index)
        found.record["ticketing_ticket_id"] = "00123"
        return found

    monkeypatch.setattr(emulator._data, "plan", plan)
    target = tmp_path / "c.csv"
    run = rai(*_export_argv("cohorts", OWNED[0]), "--format", "csv", "--out", str(target))
    assert run.code == 0, run.err
    rows = list(csv.DictReader(io.StringIO(target.read_text(), newline="")))
    assert rows and {row["ticketing_ticket_id"] for row in rows} == {"00123"}
    assert plan_record["cohort_id"]  # the emulator's data is in use


@pytest.mark.slow
def test_sigterm_mid_export_prints_the_line_and_the_summary(tmp_path: Path) -> None:
    emulator = RaiEmulator(client_secret=SECRET, public_keys=OWNED, latency=0.05)
    target = tmp_path / "s.jsonl"
    with emulator.serve() as server:
        export = subprocess.Popen(
            [str(FAILOPEN), "rai", *_export_argv("sessions", OWNED[0]), "--page-size", "10",
             "--out", str(target), "--json"],
            env=process_env(server.url), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        while emulator.data_requests < 3:
            assert export.poll() is None
            time.sleep(0.01)
        export.send_signal(signal.SIGTERM)
        out, err = export.communicate(timeout=60)
    assert export.returncode == 143, err.decode()
    assert "terminated: SIGTERM" in err.decode() and "nothing was written to --out" in err.decode()
    assert json.loads(out.decode().splitlines()[-1]) == {
        **json.loads(out.decode().splitlines()[-1]),
        "exit_code": 143,
        "records": 0,
        "files": [],
    }
    assert not target.exists()
