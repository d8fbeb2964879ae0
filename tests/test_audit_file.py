"""The audit file (FAILOPEN_AUDIT_FILE) and ``failopen audit windows``: what a security team
reads after an outage. Through a real ASGI stack over the test kit's fakes; disk faults through
an injected writer."""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from failopen.integrations.asgi import FailOpenMiddleware
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from failopen.config import Config
from failopen.exceptions import ConfigError
from failopen.observe.audit_file import AuditFile, hash_user_agent, window_id
from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI, solve_challenge

T0 = 1_800_000_000.0


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The request lines (the flag's own lines, with an ``event``, left out)."""
    return [line for line in every_line(path) if "event" not in line]


def every_line(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Clock:
    """Wall time for the writer, moved by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


# --- end to end: a real ASGI app during a forced outage -----------------------------------------


async def _login(request: Request) -> JSONResponse:
    return JSONResponse({"bypassed": request.state.failopen.bypassed})


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[FakeStatusPage, FailOpen, Starlette, Path]]:
    page, verify = FakeStatusPage(), FakeVerifyAPI()
    audit_path = tmp_path / "audit.jsonl"
    config = Config(
        status_url="https://status.test", verify_url="https://verify.test" + verify.path,
        private_key=verify.private_key, protected_paths=("/login",), poll_interval=3600.0,
        audit_file=str(audit_path),
    )
    runtime = FailOpen(config, status_transport=page.transport(),
                       verify_transport=verify.transport(),
                       verify_async_transport=verify.transport())
    app = Starlette(routes=[Route("/login", _login, methods=["POST"])])
    yield page, runtime, app, audit_path
    runtime.stop()


@pytest.mark.anyio
async def test_a_forced_outage_through_asgi_leaves_one_window_in_the_file(
    stack: tuple[FakeStatusPage, FailOpen, Starlette, Path], run: Any,
) -> None:
    page, runtime, app, audit_path = stack
    guarded = FailOpenMiddleware(app, runtime=runtime)
    runtime.poll_now()
    page.set_global("major_outage")
    runtime.poll_now()
    assert not runtime.state.enforce
    sent = 0
    for address, agent in (("203.0.113.9", "Mozilla/5.0 A"), ("198.51.100.7", "curl/8.0")):
        transport = httpx.ASGITransport(guarded, client=(address, 4711))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            for _ in range(3):
                reply = await c.post("/login", headers={"User-Agent": agent})
                assert reply.json() == {"bypassed": True}
                sent += 1
    page.set_global("operational")
    runtime.poll_now()
    runtime.poll_now()
    assert runtime.state.enforce
    transport = httpx.ASGITransport(guarded, client=("203.0.113.9", 4711))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        assert (await c.post("/login")).status_code == 403  # enforced again: not in the file
    runtime.stop()

    lines = read_lines(audit_path)
    assert len(lines) == sent == 6
    # The flag's turns frame the requests: off before the first, back after the last.
    turns = [line for line in every_line(audit_path) if "event" in line]
    assert [t["event"] for t in turns] == ["enforcement_off", "enforcement_back"]
    assert set(turns[1]) == {"time", "window", "event", "reason", "pid"}
    assert {t["window"] for t in turns} == {lines[0]["window"]}
    assert when(turns[0]["time"]) <= when(lines[0]["time"])
    assert when(lines[-1]["time"]) <= when(turns[1]["time"])
    first = lines[0]
    assert set(first) == {"time", "window", "path", "client", "ua", "outcome", "reason", "pid"}
    assert first["path"] == "/login" and first["client"] == "203.0.113.9"
    assert first["ua"] == "sha256:" + hashlib.sha256(b"Mozilla/5.0 A").hexdigest()[:16]
    assert first["outcome"] == "bypassed_flag_off" and "major_outage" in first["reason"]
    assert first["time"].endswith("Z") and first["window"].startswith("watcher:")
    assert {line["window"] for line in lines} == {first["window"]}, "one window, one id"

    shown = run("audit", "windows", "--json", str(audit_path))
    assert shown.code == 0, shown.err
    (window,) = [json.loads(line) for line in shown.out.splitlines()]
    assert window["requests"] == 6 and window["clients"] == 2
    assert window["source"] == "watcher" and "major_outage" in window["reason"]
    assert when(window["start"]) <= when(first["time"]) <= when(lines[-1]["time"]) \
        <= when(window["end"])
    # When enforcement came back, not only the last bypassed request: what a review asks.
    assert window["enforcement_back"] is not None
    assert when(turns[1]["time"]) <= when(window["enforcement_back"]) <= when(window["end"])
    assert "operational" in window["back_reason"]
    table = run("audit", "windows", str(audit_path))
    assert table.code == 0 and "REQUESTS" in table.out and "watcher" in table.out
    assert "ENFORCING AGAIN" in table.out and window["enforcement_back"] in table.out


@pytest.mark.anyio
async def test_a_request_cannot_forge_a_line(
    stack: tuple[FakeStatusPage, FailOpen, Starlette, Path],
) -> None:
    page, runtime, app, audit_path = stack
    guarded = FailOpenMiddleware(app, runtime=runtime)
    page.set_global("major_outage")
    runtime.poll_now()
    evil = 'Mozilla\x1b[2J {"time": "2020-01-01T00:00:00Z", "window": "x"}'
    # The server hands the app the decoded path: a newline and a forged line in it.
    forged = '/login%0A{"time": "2020-01-01T00:00:00Z"}%1B[2J' + "A" * 5000
    transport = httpx.ASGITransport(guarded, client=("203.0.113.9", 4711))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        await c.post(forged, headers={"User-Agent": evil})
    runtime.stop()
    raw = audit_path.read_bytes()
    assert raw.count(b"\n") == 2 and raw.isascii()  # the flag turning off, and the request
    (line,) = read_lines(audit_path)
    assert line["path"].startswith('/login\n{"time"') and len(line["path"]) <= 515
    assert line["ua"] == hash_user_agent(evil)


@pytest.mark.anyio
async def test_a_fallback_admission_is_a_bypass_in_the_file_and_in_its_window(
    tmp_path: Path, run: Any,
) -> None:
    # Issue 20: a request that paid a proof of work was still admitted without the vendor's
    # check, so a reviewer must find it in the window, told apart from the free ones.
    page, verify = FakeStatusPage(), FakeVerifyAPI()
    audit_path = tmp_path / "audit.jsonl"
    config = Config(
        status_url="https://status.test", verify_url="https://verify.test" + verify.path,
        private_key=verify.private_key, protected_paths=("/login", "/signup", "/reset"),
        outage_policy_routes="/login=open,/signup=fallback,/reset=closed",
        fallback_secret="audit-file-fallback-secret-0123456789", fallback_cost=2_000,
        poll_interval=3600.0, audit_file=str(audit_path),
    )
    runtime = FailOpen(config, status_transport=page.transport(),
                       verify_transport=verify.transport(),
                       verify_async_transport=verify.transport())
    app = Starlette(routes=[Route(p, _login, methods=["POST"]) for p in ("/login", "/signup",
                                                                          "/reset")])
    guarded = FailOpenMiddleware(app, runtime=runtime)
    page.set_global("major_outage")
    runtime.poll_now()
    assert not runtime.state.enforce
    transport = httpx.ASGITransport(guarded, client=("203.0.113.9", 4711))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        solution = solve_challenge((await c.get("/failopen/challenge")).json())
        assert (await c.post("/signup", data={"altcha": solution})).json() == {"bypassed": True}
        assert (await c.post("/signup", data={"altcha": solution})).status_code == 403
        assert (await c.post("/signup")).status_code == 403
        assert (await c.post("/reset")).status_code == 503
        assert (await c.post("/login")).json() == {"bypassed": True}
    runtime.stop()

    lines = read_lines(audit_path)
    assert [(line["path"], line["outcome"]) for line in lines] == [
        ("/signup", "bypassed_fallback"), ("/login", "bypassed_flag_off")], "refusals are not"
    assert "fallback challenge solved" in lines[0]["reason"]
    shown = run("audit", "windows", "--json", str(audit_path))
    assert shown.code == 0, shown.err
    (window,) = [json.loads(line) for line in shown.out.splitlines()]
    assert window["requests"] == 2 and window["paths"] == {"/signup": 1, "/login": 1}
    assert window["outcomes"] == {"bypassed_fallback": 1, "bypassed_flag_off": 1}


# --- rotation, drops, disk errors ----------------------------------------------------------------


def test_rotation_keeps_n_backups_and_windows_reads_them_all(tmp_path: Path, run: Any) -> None:
    path = tmp_path / "audit.jsonl"
    clock = Clock()
    audit = AuditFile(str(path), max_bytes=4096, backups=2, time_now=clock)
    for n in range(200):
        audit.record("/login", f"198.51.100.{n % 7}", "", "bypassed_flag_off", "outage",
                     window_id("override", T0))
        if n % 20 == 0:
            audit.drain()
        clock.now += 1
    audit.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    kept = sum(len(read_lines(tmp_path / name)) for name in files)
    assert all((tmp_path / name).stat().st_size <= 4096 for name in files)
    assert audit.stats()["written"] == 200 and kept < 200  # the oldest rotated away
    shown = run("audit", "windows", "--json", str(path))
    (window,) = [json.loads(line) for line in shown.out.splitlines()]
    assert window["requests"] == kept and window["clients"] == 7


def test_a_full_disk_is_counted_and_logged_once_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    full = threading.Event()
    full.set()

    def write(fd: int, data: bytes) -> int:
        if full.is_set():
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)

    caplog.set_level(logging.WARNING, logger="failopen.audit")
    audit = AuditFile(str(tmp_path / "audit.jsonl"), write=write)
    for _ in range(5):
        audit.record("/login", "203.0.113.9", "", "bypassed_flag_off", "outage", "w")
        audit.drain()
    assert audit.stats() == {"written": 0, "dropped": 0, "failed": 5}
    errors = [r for r in caplog.records if "ENOSPC" in r.getMessage()]
    assert len(errors) == 1, "once per change, not once per line"
    full.clear()
    audit.record("/login", "203.0.113.9", "", "bypassed_flag_off", "outage", "w")
    audit.close()
    assert audit.stats()["written"] == 1
    assert any("writing again" in r.getMessage() for r in caplog.records)


def test_a_full_queue_drops_and_counts_instead_of_waiting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    entered = threading.Event()

    def slow(fd: int, data: bytes) -> int:
        entered.set()
        release.wait(10)
        return os.write(fd, data)

    caplog.set_level(logging.WARNING, logger="failopen.audit")
    audit = AuditFile(str(tmp_path / "audit.jsonl"), queue_size=2, write=slow)
    audit.record("/login", "a", "", "bypassed_flag_off", "outage", "w")
    assert entered.wait(5)  # the writer is stuck on the disk
    for _ in range(10):
        audit.record("/login", "b", "", "bypassed_flag_off", "outage", "w")
    assert audit.stats()["dropped"] == 8
    release.set()
    audit.close()
    assert audit.stats() == {"written": 3, "dropped": 8, "failed": 0}
    assert any("8 line(s) dropped" in r.getMessage() for r in caplog.records)


# --- start-up ------------------------------------------------------------------------------------


def test_a_missing_directory_fails_at_start_up_naming_the_setting(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope" / "audit.jsonl")
    with pytest.raises(ConfigError, match="FAILOPEN_AUDIT_FILE.*does not exist"):
        Config(audit_file=missing)
    with pytest.raises(ConfigError, match="FAILOPEN_AUDIT_FILE"):
        Config.from_env({"FAILOPEN_AUDIT_FILE": missing})
    with pytest.raises(ConfigError, match="FAILOPEN_AUDIT_FILE.*directory"):
        Config(audit_file=str(tmp_path))
    with pytest.raises(ConfigError, match="FAILOPEN_AUDIT_BACKUPS"):
        Config.from_env({"FAILOPEN_AUDIT_BACKUPS": "0"})
    with pytest.raises(ConfigError, match="FAILOPEN_AUDIT_MAX_BYTES"):
        Config.from_env({"FAILOPEN_AUDIT_MAX_BYTES": "10"})
    # Django's FAILOPEN dict maps keys to fields generically.
    good = Config.from_mapping({"AUDIT_FILE": str(tmp_path / "a.jsonl"), "AUDIT_BACKUPS": 3},
                               environ={})
    assert good.audit_file == str(tmp_path / "a.jsonl") and good.audit_backups == 3


def test_an_unwritable_directory_fails_at_start_up(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    base: Path | None = None
    try:
        if os.geteuid() != 0:
            with pytest.raises(ConfigError, match="FAILOPEN_AUDIT_FILE.*not writable"):
                Config(audit_file=str(locked / "audit.jsonl"))
            return
        # Root writes anywhere: the check runs as nobody, in a forked child (no exec: the
        # interpreter may live where nobody cannot read).
        base = Path(tempfile.mkdtemp())  # pytest's own folders are root's alone
        base.chmod(0o755)
        locked.rename(base / "locked")
        locked = base / "locked"
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 3
            try:
                os.setgid(65534)
                os.setuid(65534)
                Config(audit_file=str(locked / "audit.jsonl"))
                code = 1
            except ConfigError as exc:
                code = 0 if "FAILOPEN_AUDIT_FILE" in str(exc) and "not writable" in str(exc) \
                    else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        locked.chmod(0o700)
        if base is not None:
            shutil.rmtree(base)


# --- failopen audit windows ----------------------------------------------------------------------


def _line(at: float, window: str, client: str, reason: str = "outage") -> str:
    moment = datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return json.dumps({"time": moment, "window": window, "path": "/login", "client": client,
                       "ua": "", "outcome": "bypassed_flag_off", "reason": reason, "pid": 1})


def test_a_fleet_of_two_processes_over_two_outages_gives_two_windows(
    tmp_path: Path, run: Any,
) -> None:
    # Each process saw the first outage at its own second; the second outage is an override,
    # whose id every process shares (its time comes from the store).
    web1 = [_line(T0 + n, window_id("watcher", T0), "a") for n in range(10)]
    web2 = [_line(T0 + 3 + n, window_id("watcher", T0 + 3), "b") for n in range(10)]
    later = T0 + 3600
    web1 += [_line(later + n, window_id("override", later), "c", "drill") for n in range(4)]
    web2 += [_line(later + n, window_id("override", later), "d", "drill") for n in range(4)]
    (tmp_path / "web1.jsonl").write_text("\n".join(web1) + "\n")
    (tmp_path / "web2.jsonl").write_text("\n".join(web2) + "\n")
    shown = run("audit", "windows", "--json", str(tmp_path / "web1.jsonl"),
                str(tmp_path / "web2.jsonl"))
    assert shown.code == 0, shown.err
    first, second = [json.loads(line) for line in shown.out.splitlines()]
    assert first["requests"] == 20 and first["clients"] == 2 and len(first["ids"]) == 2
    assert first["start"] == "2027-01-15T08:00:00Z" and first["end"] == "2027-01-15T08:00:12Z"
    assert second == {**second, "requests": 8, "clients": 2, "source": "override",
                      "reason": "drill", "ids": [window_id("override", later)]}


def test_windows_survives_malformed_and_truncated_lines(tmp_path: Path, run: Any) -> None:
    path = tmp_path / "audit.jsonl"
    good = [_line(T0 + n, "watcher:x", "a") for n in range(3)]
    path.write_text("\n".join([good[0], "garbage", "[1, 2]", good[1],
                               '{"time": "yesterday", "window": "w"}', good[2]])
                    + "\n" + good[0][:20])
    shown = run("audit", "windows", "--json", str(path))
    assert shown.code == 0
    (window,) = [json.loads(line) for line in shown.out.splitlines()]
    assert window["requests"] == 3
    assert "3 malformed line(s)" in shown.err and "1 incomplete last line" in shown.err
    missing = run("audit", "windows", str(tmp_path / "absent.jsonl"))
    assert missing.code == 2 and "cannot read" in missing.err


def test_lines_queued_when_the_process_exits_are_written(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "audit.jsonl"
    script = ("import sys\nfrom failopen.observe.audit_file import AuditFile\n"
              "f = AuditFile(sys.argv[1])\n"
              "for _ in range(500):\n"
              "    f.record('/login', 'c', 'ua', 'bypassed_flag_off', 'r', 'w')\n")
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=60)
    assert len(read_lines(path)) == 500


# --- audit windows without a file name; a window's end (issue 21, B.7) -------------------------


def test_windows_reads_failopen_audit_file_when_no_file_is_named(
        tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "audit.jsonl"
    clock = Clock()
    audit = AuditFile(str(path), time_now=clock)
    window = window_id("override", T0)
    audit.mark("enforcement_off", window, "drill")
    clock.now += 5
    audit.record("/login", "203.0.113.9", "ua", "bypassed_flag_off", "drill", window)
    clock.now += 55
    audit.mark("enforcement_back", window, "override lifted")
    audit.close()
    monkeypatch.setenv("FAILOPEN_AUDIT_FILE", str(path))
    shown = run("audit", "windows", "--json")
    assert shown.code == 0, shown.err
    (found,) = [json.loads(line) for line in shown.out.splitlines()]
    assert found["requests"] == 1 and found["back_reason"] == "override lifted"
    assert when(found["enforcement_back"]) == T0 + 60 == when(found["end"])
    monkeypatch.delenv("FAILOPEN_AUDIT_FILE")
    missing = run("audit", "windows")
    assert missing.code == 2 and "FAILOPEN_AUDIT_FILE" in missing.err


def test_a_window_nobody_used_is_listed_with_its_end(tmp_path: Path, run: Any) -> None:
    # An outage without one bypassed request is still a window a review should see.
    path = tmp_path / "audit.jsonl"
    clock = Clock()
    audit = AuditFile(str(path), time_now=clock)
    window = window_id("watcher", T0)
    audit.mark("enforcement_off", window, "global component major_outage")
    clock.now += 90
    audit.mark("enforcement_back", window, "global component operational")
    audit.close()
    shown = run("audit", "windows", "--json", str(path))
    (found,) = [json.loads(line) for line in shown.out.splitlines()]
    assert (found["requests"], found["clients"]) == (0, 0)
    assert (when(found["start"]), when(found["enforcement_back"])) == (T0, T0 + 90)
    still_off = tmp_path / "open.jsonl"
    audit = AuditFile(str(still_off), time_now=clock)
    audit.mark("enforcement_off", window_id("watcher", clock.now), "major_outage")
    audit.close()
    table = run("audit", "windows", str(still_off))
    assert "not recorded" in table.out


def test_the_end_of_a_window_is_written_through_a_flood_of_bypasses(
    tmp_path: Path, run: Any,
) -> None:
    # The queue is full of bypassed requests (a flood at the end of an outage, faster than the
    # disk): the line saying enforcement came back is the one a review needs, so it is kept; a
    # line that cannot be kept is counted as dropped, never lost without a word.
    release = threading.Event()
    entered = threading.Event()

    def slow(fd: int, data: bytes) -> int:
        entered.set()
        release.wait(10)
        return os.write(fd, data)

    path = tmp_path / "audit.jsonl"
    window = window_id("watcher", T0)
    audit = AuditFile(str(path), queue_size=2, write=slow)
    audit.record("/login", "a", "", "bypassed_flag_off", "outage", window)
    assert entered.wait(5)  # the writer is stuck on the disk
    for _ in range(10):
        audit.record("/login", "b", "", "bypassed_flag_off", "outage", window)
    audit.mark("enforcement_back", window, "global component operational")
    for _ in range(1000):  # a marker that cannot be kept any more is counted
        audit.mark("enforcement_off", window, "flapping")
    release.set()
    audit.close()
    stats = audit.stats()
    assert stats["written"] + stats["dropped"] == 1 + 10 + 1 + 1000
    shown = run("audit", "windows", "--json", str(path))
    (found,) = [json.loads(line) for line in shown.out.splitlines()]
    assert found["back_reason"] == "global component operational"
