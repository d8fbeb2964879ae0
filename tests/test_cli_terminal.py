"""Issue 18, item 3: outside text the ``failopen`` command prints is shown, never obeyed.

A status page's component names, a Redis heartbeat, an override's reason, an audit file's lines
and a running fake's state may carry escape sequences (clear the screen, move the cursor), a
carriage return, BEL or a bidi override: printed raw, they rewrite what an operator reads during
an incident. Every case drives the real command (in-process, or the console script where the log
lines matter) against the test kit's fakes serving hostile names; ``--json`` stays exact.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from failopen._internal.terminal import printable
from failopen.engine.flag import EnforcementFlag
from failopen.stores.file import FileStore
from failopen.testing import FakeStatusPage, LoopbackServer
from failopen.testing._server import Reply

FAILOPEN = Path(sys.executable).with_name("failopen")
# Clears the screen, homes the cursor, returns to the line's start, rings, then reverses the
# rest of the line; "café" is ordinary text and must stay as it is.
HOSTILE = "\x1b[2J\x1b[H\r\x07all clear \u202eevil\u2066 café"
SHOWN = "\\x1b[2J\\x1b[H\\r\\x07all clear \\u202eevil\\u2066 café"


def obeyed(text: str) -> list[str]:
    """The characters a terminal would act on instead of showing (line ends and tabs aside)."""
    return [c for c in text.replace("\n", "") if c != "\t"
            and unicodedata.category(c) in ("Cc", "Cf", "Cs")]


def console(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The real console script, so its log lines reach stderr as on an operator's terminal."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    return subprocess.run([str(FAILOPEN), *argv], capture_output=True, text=True, timeout=60,
                          env=clean | env)


@pytest.fixture
def page() -> FakeStatusPage:
    return FakeStatusPage(regions=("us-east-1", "eu-west-1"))


@pytest.fixture
def url(page: FakeStatusPage) -> Iterator[str]:
    with page.serve() as server:
        yield server.url


# --- the helper -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "shown"), [
    ("plain text", "plain text"),
    ("tab\tkept", "tab\tkept"),
    ("Zürich 東京 café", "Zürich 東京 café"),
    ("\x1b[31mred", "\\x1b[31mred"),
    ("bell\x07", "bell\\x07"),
    ("cr\rlf\n", "cr\\rlf\\n"),
    ("del\x7f c1\x85\x9b", "del\\x7f c1\\x85\\x9b"),
    ("\u202aembed\u202e over\u2066iso\u2069", "\\u202aembed\\u202e over\\u2066iso\\u2069"),
    ("zero\u200bwidth", "zero\\u200bwidth"),
    ("line\u2028sep", "line\u2028sep"),  # a separator, not a control: terminals show it
    ("lone \ud800 surrogate", "lone \\ud800 surrogate"),
    ("tag \U000e0041", "tag \\U000e0041"),
    ("a backslash \\x1b stays", "a backslash \\x1b stays"),
])
def test_printable_escapes_what_a_terminal_would_obey(text: str, shown: str) -> None:
    assert printable(text) == shown
    assert obeyed(printable(text)) == []
    printable(text).encode("utf-8")  # a lone surrogate would make print() raise


# --- failopen status ------------------------------------------------------------------------------


def test_status_components_shows_hostile_names_as_text(
    run: Any, url: str, page: FakeStatusPage
) -> None:
    page.set_name(HOSTILE)
    page.set_name("eu\nforged row", region="eu-west-1")
    result = run("status", "--status-url", url, "--components")
    assert result.code == 0, result.err
    assert obeyed(result.out + result.err) == []
    assert f"global component: {page.global_id} ({SHOWN}), chosen by guess" in result.out
    assert "eu\\nforged row" in result.out  # a newline inside a cell is shown, not obeyed
    lines = result.out.splitlines()
    rows = [line for line in lines if line.startswith(("fakeglobal00", "fakeregion"))]
    assert len(rows) == 3
    # The columns still line up: every status sits under the header's "status".
    column = lines[0].index("status")
    assert [row[column:].split()[0] for row in rows] == ["operational"] * 3


def test_a_lone_surrogate_in_a_name_is_shown_not_a_crash(url: str, page: FakeStatusPage) -> None:
    # JSON may spell "\ud800"; written to a UTF-8 terminal it raised UnicodeEncodeError.
    page.set_name("Global \ud800 x")
    done = console("status", "--status-url", url, "--components")
    assert done.returncode == 0, done.stderr
    assert "global component: fakeglobal00 (Global \\ud800 x), chosen by guess" in done.stdout


def test_status_components_json_keeps_the_names_exact(
    run: Any, url: str, page: FakeStatusPage
) -> None:
    page.set_name(HOSTILE)
    result = run("status", "--status-url", url, "--components", "--json")
    assert result.code == 0, result.err
    names = [c["name"] for c in result.json()["components"]]
    assert HOSTILE in names


def test_status_shows_a_hostile_global_status_as_text(
    run: Any, url: str, page: FakeStatusPage
) -> None:
    page.set_global("major_outage" + HOSTILE)
    result = run("status", "--status-url", url)
    assert result.code == 2  # not a known status: never an outage
    assert obeyed(result.out + result.err) == []
    assert f"global: major_outage{SHOWN}" in result.out
    assert run("status", "--status-url", url, "--json").json()["global_status"] == (
        "major_outage" + HOSTILE)


def test_status_error_quoting_hostile_names_is_text(
    run: Any, url: str, page: FakeStatusPage
) -> None:
    # Without the global component failopen names the components it found, in the error.
    page.set_fault("missing_global")
    page.set_name("Région " + HOSTILE, region="us-east-1")
    result = run("status", "--status-url", url)
    assert result.code == 2
    assert obeyed(result.out + result.err) == []
    assert f"fakeregion01 (Région {SHOWN})" in result.err


# --- failopen watch -------------------------------------------------------------------------------


def test_watch_lines_show_hostile_names_as_text_and_keep_letters(
    run: Any, url: str, page: FakeStatusPage
) -> None:
    page.set_global("Störung" + HOSTILE)  # not a known status: read, never acted on
    result = run("watch", "--status-url", url, "--interval", "0.01", "--count", "1")
    assert result.code == 0, result.err
    assert obeyed(result.out) == []
    assert f"global=Störung{SHOWN} enforce=True" in result.out


def test_watch_log_lines_on_the_terminal_show_hostile_names_as_text(
    url: str, page: FakeStatusPage
) -> None:
    page.set_fault("missing_global")
    page.set_name("Région " + HOSTILE, region="us-east-1")
    done = console("watch", "--status-url", url, "--interval", "0.01", "--count", "1")
    assert done.returncode == 0, done.stderr
    assert "WARNING failopen" in done.stderr  # the watcher's "status page unusable" line
    assert obeyed(done.stdout + done.stderr) == []
    assert "Région" in done.stderr and "\\u202eevil\\u2066" in done.stderr


# --- failopen override show -----------------------------------------------------------------------


def test_override_show_escapes_the_reason_and_keeps_its_letters(
    run: Any, tmp_path: Path
) -> None:
    store_url = (tmp_path / "override.json").as_uri()
    flag = EnforcementFlag(store=FileStore.from_url(store_url))
    flag.force_off("Störung " + HOSTILE + "\nenforce=True", ttl=60, set_by="ops-café")
    result = run("override", "show", "--store", store_url)
    assert result.code == 0, result.err
    assert obeyed(result.out) == [] and len(result.out.splitlines()) == 1
    assert f"reason=Störung {SHOWN}\\nenforce=True" in result.out
    assert "by=ops-café" in result.out
    shown = run("override", "show", "--store", store_url, "--json").json()["override"]
    assert shown["reason"] == "Störung " + HOSTILE + "\nenforce=True"


# --- failopen fleet -------------------------------------------------------------------------------


def test_fleet_shows_hostile_heartbeats_and_reasons_as_text(run: Any, redis_server: Any) -> None:
    client = redis_server.client()
    now = time.time()
    client.set("failopen:epoch", "1")
    client.set("failopen:proc:x", json.dumps(
        {"id": "web-é-" + HOSTILE, "pid": 1, "leader": True, "seen": now, "polls": 3}))
    client.set("failopen:leader", json.dumps({"id": "web-é-" + HOSTILE, "since": now}))
    client.set("failopen:override", json.dumps({
        "enforce": False, "reason": "Störung " + HOSTILE, "set_by": "cli", "set_at": now,
        "expires_at": now + 600}), px=600_000)
    result = run("fleet", "--store", redis_server.url)
    assert result.code == 0, result.err
    assert obeyed(result.out) == []
    assert f"leader:   web-é-{SHOWN} since" in result.out
    assert f"  web-é-{SHOWN} (leader):" in result.out
    assert f"reason=Störung {SHOWN}" in result.out
    data = run("fleet", "--store", redis_server.url, "--json").json()
    assert data["processes"][0]["id"] == "web-é-" + HOSTILE
    assert data["override"]["reason"] == "Störung " + HOSTILE


# --- failopen audit windows -----------------------------------------------------------------------


def _audit_line(at: str, window: str, reason: str, path: str = "/login") -> str:
    return json.dumps({"time": at, "window": window, "path": path, "client": "203.0.113.7",
                       "outcome": "bypassed", "reason": reason})


def test_audit_windows_table_shows_hostile_lines_as_text_in_columns(
    run: Any, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    audit.write_text("\n".join([
        _audit_line("2026-11-23T18:01:02Z", "watcher:2026-11-23T18:00:57Z", "outage"),
        _audit_line("2026-11-23T19:01:02Z", "w\x1b[8m\u202e:2026-11-23T19:00:00Z",
                    "Störung " + HOSTILE),
    ]) + "\n")
    result = run("audit", "windows", str(audit))
    assert result.code == 0, result.err
    assert obeyed(result.out + result.err) == []
    lines = result.out.splitlines()
    assert f"Störung {SHOWN}" in lines[2]
    assert "w\\x1b[8m\\u202e" in lines[2]
    # The escaped source is wider than its raw text: the reason column still lines up.
    column = lines[0].index("REASON")
    assert lines[1][column:] == "outage"
    assert lines[2][column:] == f"Störung {SHOWN}"
    reasons = [w["reason"] for w in run("audit", "windows", "--json", str(audit)).jsonl()]
    assert reasons == ["outage", "Störung " + HOSTILE]


# --- failopen emulate ... --show ------------------------------------------------------------------


def test_emulate_show_prints_a_running_fakes_state_as_text(run: Any) -> None:
    state = {"fake": "status", "global": "operational" + HOSTILE,
             "regions": {"eu-é" + HOSTILE: "operational"}, "fault": None}
    body = json.dumps(state).encode()
    with LoopbackServer(lambda request: Reply(200, body)).start() as server:
        result = run("emulate", "status", "--show", "--url", server.url)
    assert result.code == 0, result.err
    assert obeyed(result.out) == []
    assert f"global=operational{SHOWN} eu-é{SHOWN}=operational" in result.out


def test_emulate_show_prints_a_refusal_from_the_server_as_text(run: Any) -> None:
    body = json.dumps({"error": "no\x1b[2J " + HOSTILE}).encode()
    with LoopbackServer(lambda request: Reply(400, body)).start() as server:
        result = run("emulate", "status", "--show", "--url", server.url)
    assert result.code == 2
    assert obeyed(result.err) == [] and f"no\\x1b[2J {SHOWN}" in result.err


# --- failopen demo --------------------------------------------------------------------------------


def test_demo_lines_show_outside_text_as_text() -> None:
    from failopen.cli.demo import _Printer

    out = io.StringIO()
    _Printer(out).line("  >> flag: enforce True -> False [watcher] " + HOSTILE + "\n  next")
    assert out.getvalue() == f"  >> flag: enforce True -> False [watcher] {SHOWN}\n  next\n"


def test_the_command_log_formatter_keeps_a_traceback_and_escapes_what_it_quotes() -> None:
    from failopen.cli.terminal_log import TerminalLogFormatter

    formatter = TerminalLogFormatter("%(levelname)s %(message)s")
    try:
        raise ValueError("page said " + HOSTILE)
    except ValueError:
        record = logging.LogRecord("failopen", logging.ERROR, __file__, 1, "poll: %s",
                                   ("a\nforged line",), sys.exc_info())
    text = formatter.format(record)
    assert obeyed(text) == []
    assert text.startswith("ERROR poll: a\\nforged line\nTraceback (most recent call last):\n")
    assert text.endswith(f"ValueError: page said {SHOWN}")
