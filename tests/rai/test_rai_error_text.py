"""What ``failopen rai`` prints when it fails: what failed, never a secret, never a fake request id,
and the service's own text shown printable (issue 18, items 3 and 11, the ``rai`` parts)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from _hostile import run_cli

from failopen.testing._server import FakeRequest, LoopbackServer, Reply
from failopen.testing.rai_emulator import RaiEmulator

pytestmark = pytest.mark.slow

KEY = "pk_live_test"
SECRET = "s3cret-never-printed-7c1e"
WINDOW = ["--from", "2024-05-01T00:00:00Z", "--to", "2024-05-02T00:00:00Z", "--public-key", KEY]
HOSTILE = "bad \x1b]0;owned\x07\x1b[2J\u202eevil\x9b31m\r\nnext"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("verb", [["sessions", *WINDOW], ["cohort", "coh_1"]])
def test_connection_refused_names_host_and_port(verb: list[str]) -> None:
    port = closed_port()
    result = run_cli(f"http://127.0.0.1:{port}", SECRET, "rai", *verb, "--max-attempts", "1")
    assert result.returncode == 5, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"failopen rai {verb[0]}: network_error: ")
    assert f"127.0.0.1:{port}" in last and "Connection refused" in last
    assert "[request_id" not in last  # it never reached the API: no id to quote
    assert SECRET not in result.stderr


def test_an_unknown_host_names_host_and_default_port() -> None:
    result = run_cli("https://no-such-host.invalid", SECRET, "rai", "sessions", *WINDOW,
                     "--max-attempts", "1")  # fmt: skip
    assert result.returncode == 5, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "no-such-host.invalid:443" in last and "[request_id" not in last
    assert SECRET not in result.stderr


def test_a_timeout_names_host_and_port_in_the_error_and_the_retry_log() -> None:
    def slow(request: FakeRequest) -> Reply:
        return Reply.json({"access_token": "t", "expires_in": 3600}, delay=2.0)

    with LoopbackServer(slow) as server:
        result = run_cli(server.url, SECRET, "rai", "sessions", *WINDOW, "--timeout", "0.2",
                         "--max-attempts", "2")  # fmt: skip
    host_port = server.url.split("//", 1)[1].rstrip("/")
    assert result.returncode == 5, result.stderr
    assert "Timeout" in result.stderr
    lines = result.stderr.strip().splitlines()
    assert all(host_port in line for line in lines), result.stderr  # the retry warning too
    assert SECRET not in result.stderr


def test_a_local_argument_error_has_no_request_id(tmp_path: Path) -> None:
    result = run_cli("http://127.0.0.1:9", SECRET, "rai", "sessions", "--from", "yesterday",
                     "--to", "2024-05-02T00:00:00Z", "--public-key", KEY)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("failopen rai sessions: invalid_argument: --from: ")
    assert "request_id" not in result.stderr
    out = tmp_path / "no-dir" / "x.jsonl"
    result = run_cli("http://127.0.0.1:9", SECRET, "rai", "sessions", *WINDOW, "--out", str(out))
    assert result.returncode == 1 and "output_error" in result.stderr
    assert "request_id" not in result.stderr


# -- the service's text on the operator's terminal ---------------------------------------------


@pytest.fixture
def hostile_errors() -> Iterator[LoopbackServer]:
    """The emulator, but list answers are 400 errors whose text carries terminal escapes."""
    emulator = RaiEmulator(client_secret=SECRET)

    def handler(request: FakeRequest) -> Reply:
        if request.path.endswith("/authorize"):
            return emulator.handler(request)
        body = {"error": {"code": "invalid_window\x1b[31m", "message": HOSTILE,
                          "request_id": "req\x1b[8m_1\u2066"}}  # fmt: skip
        return Reply(400, json.dumps(body).encode(), [("Content-Type", "application/json")])

    with LoopbackServer(handler) as server:
        yield server


def test_the_services_error_text_is_printed_escaped(hostile_errors: LoopbackServer) -> None:
    result = run_cli(hostile_errors.url, SECRET, "rai", "sessions", *WINDOW)
    assert result.returncode == 2
    err = result.stderr
    assert not any(char in err for char in "\x1b\x07\x9b\u202e\u2066\r")
    assert err.count("\n") == 1  # one line: the service's newline is shown, not obeyed
    assert "invalid_window\\x1b[31m (HTTP 400): bad \\x1b]0;owned\\x07\\x1b[2J\\u202eevil" in err
    assert "\\x9b31m\\r\\nnext [request_id: req\\x1b[8m_1\\u2066]" in err


def test_the_services_error_text_in_sync_is_printed_escaped(
    hostile_errors: LoopbackServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    result = run_cli(hostile_errors.url, SECRET, "rai", "sync", "--public-key", KEY, "--state",
                     str(tmp_path / "state.json"), "--out-dir", str(out), "--since",
                     "2024-05-01T00:00:00Z", "--until", "2024-05-02T00:00:00Z")  # fmt: skip
    assert result.returncode == 2
    assert not any(char in result.stderr for char in "\x1b\x07\x9b\u202e\u2066\r")
    assert "bad \\x1b]0;owned" in result.stderr


# -- records shown as a CSV table on the terminal ----------------------------------------------


@pytest.fixture
def hostile_records() -> Iterator[LoopbackServer]:
    """The emulator, but the sessions listed carry terminal escapes in their text."""
    emulator = RaiEmulator(client_secret=SECRET)
    record = {"session_id": "ses_1", "session_created": "2024-05-01T10:00:00Z",
              "attack_label": HOSTILE, "telltale_names": [HOSTILE], "note": HOSTILE}  # fmt: skip

    def handler(request: FakeRequest) -> Reply:
        if request.path.endswith("/authorize"):
            return emulator.handler(request)
        # Only in the window (or --parallel slice) that holds its time, as a service would.
        start, end = request.query["from"][0], request.query["to"][0]
        inside = start <= record["session_created"] < end
        return Reply.json({"sessions": [record] if inside else [], "next_page_token": ""})

    with LoopbackServer(handler) as server:
        yield server


def run_on_terminal(base_url: str, *argv: str) -> tuple[int, bytes]:
    """``failopen ARGV`` with its stdout on a pseudo-terminal, as an operator runs it."""
    import os
    import pty
    import subprocess

    from _hostile import FAILOPEN

    env = {**os.environ, "FAILOPEN_RAI_BASE_URL": base_url,
           "FAILOPEN_RAI_CLIENT_ID": "test-client", "FAILOPEN_RAI_CLIENT_SECRET": SECRET}
    master, slave = pty.openpty()
    with subprocess.Popen([str(FAILOPEN), *argv], env=env, stdout=slave,
                          stderr=subprocess.DEVNULL) as child:  # fmt: skip
        os.close(slave)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        os.close(master)
        return child.wait(60), shown


@pytest.mark.parametrize("parallel", ["1", "2"])
def test_csv_on_a_terminal_shows_escapes_as_text(
    hostile_records: LoopbackServer, parallel: str
) -> None:
    code, shown = run_on_terminal(hostile_records.url, "rai", "sessions", *WINDOW,
                                  "--format", "csv", "--parallel", parallel)  # fmt: skip
    assert code == 0
    text = shown.decode()
    assert "ses_1" in text
    assert not any(char in text for char in "\x1b\x07\x9b\u202e")
    # Each cell shown printable: the label, the JSON array and extra_fields alike.
    assert text.count("bad \\x1b]0;owned\\x07\\x1b[2J\\u202eevil\\x9b31m\\r\\nnext") == 1
    assert text.count("owned") == 3  # in JSON cells as JSON's own escapes (\u001b), shown too


def test_csv_to_a_file_keeps_the_records_text_exact(
    hostile_records: LoopbackServer, tmp_path: Path
) -> None:
    import csv

    out = tmp_path / "sessions.csv"
    result = run_cli(hostile_records.url, SECRET, "rai", "sessions", *WINDOW, "--format", "csv",
                     "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    with open(out, newline="", encoding="utf-8") as f:
        header, row = list(csv.reader(f))
    assert row[header.index("attack_label")] == HOSTILE  # data, not a display: exact


def test_the_retry_warnings_show_the_services_text_escaped() -> None:
    emulator = RaiEmulator(client_secret=SECRET)

    def handler(request: FakeRequest) -> Reply:
        if request.path.endswith("/authorize"):
            return emulator.handler(request)
        body = {"error": {"code": "internal", "message": HOSTILE, "request_id": "r\x1b[8m"}}
        return Reply(500, json.dumps(body).encode(), [("Content-Type", "application/json")])

    with LoopbackServer(handler) as server:
        result = run_cli(server.url, SECRET, "rai", "sessions", *WINDOW, "--parallel", "1",
                         "--max-attempts", "2")  # fmt: skip
    assert result.returncode == 5
    assert "retrying in" in result.stderr  # the warning was printed...
    assert not any(char in result.stderr for char in "\x1b\x07\x9b\u202e\r")  # ...escaped
    assert "bad \\x1b]0;owned" in result.stderr
