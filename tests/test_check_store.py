"""``failopen check``'s store and fleet lines: memory, a file store's rules, and a real
redis-server (with and without a password, wrong password, nobody there, a server that never
answers, another deployment in the same prefix)."""

# The kit's fixtures are imported by name, and each test takes one as an argument.
# ruff: noqa: F811

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _check_kit import env, lines, loopback_only  # noqa: F401
from _redis_kit import REDIS_PASSWORD, RedisServer, needs_redis

from failopen.config import Config
from failopen.engine.fleet_identity import Watched
from failopen.testing import FakeStatusPage

# --- memory and file ----------------------------------------------------------------------------


def test_memory_is_fine_for_one_process_and_a_warning_for_several(
    run: Any, env: pytest.MonkeyPatch,
) -> None:
    assert lines(run("check").out)["store"][0] == "ok"
    env.setenv("FAILOPEN_OVERRIDE_ENDPOINT", "true")
    env.setenv("FAILOPEN_ADMIN_TOKEN", "x" * 32)
    status, detail = lines(run("check").out)["store"]
    assert status == "warning" and "the override endpoint is on" in detail


def _directory(tmp_path: Path, mode: int = 0o755) -> Path:
    directory = tmp_path / "failopen"
    directory.mkdir()
    os.chmod(directory, mode)  # explicit: mkdir's mode goes through the umask
    return directory


def test_a_file_store_in_a_private_directory(run: Any, env: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    directory = _directory(tmp_path)
    url = (directory / "override.json").as_uri()
    env.setenv("FAILOPEN_STORE", url)
    shown = run("check")
    assert shown.code == 0, shown.out
    status, detail = lines(shown.out)["store"]
    assert status == "ok"
    assert detail == (f"{url}: directory {directory} (owner uid {os.geteuid()}, mode 0755) "
                      f"trusted and writable by uid {os.geteuid()}; no override (the status page "
                      "decides)")
    assert list(directory.iterdir()) == []  # the probe file is gone; no override was written
    assert lines(shown.out)["fleet identity"][1].startswith("standalone (file store")


def test_a_file_store_shows_the_override_in_force(run: Any, env: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    url = (_directory(tmp_path) / "override.json").as_uri()
    env.setenv("FAILOPEN_STORE", url)
    assert run("override", "off", "--ttl", "30m", "--reason", "vendor ticket \x1b[2J 42").code == 0
    shown = run("check")
    detail = lines(shown.out)["store"][1]
    assert "override in force: enforce=False until " in detail
    assert "by cli: vendor ticket \\x1b[2J 42" in detail  # text from the store, escaped
    store = {c["name"]: c for c in json.loads(run("check", "--json").out)["checks"]}["store"]
    assert store["facts"]["override"]["reason"] == "vendor ticket \x1b[2J 42"  # exact in JSON


def test_a_directory_others_can_write_is_a_problem(run: Any, env: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    env.setenv("FAILOPEN_STORE", (_directory(tmp_path, 0o775) / "override.json").as_uri())
    shown = run("check")
    assert shown.code == 1
    status, detail = lines(shown.out)["store"]
    assert status == "problem" and "is writable by other users (mode 0775)" in detail


def test_an_override_file_others_can_write_is_a_problem(run: Any, env: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    path = _directory(tmp_path) / "override.json"
    path.write_text("null")
    os.chmod(path, 0o666)
    env.setenv("FAILOPEN_STORE", path.as_uri())
    status, detail = lines(run("check").out)["store"]
    assert status == "problem" and "writable by other users (mode 0666)" in detail


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere: the next test fakes it")
def test_a_directory_this_user_cannot_write_is_a_problem(run: Any, env: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    directory = _directory(tmp_path, 0o555)
    env.setenv("FAILOPEN_STORE", (directory / "override.json").as_uri())
    try:
        status, detail = lines(run("check").out)["store"]
    finally:
        os.chmod(directory, 0o755)
    assert status == "problem" and f"cannot create a file in {directory}" in detail


def test_a_read_only_file_system_is_a_problem(run: Any, env: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    # A container with a read-only root file system: the store's directory cannot take a file.
    import failopen.cli.preflight_store as preflight_store

    def read_only(**kwargs: Any) -> Any:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    directory = _directory(tmp_path)
    env.setattr(preflight_store.tempfile, "mkstemp", read_only)
    env.setenv("FAILOPEN_STORE", (directory / "override.json").as_uri())
    status, detail = lines(run("check").out)["store"]
    assert status == "problem"
    assert detail == (f"cannot create a file in {directory} (Read-only file system): an "
                      f"override could not be saved there by uid {os.geteuid()}")


# --- redis --------------------------------------------------------------------------------------


@needs_redis
def test_redis_round_trip_under_the_prefix(run: Any, env: pytest.MonkeyPatch,
                                           redis_server: RedisServer) -> None:
    env.setenv("FAILOPEN_STORE", redis_server.url)
    env.setenv("FAILOPEN_REDIS_PREFIX", "site:fo:")
    shown = run("check")
    assert shown.code == 0, shown.out
    status, detail = lines(shown.out)["store"]
    assert status == "ok"
    assert detail.startswith(f"{redis_server.url} (prefix 'site:fo:'): connected (no password: "
                             "anyone who reaches it can switch protection off); wrote, read and "
                             "deleted site:fo:check:*; no override")
    assert redis_server.client().keys("*") == []  # the round trip left nothing behind
    fleet = lines(shown.out)["fleet identity"][1]
    assert fleet.startswith(f"fleet member on {redis_server.url} (prefix 'site:fo:')")
    assert "no leader yet" in fleet


@needs_redis
def test_redis_with_its_password(run: Any, env: pytest.MonkeyPatch,
                                 redis_server_with_password: RedisServer) -> None:
    server = redis_server_with_password
    env.setenv("FAILOPEN_STORE", f"redis://{server.address}/0")
    env.setenv("FAILOPEN_STORE_PASSWORD", REDIS_PASSWORD)
    shown = run("check")
    assert shown.code == 0, shown.out
    assert f"redis://:***@{server.address}/0 (prefix 'failopen:'): connected, authenticated" \
        in lines(shown.out)["store"][1]
    assert REDIS_PASSWORD not in shown.out + shown.err


@needs_redis
@pytest.mark.parametrize("where", ["url", "variable"])
def test_a_wrong_redis_password_is_a_clear_problem(
    run: Any, env: pytest.MonkeyPatch, redis_server_with_password: RedisServer, where: str,
) -> None:
    server, wrong = redis_server_with_password, "wrong-redis-password-recognisable"
    if where == "url":
        env.setenv("FAILOPEN_STORE", f"redis://:{wrong}@{server.address}/0")
    else:
        env.setenv("FAILOPEN_STORE", f"redis://{server.address}/0")
        env.setenv("FAILOPEN_STORE_PASSWORD", wrong)
    for argv in (["check"], ["check", "--json"], ["check", "-v"]):
        shown = run(*argv)
        assert shown.code == 1
        assert "recognisable" not in shown.out + shown.err
    status, detail = lines(run("check").out)["store"]
    assert status == "problem"
    assert detail.startswith(f"Redis store redis://:***@{server.address}/0: authentication "
                             "failed (PING): the server refused the user or password")


@needs_redis
def test_redis_without_the_password_it_wants(run: Any, env: pytest.MonkeyPatch,
                                             redis_server_with_password: RedisServer) -> None:
    env.setenv("FAILOPEN_STORE", f"redis://{redis_server_with_password.address}/0")
    status, detail = lines(run("check").out)["store"]
    assert status == "problem" and "the server wants a password" in detail


@needs_redis
def test_a_single_server_given_a_cluster_url_is_named_as_one(
    run: Any, env: pytest.MonkeyPatch, redis_server: RedisServer,
) -> None:
    # It answers, but refuses CLUSTER SLOTS, as every Redis without cluster-enabled does: not
    # "a failover under way".
    env.setenv("FAILOPEN_STORE", f"redis+cluster://{redis_server.address}")
    status, detail = lines(run("check").out)["store"]
    assert status == "problem"
    assert "not as a cluster node" in detail and "redis://" in detail, detail
    assert "failover" not in detail


@needs_redis
def test_a_redis_user_without_the_prefix_is_a_problem(run: Any, env: pytest.MonkeyPatch,
                                                      redis_server: RedisServer) -> None:
    # An ACL user limited to another site's keys: it authenticates, then may not touch ours.
    redis_server.client().acl_setuser("othersite", enabled=True, passwords=["+user-pw-1234"],
                                      keys=["othersite:*"], commands=["+@all"])
    env.setenv("FAILOPEN_STORE", f"redis://othersite:user-pw-1234@{redis_server.address}/0")
    shown = run("check")
    status, detail = lines(shown.out)["store"]
    assert status == "problem"
    assert detail.startswith(f"Redis store redis://othersite:***@{redis_server.address}/0: "
                             "permission denied (SET): the store URL's Redis user may not run SET "
                             "on the keys failopen:*")
    assert "user-pw-1234" not in shown.out + shown.err


def test_nobody_on_the_redis_port(run: Any, env: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        env.setenv("FAILOPEN_STORE", f"redis://127.0.0.1:{port}/0")
        shown = run("check")
    status, detail = lines(shown.out)["store"]
    assert status == "problem" and f"connection to 127.0.0.1:{port} failed (PING" in detail
    assert "leader unknown (the store cannot be read: see store)" in shown.out


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never says a word (a frozen Redis, a firewall)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    listener.close()


def test_a_redis_that_never_answers_is_given_up(run: Any, env: pytest.MonkeyPatch,
                                                silent_server: int) -> None:
    env.setenv("FAILOPEN_STORE", f"redis://127.0.0.1:{silent_server}/0")
    started = time.monotonic()
    shown = run("check")
    assert time.monotonic() - started < 4  # 0.5 s per Redis command, well inside the deadline
    status, detail = lines(shown.out)["store"]
    assert status == "problem"
    assert f"no answer from 127.0.0.1:{silent_server} in time (PING)" in detail


# --- fleet identity -----------------------------------------------------------------------------


@needs_redis
def test_the_fleet_line_names_the_page_a_process_acts_on(
    run: Any, env: pytest.MonkeyPatch, redis_server: RedisServer,
    fake_status_page: FakeStatusPage,
) -> None:
    env.setenv("FAILOPEN_STORE", redis_server.url)
    facts = {c["name"]: c for c in run("check", "--json").json()["checks"]}[
        "fleet_identity"]["facts"]
    page = Watched.of(fake_status_page.url, None, None).page
    assert facts["fleet"] is True and facts["page"] == page and facts["prefix"] == "failopen:"
    assert facts["process"] == f"{socket.gethostname()[:60]}:<pid>:<random>"
    assert facts["mode"] == "enforce" and facts["evidence"] == ["status"]
    # A leader of this deployment: named, no warning.
    client = redis_server.client()
    client.set("failopen:leader", json.dumps({"id": "web-1:10:ab", "since": 1.0, "page": page}))
    shown = run("check")
    status, detail = lines(shown.out)["fleet identity"]
    assert status == "ok" and "leader web-1:10:ab since 1970-01-01T00:00:01.000Z" in detail


@needs_redis
def test_another_deployment_in_the_same_prefix_is_a_warning(
    run: Any, env: pytest.MonkeyPatch, redis_server: RedisServer,
) -> None:
    env.setenv("FAILOPEN_STORE", redis_server.url)
    client = redis_server.client()
    staging = Watched.of("https://status.staging.example", None, None).page
    client.set("failopen:leader", json.dumps({"id": "staging-1:7:cd", "since": 1.0,
                                              "page": staging}))
    client.set("failopen:proc:staging-1:7:cd", json.dumps(
        {"id": "staging-1:7:cd", "pid": 7, "leader": True, "seen": time.time(), "page": staging}),
        px=60_000)
    shown = run("check")
    assert shown.code == 0 and run("check", "--strict").code == 1
    status, detail = lines(shown.out)["fleet identity"]
    assert status == "warning"
    assert ("leader staging-1:7:cd since 1970-01-01T00:00:01.000Z watches another status page"
            in detail)
    assert "1 processes seen in the last minute, 1 of them watching another status page" in detail
    assert "give each deployment its own FAILOPEN_REDIS_PREFIX" in detail


def test_probe_and_shadow_are_part_of_the_identity(run: Any, env: pytest.MonkeyPatch,
                                                   fake_verify_api: Any) -> None:
    env.setenv("FAILOPEN_EVIDENCE", "status,probe")
    env.setenv("FAILOPEN_MODE", "shadow")
    detail = lines(run("check").out)["fleet identity"][1]
    verify = Watched.of("https://x.example", None, fake_verify_api.verify_url).verify
    assert f", verify {verify};" in detail
    assert "mode shadow (decides and logs, never bypasses); evidence probe,status" in detail


def test_the_config_factory_sees_every_store_setting() -> None:
    # The store line reads FAILOPEN_STORE, its password and the prefix, and nothing else.
    from failopen.cli.check import _PARTS

    uses = {name: fields for name, fields, _, _ in _PARTS}
    assert {"store", "store_password", "redis_prefix"} <= uses["store"]
    assert {"store", "store_password", "redis_prefix"} <= uses["fleet_identity"]
    assert all(set(fields) <= set(Config.__dataclass_fields__) for fields in uses.values())
