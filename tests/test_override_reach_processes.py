"""Where an override arrived, across real member processes (tests/fleet_member.py) and a real
redis-server killed and restarted empty: "reached 3 of 3 processes", the override back after
the restart with its own expiry, a lift that stays lifted, a killed or frozen member not passed
off as reached."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _fleet_kit import Member, Members, member_env
from _redis_kit import RedisServer, wait_for

from failopen.stores.redis import parse_override
from failopen.testing import FakeStatusPage, FakeVerifyAPI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LEASE = 1.5  # members beat every half second (a third of the lease)
REFRESH = 0.1
KEY = "failopen:override"


@pytest.fixture
def members(
    redis_server: RedisServer, fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[int], list[Member]]]:
    fleet = Members(member_env(redis_server.url, fake_status_page.url,
                               fake_verify_api.verify_url, fake_verify_api.private_key,
                               refresh=REFRESH, lease=LEASE), tmp_path)
    # The operator's command: this deployment's store and status page.
    monkeypatch.setenv("FAILOPEN_STORE", redis_server.url)
    monkeypatch.setenv("FAILOPEN_STATUS_URL", fake_status_page.url)

    def start(n: int) -> list[Member]:
        made = fleet.start(n)
        assert wait_for(lambda: len(redis_server.client().keys("failopen:proc:*")) == len(
            [m for m in fleet.started if m.proc.poll() is None]), timeout=30)
        return made

    yield start
    fleet.stop()


def restart_empty(redis_server: RedisServer) -> None:
    redis_server.kill()
    redis_server.start()


def test_reached_then_survives_a_restart_and_a_lift_stays_lifted(
    members: Callable[[int], list[Member]], redis_server: RedisServer, run: Any
) -> None:
    fleet = members(3)
    result = run("override", "off", "--ttl", "2m", "--reason", "INC-9", "--wait", "15s")
    assert result.code == 0, result.err
    assert "reached 3 of 3 processes" in result.out
    placed = redis_server.client().get(KEY)
    assert all(m.state()["source"] == "override" and not m.state()["enforce"] for m in fleet)

    restart_empty(redis_server)
    # The members put back the override they applied: the operator's, byte for byte.
    assert wait_for(lambda: redis_server.client().get(KEY) is not None)
    assert redis_server.client().get(KEY) == placed
    expires_at = parse_override(placed).expires_at  # type: ignore[union-attr]
    assert expires_at is not None
    assert redis_server.client().pttl(KEY) <= (expires_at - time.time()) * 1000 + 50
    assert wait_for(lambda: all(m.state()["store"] == "redis" for m in fleet))
    assert all(m.state()["source"] == "override" for m in fleet)

    result = run("override", "auto", "--wait", "15s")
    assert result.code == 0 and "reached 3 of 3 processes" in result.out
    restart_empty(redis_server)
    assert wait_for(lambda: redis_server.client().get("failopen:epoch") is not None)
    assert wait_for(lambda: all(m.state()["store"] == "redis" for m in fleet))
    time.sleep(10 * REFRESH)
    assert redis_server.client().get(KEY) is None
    assert all(m.state()["enforce"] and m.state()["source"] != "override" for m in fleet)
    assert all(m.state()["errors"] == 0 for m in fleet)


def test_a_killed_member_drops_out_and_a_frozen_one_is_not_reached(
    members: Callable[[int], list[Member]], redis_server: RedisServer, run: Any
) -> None:
    fleet = members(4)
    killed, frozen, *alive = fleet
    killed.kill()
    # Its heartbeat key lingers for a minute; two missed beats (and a second) count it out.
    time.sleep(2 * LEASE / 3 + 1.5)
    result = run("override", "off", "--ttl", "2m", "--wait", "15s")
    assert result.code == 0 and "reached 3 of 3 processes" in result.out, result.out + result.err
    os.kill(frozen.proc.pid, signal.SIGSTOP)
    try:
        result = run("override", "auto", "--wait", "0.4s")
        # Frozen a moment ago, still live: the lift did not reach it, and the command says so.
        assert result.code == 0 and "reached 2 of 3 processes" in result.out, result.out
        assert "1 of 3 live processes had not applied it" in result.err
        restart_empty(redis_server)
        assert wait_for(lambda: redis_server.client().get("failopen:epoch") is not None)
    finally:
        os.kill(frozen.proc.pid, signal.SIGCONT)
    # The frozen member wakes up holding the lifted override: the fleet stays lifted.
    assert wait_for(lambda: frozen.state()["enforce"] and frozen.state()["store"] == "redis")
    time.sleep(10 * REFRESH)
    assert redis_server.client().get(KEY) is None
    assert all(m.state()["enforce"] for m in [frozen, *alive])
