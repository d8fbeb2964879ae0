"""``failopen fleet`` and ``failopen watch --json`` in fleet mode, against a real Redis."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _redis_kit import RedisServer, wait_for

from failopen import Config
from failopen.cli.command import main
from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, free_port

SECRET = "s3cret-Pa55-fleet"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_fleet_shows_leader_reading_override_and_processes(
    capsys: pytest.CaptureFixture[str], redis_server: RedisServer, failopen_config: Config,
    fake_status_page: FakeStatusPage,
) -> None:
    # A lease long enough that a loaded machine (CI runs jobs side by side) cannot stall the
    # leader past it: the report is compared with the leader found here. The first election
    # does not wait for it.
    config = failopen_config.replace(store=redis_server.url, poll_interval=0.2,
                                     store_refresh=0.05, fleet_lease=15.0)
    runtimes = [FailOpen(config) for _ in range(3)]
    try:
        for runtime in runtimes:
            runtime.start()
        assert wait_for(lambda: sum(bool(r.fleet and r.fleet.leader) for r in runtimes) == 1)
        leader = next(r for r in runtimes if r.fleet and r.fleet.leader)
        assert leader.fleet is not None
        assert wait_for(lambda: redis_server.client().get("failopen:reading") is not None)
        code, out, err = run(capsys, "override", "off", "--ttl", "5m", "--reason", "INC-11",
                             "--store", redis_server.url)
        assert code == 0, err
        assert wait_for(lambda: len(redis_server.client().keys("failopen:proc:*")) == 3)
        code, out, err = run(capsys, "fleet", "--store", redis_server.url, "--json")
        assert code == 0, err
        report = json.loads(out)
        assert report["leader"]["id"] == leader.fleet.id
        assert report["reading"]["global_status"] == "operational"
        assert report["reading"]["by"] == leader.fleet.id
        assert report["reading"]["age_seconds"] >= 0
        assert report["override"]["set_by"] == "cli"
        assert report["override"]["reason"] == "INC-11"
        assert {p["id"] for p in report["processes"]} == {r.fleet.id for r in runtimes
                                                          if r.fleet is not None}
        assert [p["leader"] for p in report["processes"]].count(True) == 1
        code, text, _ = run(capsys, "fleet", "--store", redis_server.url)
        assert code == 0 and leader.fleet.id in text and "INC-11" in text
    finally:
        for runtime in runtimes:
            runtime.stop()


def test_fleet_on_an_unreachable_redis_exits_2_without_the_password(
    capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    code, out, err = run(capsys, "fleet", "--store", f"redis://:{SECRET}@127.0.0.1:{port}/0")
    assert code == 2 and f"connection to 127.0.0.1:{port} failed (MGET: Connection refused)" in err
    assert SECRET not in out + err


def test_fleet_needs_a_redis_store(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "fleet", "--store", "memory:")
    assert code == 2 and "redis://" in err


def test_watch_json_says_leader_and_store(
    capsys: pytest.CaptureFixture[str], redis_server: RedisServer,
    fake_status_page: FakeStatusPage,
) -> None:
    code, out, err = run(capsys, "watch", "--status-url", fake_status_page.url, "--interval",
                         "0.05", "--json", "--count", "3", "--store", redis_server.url)
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 3
    assert all(line["store"] == "redis" and line["leader"] is True for line in lines)
    assert all(line["global_status"] == "operational" for line in lines)


def test_watch_json_without_a_fleet_has_no_fleet_keys(
    capsys: pytest.CaptureFixture[str], fake_status_page: FakeStatusPage
) -> None:
    code, out, _ = run(capsys, "watch", "--status-url", fake_status_page.url, "--interval",
                       "0.05", "--json", "--count", "1")
    assert code == 0
    line: dict[str, Any] = json.loads(out)
    assert "leader" not in line and "store" not in line


def test_fleet_says_since_when_the_leader_leads(
    capsys: pytest.CaptureFixture[str], redis_server: RedisServer, failopen_config: Config
) -> None:
    import time

    config = failopen_config.replace(store=redis_server.url, poll_interval=0.2,
                                     store_refresh=0.05, fleet_lease=1.0)
    runtime = FailOpen(config)
    time.sleep(0.3)  # the member exists for a while before it leads
    try:
        runtime.start()
        assert wait_for(lambda: bool(runtime.fleet and runtime.fleet.leader))
        assert runtime.fleet is not None and runtime.fleet.leader_since is not None
        code, out, _ = run(capsys, "fleet", "--store", redis_server.url, "--json")
        from failopen.engine.flag import rfc3339

        assert json.loads(out)["leader"]["since"] == rfc3339(runtime.fleet.leader_since)
    finally:
        runtime.stop()
