"""``failopen rai`` export and ``failopen emulate rai``, end to end against the emulator."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _sync_helpers import KEY, SECRET, Run, process_env, window

from failopen.rai._output import JsonLines, Progress
from failopen.rai.cli import COHORT_COLUMNS, SESSION_COLUMNS, register_rai
from failopen.testing._server import LoopbackServer
from failopen.testing.rai_emulator import RaiEmulator

FAILOPEN = Path(sys.executable).with_name("failopen")


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def assert_secret_free(*texts: str | bytes, emulator: RaiEmulator) -> None:
    tokens = list(emulator._tokens)
    for text in texts:
        text = text.decode() if isinstance(text, bytes) else text
        assert SECRET not in text
        assert not any(token in text for token in tokens)


# -- every verb ------------------------------------------------------------------------------


def test_sessions_export_writes_every_record_as_received(
    rai: Callable[..., Run], emulator: RaiEmulator
) -> None:
    result = rai("sessions", *window(emulator))
    assert result.code == 0 and result.err == ""
    assert result.jsonl() == list(emulator.iter_session_records())
    assert result.out.endswith(b"}\n")
    listed = [r for r in emulator.history if r.path.endswith("/sessions")]
    assert listed[0].query["page_size"] == ["1000"]  # export default: fewest round trips


def test_cohorts_export(rai: Callable[..., Run], emulator: RaiEmulator) -> None:
    result = rai("cohorts", *window(emulator), "--page-size", "5", "--parallel", "1")
    assert result.code == 0
    assert result.jsonl() == [emulator.cohort_record(i) for i in emulator.cohort_ids()]
    assert sum(r.path.endswith("/cohorts") for r in emulator.history) == 3


def test_cohort_export(rai: Callable[..., Run], emulator: RaiEmulator) -> None:
    cohort_id = emulator.cohort_ids()[4]
    result = rai("cohort", cohort_id)
    assert result.code == 0 and result.jsonl() == [emulator.cohort_record(cohort_id)]


def test_cohort_sessions_export(rai: Callable[..., Run], emulator: RaiEmulator) -> None:
    cohort_id = emulator.cohort_ids()[2]
    result = rai("cohort-sessions", cohort_id, "--page-size", "9")
    assert result.code == 0
    assert result.jsonl() == list(emulator.iter_session_records(cohort_id))


def test_filters_reach_the_service(rai: Callable[..., Run], emulator: RaiEmulator) -> None:
    everything = [emulator.cohort_record(i) for i in emulator.cohort_ids()]
    target = everything[3]
    anomaly, telltale = target["anomaly_ids"][0], target["telltale_ids"][0]
    result = rai("cohorts", *window(emulator), "--anomaly-id", str(anomaly),
                 "--telltale-id", str(telltale), "--min-session-count", "1")  # fmt: skip
    want = [c for c in everything if anomaly in c["anomaly_ids"] and telltale in c["telltale_ids"]]
    assert result.code == 0 and result.jsonl() == want
    query = emulator.history[-1].query
    assert query["anomaly_id"] == [str(anomaly)] and query["telltale_id"] == [str(telltale)]
    assert query["min_session_count"] == ["1"]

    result = rai("sessions", *window(emulator), "--cohort-id", target["cohort_id"])
    assert result.jsonl() == list(emulator.iter_session_records(target["cohort_id"]))
    assert emulator.history[-1].query["cohort_id"] == [target["cohort_id"]]


def test_several_public_keys(rai: Callable[..., Run]) -> None:
    emulator = RaiEmulator(public_keys=("pk_a", "pk_b", "pk_c"), client_secret=SECRET)
    with emulator.serve() as server:
        start, end = emulator.data_window
        result = rai("cohorts", "--base-url", server.url, "--from", start, "--to", end,
                     "--public-key", "pk_a", "--public-key", "pk_c")  # fmt: skip
    assert result.code == 0
    assert {c["public_key"] for c in result.jsonl()} == {"pk_a", "pk_c"}
    assert emulator.history[-1].query["public_key"] == ["pk_a", "pk_c"]


# -- formats ---------------------------------------------------------------------------------


def read_csv(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode(), newline="")))


def test_csv_has_the_spec_columns_and_json_cells(
    rai: Callable[..., Run], emulator: RaiEmulator
) -> None:
    result = rai("sessions", *window(emulator), "--format", "csv")
    rows = read_csv(result.out)
    assert rows[0] == [*SESSION_COLUMNS, "extra_fields"]
    records = list(emulator.iter_session_records())
    assert len(rows) == len(records) + 1
    for row, record in zip(rows[1:], records, strict=True):
        cells = dict(zip(rows[0], row, strict=True))
        assert cells["session_id"] == record["session_id"]
        assert json.loads(cells["suspicion_flags"]) == record["suspicion_flags"]
        assert cells["tagged_by_telltale"] == ("true" if record["tagged_by_telltale"] else "false")
        assert float(cells["risk_score"]) == record["risk_score"]
        assert cells["verify"] == ("" if record["verify"] is None else
                                   json.dumps(record["verify"], separators=(",", ":")))
        assert cells["extra_fields"] == ""


def test_cohort_csv_columns(rai: Callable[..., Run], emulator: RaiEmulator) -> None:
    rows = read_csv(rai("cohort", emulator.cohort_ids()[0], "--format", "csv").out)
    assert rows[0] == [*COHORT_COLUMNS, "extra_fields"] and len(rows) == 2
    record = emulator.cohort_record(emulator.cohort_ids()[0])
    cells = dict(zip(rows[0], rows[1], strict=True))
    assert json.loads(cells["anomaly_ids"]) == record["anomaly_ids"]
    assert cells["session_count"] == str(record["session_count"])


def test_unknown_fields_survive_both_formats(rai: Callable[..., Run]) -> None:
    emulator = RaiEmulator(unknown_fields=True, client_secret=SECRET)
    with emulator.serve() as server:
        jsonl = rai("sessions", "--base-url", server.url, *window(emulator))
        table = rai("sessions", "--base-url", server.url, *window(emulator), "--format", "csv")
    assert jsonl.jsonl() == list(emulator.iter_session_records())
    assert all(r["future_field"] for r in jsonl.jsonl())
    rows = read_csv(table.out)
    extra = json.loads(dict(zip(rows[0], rows[1], strict=True))["extra_fields"])
    assert extra == {"future_field": {"note": "added by a later rai-v1 revision"}}


# -- --out is atomic -------------------------------------------------------------------------


def test_out_file_is_written_whole(
    rai: Callable[..., Run], emulator: RaiEmulator, tmp_path: Path
) -> None:
    out = tmp_path / "sessions.jsonl"
    result = rai("sessions", *window(emulator), "--out", str(out))
    assert result.code == 0 and result.out == b""
    lines = out.read_text().splitlines()
    assert [json.loads(line) for line in lines] == list(emulator.iter_session_records())
    assert leftovers(tmp_path) == ["sessions.jsonl"]
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_failure_mid_export_leaves_no_file_and_no_litter(
    rai: Callable[..., Run], emulator: RaiEmulator, tmp_path: Path
) -> None:
    emulator.fail_every = 4  # pages 1-3 are written, the 4th request fails
    out = tmp_path / "sessions.csv"
    result = rai("sessions", *window(emulator), "--page-size", "50", "--max-attempts", "1",
                 "--format", "csv", "--out", str(out), "--parallel", "1")  # fmt: skip
    assert result.code == 5
    assert "internal (HTTP 500)" in result.err and "request_id: req_" in result.err
    assert leftovers(tmp_path) == []


def test_a_failed_export_keeps_the_previous_file(
    rai: Callable[..., Run], emulator: RaiEmulator, tmp_path: Path
) -> None:
    out = tmp_path / "sessions.jsonl"
    out.write_text("yesterday's complete export\n")
    out.chmod(0o640)
    emulator.inject_error("internal", times=2, endpoint="list_sessions")
    result = rai("sessions", *window(emulator), "--max-attempts", "2", "--out", str(out),
                 "--parallel", "1")  # fmt: skip
    assert result.code == 5 and out.read_text() == "yesterday's complete export\n"
    assert leftovers(tmp_path) == ["sessions.jsonl"]
    assert rai("sessions", *window(emulator), "--out", str(out)).code == 0
    assert out.stat().st_mode & 0o777 == 0o640 and len(out.read_text().splitlines()) > 100


def test_ctrl_c_mid_export_leaves_no_file(
    rai: Callable[..., Run], emulator: RaiEmulator, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    writes = []
    real = JsonLines.write

    def interrupted(self: Any, records: Any, lines: Any = None) -> None:
        writes.append(1)
        if len(writes) == 2:
            raise KeyboardInterrupt
        real(self, records, lines)

    monkeypatch.setattr(JsonLines, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        rai("sessions", *window(emulator), "--page-size", "100", "--out", str(tmp_path / "s"),
            "--parallel", "1")  # fmt: skip
    assert leftovers(tmp_path) == []


def test_out_that_cannot_be_written_exits_1_before_any_request(
    rai: Callable[..., Run], emulator: RaiEmulator, tmp_path: Path
) -> None:
    missing = tmp_path / "nope"
    result = rai("sessions", *window(emulator), "--out", str(missing / "x.jsonl"))
    assert result.code == 1
    assert f"output_error: --out: the directory does not exist ({missing})" in result.err
    result = rai("sessions", *window(emulator), "--out", str(tmp_path))
    assert result.code == 1 and f"output_error: --out: is a directory ({tmp_path})" in result.err
    assert emulator.data_requests == 0 and leftovers(tmp_path) == []


def test_out_into_an_unwritable_directory_exits_1(
    rai: Callable[..., Run], emulator: RaiEmulator, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    def denied(**kwargs: Any) -> Any:  # chmod would not stop root, so refuse like a 0o500 dir
        raise PermissionError(13, "Permission denied", str(tmp_path / ".s.jsonl.x.part"))

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    result = rai("sessions", *window(emulator), "--out", str(tmp_path / "s.jsonl"))
    assert result.code == 1
    assert "output_error: --out: cannot create a file in the directory (Permission denied) " \
        f"({tmp_path})" in result.err
    assert ".part" not in result.err and emulator.data_requests == 0


# -- exit codes and error reports ------------------------------------------------------------


def test_unauthorized_exits_3_and_never_echoes_the_secret(
    rai: Callable[..., Run], emulator: RaiEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAILOPEN_RAI_CLIENT_SECRET", "wrong-" + SECRET)
    result = rai("sessions", *window(emulator))
    assert result.code == 3
    assert result.err.startswith("failopen rai sessions: unauthorized (HTTP 401): ")
    assert "request_id: req_" in result.err
    assert "wrong-" not in result.err
    assert_secret_free(result.out, result.err, emulator=emulator)


def test_forbidden_exits_3(rai: Callable[..., Run], emulator: RaiEmulator) -> None:
    result = rai("cohorts", *window(emulator), "--public-key", "pk_live_someone_else")
    assert result.code == 3 and "forbidden_public_key (HTTP 403)" in result.err
    emulator.forbidden_endpoints = frozenset({"get_cohort"})
    result = rai("cohort", emulator.cohort_ids()[0])
    assert result.code == 3 and "forbidden (HTTP 403)" in result.err
    assert_secret_free(result.err, emulator=emulator)


def test_not_found_exits_4(rai: Callable[..., Run], emulator: RaiEmulator) -> None:
    for verb in ("cohort", "cohort-sessions"):
        result = rai(verb, "coh_ffffffffffff")
        assert result.code == 4 and "not_found (HTTP 404)" in result.err
        assert "request_id: req_" in result.err


def test_server_errors_retry_then_exit_5(rai: Callable[..., Run], emulator: RaiEmulator) -> None:
    emulator.fail_every = 2  # each failed request succeeds on its retry
    # Sequential: with parallel windows a retry may meet another thread's failing turn.
    assert rai("sessions", *window(emulator), "--page-size", "100", "--parallel", "1").code == 0
    emulator.fail_every = 1
    result = rai("sessions", *window(emulator), "--max-attempts", "3")
    assert result.code == 5 and "internal (HTTP 500)" in result.err
    assert emulator.error_counts["internal"] >= 3 + 3


def test_network_failure_exits_5(rai: Callable[..., Run], emulator: RaiEmulator) -> None:
    with LoopbackServer(emulator.handler) as gone:
        url = gone.url
    result = rai("sessions", "--base-url", url, *window(emulator), "--max-attempts", "2")
    assert result.code == 5 and result.err.startswith("failopen rai sessions: network_error: ")
    assert url.split("//", 1)[1].rstrip("/") in result.err  # host:port of the failed request
    assert "request_id" not in result.err  # it never reached the API


def test_service_400_exits_2(rai: Callable[..., Run], emulator: RaiEmulator) -> None:
    emulator.inject_error("invalid_window", endpoint="list_sessions")
    result = rai("sessions", *window(emulator))
    assert result.code == 2 and "invalid_window (HTTP 400)" in result.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--from", "yesterday", "--to", "2024-05-02T00:00:00Z", "--public-key", KEY],
      "--from: 'yesterday' is not an RFC 3339 timestamp"),
     (["--from", "2024-05-01T00:00:00Z", "--to", "2024-05-02", "--public-key", KEY],
      "--to: '2024-05-02' is not an RFC 3339 timestamp"),
     (["--from", "2024-05-02T00:00:00Z", "--to", "2024-05-01T00:00:00Z", "--public-key", KEY],
      "--from (2024-05-02T00:00:00Z) must be before --to (2024-05-01T00:00:00Z)"),
     (["--from", "2024-05-01T00:00:00", "--to", "2024-05-02T00:00:00Z", "--public-key", KEY],
      "--from: '2024-05-01T00:00:00' is not"),
     (["--from", "2024-05-01T00:00:00Z", "--to", "2024-05-02T00:00:00Z", "--public-key", " "],
      "--public-key: ' ' is not a non-empty string"),
     (["--from", "2024-05-01T00:00:00Z", "--to", "2024-05-02T00:00:00Z", "--public-key", KEY,
       "--cohort-id", ""], "--cohort-id must be a non-empty string")],
)  # fmt: skip
def test_bad_arguments_exit_2_before_any_request_naming_the_flag(
    rai: Callable[..., Run], emulator: RaiEmulator, argv: list[str], message: str
) -> None:
    result = rai("sessions", *argv)
    assert result.code == 2
    assert result.err.startswith(f"failopen rai sessions: invalid_argument: {message}")
    assert "request_id" not in result.err  # a local error: no request to quote
    assert emulator.data_requests == 0


@pytest.mark.parametrize("verb", ["cohort", "cohort-sessions"])
@pytest.mark.parametrize("cohort_id", ["", " ", ".."])
def test_a_bad_cohort_id_is_named_as_the_argument(
    rai: Callable[..., Run], emulator: RaiEmulator, verb: str, cohort_id: str
) -> None:
    result = rai(verb, cohort_id)
    assert result.code == 2 and "invalid_argument: COHORT_ID " in result.err
    assert emulator.data_requests == 0


def test_page_size_errors_name_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="failopen")
    register_rai(parser.add_subparsers())
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["rai", "cohort-sessions", "c", "--page-size", "0"])
    assert exited.value.code == 2
    assert "argument --page-size: '0' is not an integer from 1 to 1000" in capsys.readouterr().err


def test_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="failopen")
    register_rai(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["rai", "--help"])
    shown = capsys.readouterr().out
    assert "Exit codes: 0 done, 1 the output could not be written" in shown
    assert "--public-key pk_live_1 --format jsonl --out sessions.jsonl" in shown
    for markup in ("``", ":data:", "\\\\"):
        assert markup not in shown


@pytest.mark.parametrize(
    "argv",
    [["sessions", "--to", "2024-05-02T00:00:00Z", "--public-key", KEY],
     ["sessions", "--from", "a", "--to", "b"],
     ["cohorts", "--from", "a", "--to", "b", "--public-key", KEY, "--page-size", "1001"],
     ["cohorts", "--from", "a", "--to", "b", "--public-key", KEY, "--anomaly-id", "x"],
     ["sessions", "--from", "a", "--to", "b", "--public-key", KEY, "--min-session-count", "3"],
     ["cohort", "coh_x", "--client-secret", SECRET],
     ["cohort", "coh_x", "--format", "xml"],
     ["cohort"], []],
)  # fmt: skip
def test_argparse_errors_exit_2(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="failopen")
    register_rai(parser.add_subparsers())
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["rai", *argv])
    assert exited.value.code == 2


def test_credentials_come_only_from_the_environment(
    rai: Callable[..., Run], emulator: RaiEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FAILOPEN_RAI_CLIENT_SECRET")
    result = rai("sessions", *window(emulator))
    assert result.code == 2 and "FAILOPEN_RAI_CLIENT_SECRET" in result.err
    monkeypatch.delenv("FAILOPEN_RAI_CLIENT_ID")
    assert "FAILOPEN_RAI_CLIENT_ID and FAILOPEN_RAI_CLIENT_SECRET" in rai("cohort", "x").err
    assert emulator.requests == 0


def test_base_url_flag_wins_over_the_environment(
    rai: Callable[..., Run], emulator: RaiEmulator, server: LoopbackServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("FAILOPEN_RAI_BASE_URL", "http://127.0.0.1:9")
    assert rai("cohort", emulator.cohort_ids()[0], "--base-url", server.url).code == 0
    monkeypatch.delenv("FAILOPEN_RAI_BASE_URL")
    result = rai("cohort", emulator.cohort_ids()[0])
    assert result.code == 2 and "FAILOPEN_RAI_BASE_URL" in result.err
    result = rai("cohort", emulator.cohort_ids()[0], "--base-url", "http://vendor.example")
    assert result.code == 2 and "https" in result.err


# -- progress --------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_ends_with_the_totals(
    rai: Callable[..., Run], emulator: RaiEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert rai("sessions", *window(emulator), "--page-size", "100", "--parallel", "1").code == 0
    shown = terminal.getvalue()
    assert shown.startswith("\r") and shown.endswith("\n")
    assert shown.splitlines()[-1].lstrip("\r").startswith("573 records, 6 pages, ")


def test_progress_is_throttled() -> None:
    terminal = Terminal()
    now = [0.0]
    progress = Progress(terminal, clock=lambda: now[0])
    for _ in range(10):
        now[0] += 0.125  # shown every 0.2 s at most: every second page
        progress.add(100)
    progress.finish()
    lines = terminal.getvalue().split("\r")[1:]
    assert lines == [f"{n:,} records, {n // 100} pages, 800 records/s" for n in
                     (200, 400, 600, 800, 1000)] + ["1,000 records, 10 pages, 800 records/s\n"]


def test_no_progress_when_stderr_is_not_a_terminal(
    rai: Callable[..., Run], emulator: RaiEmulator
) -> None:
    assert rai("sessions", *window(emulator), "--page-size", "10").err == ""


# -- end to end, as real processes -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not FAILOPEN.exists(), reason="the failopen entry point is not installed")
def test_failopen_rai_as_a_process(
    emulator: RaiEmulator, server: LoopbackServer, tmp_path: Path
) -> None:
    out = tmp_path / "sessions.jsonl"
    done = subprocess.run(
        [str(FAILOPEN), "rai", "sessions", *window(emulator), "--out", str(out)],
        env=process_env(server.url), capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [json.loads(x) for x in out.read_text().splitlines()] == list(
        emulator.iter_session_records()
    )
    missing = subprocess.run(
        [str(FAILOPEN), "rai", "cohort", "coh_ffffffffffff"],
        env=process_env(server.url), capture_output=True, timeout=60,
    )  # fmt: skip
    assert missing.returncode == 4 and b"not_found" in missing.stderr
    assert_secret_free(done.stdout, done.stderr, missing.stderr, emulator=emulator)


@pytest.mark.slow
@pytest.mark.skipif(not FAILOPEN.exists(), reason="the failopen entry point is not installed")
def test_sigterm_mid_export_leaves_no_file(emulator: RaiEmulator, tmp_path: Path) -> None:
    emulator.latency = 0.05
    with emulator.serve() as server:
        export = subprocess.Popen(
            [str(FAILOPEN), "rai", "sessions", *window(emulator), "--page-size", "10",
             "--out", str(tmp_path / "s.jsonl")],
            env=process_env(server.url), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        while emulator.data_requests < 3:  # pages are being written
            assert export.poll() is None
            threading.Event().wait(0.01)
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")]  # in progress
        export.send_signal(signal.SIGTERM)
        _, err = export.communicate(timeout=60)
    assert export.returncode == 128 + signal.SIGTERM
    assert leftovers(tmp_path) == []
    # One line says why it stopped, as rai sync's does.
    assert err.decode().splitlines()[-1].startswith("failopen rai sessions: terminated: SIGTERM")


@pytest.mark.slow
@pytest.mark.skipif(not FAILOPEN.exists(), reason="the failopen entry point is not installed")
def test_failopen_emulate_rai_serves_until_interrupted(tmp_path: Path) -> None:
    emulator = subprocess.Popen(
        [str(FAILOPEN), "emulate", "rai", "--port", "0", "--seed", "5", "--cohorts", "3",
         "--sessions-per-cohort", "40", "--client-secret", SECRET, "--public-key", "pk_e2e"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert emulator.stdout is not None
        banner = [emulator.stdout.readline() for _ in range(6)]
        url = banner[1].strip().split("=", 1)[1]
        assert banner[2].strip() == "export FAILOPEN_RAI_CLIENT_ID=test-client"
        assert "120 sessions in 3 cohorts" in banner[4]
        local = RaiEmulator(seed=5, cohorts=3, sessions_per_cohort=40, public_keys=("pk_e2e",))
        start, end = local.data_window
        done = subprocess.run(
            [str(FAILOPEN), "rai", "sessions", "--from", start, "--to", end, "--public-key",
             "pk_e2e", "--format", "csv", "--out", str(tmp_path / "s.csv")],
            env=process_env(url), capture_output=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        rows = read_csv((tmp_path / "s.csv").read_bytes())
        assert [r[0] for r in rows[1:]] == [s["session_id"] for s in local.iter_session_records()]
    finally:
        emulator.send_signal(signal.SIGINT)
        emulator.communicate(timeout=30)
    assert emulator.returncode in (0, 130)
