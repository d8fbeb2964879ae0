"""Issue 18, item 11: an error names what failed and what to change, and never a secret.

A wrong or missing Redis password is an authentication failure, not "the override is unusable,
place a new one" (placing one fails the same way); a refused connection, a name that does not
resolve and a time-out in the status and verify log records name the host:port. Against a real
redis-server started with ``--requirepass``, the real ``failopen`` command, and loopback fakes.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _redis_kit import REDIS_PASSWORD, RedisServer

from failopen import Config
from failopen.providers.verify import HttpVerifier, VerifyOutcome
from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

FAILOPEN = Path(sys.executable).with_name("failopen")
WRONG = "not-the-Pa55word"
PRIVATE_KEY = "pk-secret-never-logged-4e1b77"


def secrets_in(text: str) -> list[str]:
    return [s for s in (WRONG, REDIS_PASSWORD, PRIVATE_KEY) if s in text]


@pytest.fixture
def server(redis_server_with_password: RedisServer) -> RedisServer:
    return redis_server_with_password


# --- the Redis store: the command ---------------------------------------------------------------


def test_override_show_with_a_wrong_password_says_authentication_failed(
    run: Any, server: RedisServer
) -> None:
    result = run("override", "show", "--store", f"redis://:{WRONG}@{server.address}/0")
    assert result.code == 2 and result.out == ""
    assert result.err.startswith(f"failopen override show: nothing read: Redis store "
                                 f"redis://:***@{server.address}/0: authentication failed (GET)")
    assert "password of the store URL: correct them in FAILOPEN_STORE" in result.err
    assert "unusable" not in result.err and "place a new one" not in result.err
    assert secrets_in(result.out + result.err) == []
    # With the right password the same command reads the store.
    assert run("override", "show", "--store", server.url).out.startswith("no override")


def test_override_show_without_a_password_says_the_url_needs_one(
    run: Any, server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAILOPEN_STORE", f"redis://{server.address}/0")
    result = run("override", "show")
    assert result.code == 2
    assert "authentication failed (GET)" in result.err
    assert "wants a password and the store URL gives none: add it to FAILOPEN_STORE_PASSWORD" in (
        result.err)
    assert "unusable" not in result.err


@pytest.mark.parametrize("verb", ["off", "on", "auto"])
def test_override_change_with_a_wrong_password_changes_nothing_and_says_why(
    run: Any, server: RedisServer, verb: str
) -> None:
    result = run("override", verb, "--store", f"redis://ops:{WRONG}@{server.address}/0")
    assert result.code == 2 and result.out == ""
    assert result.err.startswith(f"failopen override {verb}: nothing changed: Redis store "
                                 f"redis://ops:***@{server.address}/0: authentication failed")
    assert "StoreError" not in result.err and secrets_in(result.err) == []
    assert server.client().get("failopen:override") is None


def test_override_off_with_a_wrong_password_is_one_line_on_the_terminal(
    server: RedisServer
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    env["FAILOPEN_STORE"] = f"redis://:{WRONG}@{server.address}/0"
    done = subprocess.run([str(FAILOPEN), "override", "off", "--ttl", "30m"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    # Not also "override store unreadable, keeping the last known override" from the flag.
    assert done.stderr.count("\n") == 1, done.stderr
    assert "nothing changed" in done.stderr and "authentication failed" in done.stderr
    assert secrets_in(done.stdout + done.stderr) == []


def test_fleet_with_a_wrong_password_says_authentication_failed(
    run: Any, server: RedisServer
) -> None:
    result = run("fleet", "--store", f"redis://:{WRONG}@{server.address}/0")
    assert result.code == 2
    assert (f"failopen fleet: Redis store redis://:***@{server.address}/0: authentication "
            "failed (MGET)") in result.err
    assert "correct them in FAILOPEN_STORE" in result.err
    assert secrets_in(result.err) == []


def test_an_acl_user_without_the_keys_is_permission_denied(
    run: Any, server: RedisServer
) -> None:
    server.client().acl_setuser("limited", enabled=True, passwords=["+limited-pw"],
                                keys=["other:*"], commands=["+@all"])
    result = run("override", "show", "--store", f"redis://limited:limited-pw@{server.address}/0")
    assert result.code == 2
    assert "permission denied (GET)" in result.err and "failopen:*" in result.err
    assert "limited-pw" not in result.err


def test_a_refused_connection_names_host_and_port(run: Any) -> None:
    port = free_port()  # nothing listens there
    result = run("override", "show", "--store", f"redis://:{WRONG}@127.0.0.1:{port}/0")
    assert result.code == 2
    assert f"connection to 127.0.0.1:{port} failed (GET: Connection refused)" in result.err
    assert "authentication" not in result.err and secrets_in(result.err) == []


def test_a_silent_server_names_host_and_port(run: Any) -> None:
    with socket.socket() as silent:  # accepts connections (the kernel does), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        result = run("fleet", "--store", f"redis://:{WRONG}@127.0.0.1:{port}/0")
    assert result.code == 2
    assert f"no answer from 127.0.0.1:{port} in time (MGET)" in result.err
    assert secrets_in(result.err) == []


def _answer_like_http(listener: socket.socket) -> None:
    for _ in range(4):  # redis-py may connect again after the first answer
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.recv(4096)  # until the client hangs up


def test_a_server_that_is_not_redis_is_named(run: Any) -> None:
    with socket.socket() as listener:  # an HTTP server where Redis was expected
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        threading.Thread(target=_answer_like_http, args=(listener,), daemon=True).start()
        result = run("override", "show", "--store", f"redis://:{WRONG}@{address}/0")
    assert result.code == 2
    assert f"{address} did not answer GET as Redis does" in result.err
    assert "unusable" not in result.err and secrets_in(result.err) == []


def test_a_password_redis_py_reads_as_a_port_is_never_shown(run: Any) -> None:
    # An unescaped "/" ends the host part for redis-py: it reads ":4711" as the port and
    # connects to localhost:4711. Naming what it tried would show the password's first digits.
    result = run("override", "show", "--store", f"redis://:4711/{WRONG}@127.0.0.1:1/0")
    assert result.code == 2
    assert "does not parse as written: percent-encode" in result.err
    assert "4711" not in result.err and secrets_in(result.err) == []


# --- the Redis store: the runtime's log ---------------------------------------------------------


def test_the_runtime_logs_authentication_failed_naming_the_store(
    failopen_config: Config, server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = FailOpen(failopen_config.replace(store=f"redis://:{WRONG}@{server.address}/0"))
    try:
        assert runtime.fleet is not None
        with caplog.at_level(logging.WARNING, logger="failopen"):
            runtime.fleet.sync()  # what the watcher thread does first
    finally:
        runtime.stop()
    messages = [r.getMessage() for r in caplog.records]
    fleet = next(m for m in messages if m.startswith("fleet store unusable"))
    assert (f"Redis store redis://:***@{server.address}/0: authentication failed (MGET): the "
            "server refused the user or password") in fleet
    assert secrets_in(" ".join(messages + [str(r.__dict__) for r in caplog.records])) == []


# --- the vendor: status and verify log records name host:port ------------------------------------


@pytest.fixture
def hanging_verify_api() -> Iterator[str]:
    api = FakeVerifyAPI(private_key=PRIVATE_KEY)
    api.set_fault("timeout")
    with api.serve():
        yield api.verify_url


@pytest.mark.parametrize("where", ["refused", "unresolvable", "timeout"])
def test_verify_log_records_name_host_and_port(
    where: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    if where == "refused":
        port = free_port()
        url, shown = f"http://127.0.0.1:{port}/api/v4/verify/", f"127.0.0.1:{port}"
    elif where == "unresolvable":
        url, shown = "https://verify.invalid/api/v4/verify/", "verify.invalid:443"
    else:
        url = request.getfixturevalue("hanging_verify_api")
        shown = url.split("/")[2]
    verifier = HttpVerifier(url, PRIVATE_KEY, timeout=0.3 if where == "timeout" else 10)
    try:
        with caplog.at_level(logging.WARNING, logger="failopen"):
            result = verifier.verify("a-token")
    finally:
        verifier.close()
    assert result.outcome is VerifyOutcome.UNAVAILABLE
    logged = [r.getMessage() for r in caplog.records if r.name == "failopen.verify"]
    assert len(logged) == 1 and logged[0].startswith("verify unavailable: ")
    assert shown in logged[0] and shown in result.reason
    assert secrets_in(logged[0] + str(caplog.records[0].__dict__)) == []


@pytest.mark.parametrize("where", ["refused", "unresolvable", "timeout"])
def test_status_log_records_name_host_and_port(
    where: str, caplog: pytest.LogCaptureFixture
) -> None:
    page = FakeStatusPage()
    if where == "refused":
        port = free_port()
        url, shown = f"http://127.0.0.1:{port}", f"127.0.0.1:{port}"
    elif where == "unresolvable":
        url, shown = "https://status.invalid", "status.invalid:443"
    else:
        page.set_fault("timeout")
        url = page.serve().url
        shown = url.split("/")[2]
    runtime = FailOpen(Config(status_url=url, status_timeout=0.3 if where == "timeout" else 10))
    try:
        with caplog.at_level(logging.WARNING, logger="failopen"):
            result = runtime.watcher.poll_once()
    finally:
        runtime.stop()
        if page.server is not None:
            page.server.stop()
    assert result.reading == "failed" and runtime.flag.state.enforce
    logged = [r.getMessage() for r in caplog.records if r.name == "failopen.watcher"]
    assert logged and logged[0].startswith("status page unusable")
    assert f"could not be read: {shown}" in logged[0] or f"from {shown} within" in logged[0]
