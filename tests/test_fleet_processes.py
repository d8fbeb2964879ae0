"""Fleet mode across real processes sharing a real Redis: kill -9 the leader, four processes and
one poller, overrides reaching every process and lapsing with every process stopped, Redis killed
and restarted, FLUSHALL, and gunicorn --preload with four workers sharing one poller."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from _fleet_kit import Member, Members, member_env
from _redis_kit import RedisServer, wait_for
from _serving import fakes_env, served

from failopen.cli.fleet import fleet_report
from failopen.engine.flag import EnforcementFlag
from failopen.stores import open_store
from failopen.stores.redis import RedisStore
from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

HERE = Path(__file__).resolve().parent
SITE = HERE.parent / "examples" / "django_site"
LEASE = 1.5
REFRESH = 0.1


@pytest.fixture
def members(
    redis_server: RedisServer, fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI,
    tmp_path: Path,
) -> Iterator[Callable[[int], list[Member]]]:
    fleet = Members(member_env(redis_server.url, fake_status_page.url,
                               fake_verify_api.verify_url, fake_verify_api.private_key,
                               refresh=REFRESH, lease=LEASE), tmp_path)
    yield fleet.start
    fleet.stop()


def leaders(members: list[Member]) -> list[Member]:
    return [m for m in members if m.state().get("leader")]


def test_four_processes_one_poller(
    members: Callable[[int], list[Member]], fake_status_page: FakeStatusPage
) -> None:
    fleet = members(4)
    assert wait_for(lambda: len(leaders(fleet)) == 1)
    (leader,) = leaders(fleet)
    assert wait_for(lambda: leader.state()["polls"] >= 10)
    followers = [m for m in fleet if m is not leader]
    assert [m.state()["polls"] for m in followers] == [0, 0, 0]
    # The status page saw the leader's polls and nobody else's.
    polls = leader.state()["polls"]
    assert polls <= fake_status_page.requests <= polls + 1  # + 1: a poll under way
    fake_status_page.set_global("major_outage")
    assert wait_for(lambda: all(not m.state()["enforce"] for m in fleet))
    fake_status_page.set_global("operational")
    assert wait_for(lambda: all(m.state()["enforce"] for m in fleet))
    assert all(m.state()["off_thread"] == 0 and m.state()["errors"] == 0 for m in fleet)


def test_kill_9_the_leader_and_another_leads_within_one_lease(
    members: Callable[[int], list[Member]]
) -> None:
    fleet = members(3)
    assert wait_for(lambda: len(leaders(fleet)) == 1)
    (old,) = leaders(fleet)
    killed_at = time.time()
    old.kill()
    rest = [m for m in fleet if m is not old]
    assert wait_for(lambda: len(leaders(rest)) == 1)
    took = leaders(rest)[0].state()["leader_since"] - killed_at
    # The lease was renewed at most a third of it before the kill; a sync finds it lapsed.
    assert took <= LEASE + 2 * REFRESH + 0.5, took
    print(f"\nnew leader {took:.2f}s after kill -9 (lease {LEASE}s)")


def test_override_reaches_every_process_and_lapses_with_all_stopped(
    members: Callable[[int], list[Member]], redis_server: RedisServer
) -> None:
    fleet = members(3)
    EnforcementFlag(store=open_store(redis_server.url)).force_off("INC-11", ttl=1.5)
    assert wait_for(lambda: all(m.state()["source"] == "override" for m in fleet))
    assert all(not m.state()["enforce"] for m in fleet)
    for member in fleet:
        member.kill()
    assert wait_for(lambda: redis_server.client().exists("failopen:override") == 0)
    (late,) = members(1)
    assert wait_for(lambda: late.state()["source"] == "watcher")
    assert late.state()["enforce"] is True


def test_redis_killed_and_restarted_then_flushed(
    members: Callable[[int], list[Member]], redis_server: RedisServer
) -> None:
    fleet = members(3)
    EnforcementFlag(store=open_store(redis_server.url)).force_on("drill", ttl=300)
    assert wait_for(lambda: all(m.state()["reason"] == "drill" for m in fleet))
    redis_server.kill()
    assert wait_for(lambda: all(m.state()["store"] == "local" for m in fleet))
    polls = [m.state()["polls"] for m in fleet]
    assert wait_for(lambda: all(m.state()["polls"] > p for m, p in zip(fleet, polls, strict=True)))
    assert all(m.state()["reason"] == "drill" for m in fleet)
    redis_server.start()
    assert wait_for(lambda: all(m.state()["store"] == "redis" for m in fleet))
    assert wait_for(lambda: len(leaders(fleet)) == 1)
    # The restarted server came back empty: the override was put back by the first to notice.
    assert all(m.state()["reason"] == "drill" for m in fleet)
    redis_server.client().flushall()
    time.sleep(5 * REFRESH)
    assert wait_for(lambda: len(leaders(fleet)) == 1)
    assert all(m.state()["reason"] == "drill" for m in fleet)
    assert redis_server.client().get("failopen:override") is not None
    for member in fleet:
        state = member.state()
        assert state["errors"] == 0 and state["decisions"] > 0 and state["off_thread"] == 0


@pytest.fixture
def gunicorn_site(
    fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI, redis_server: RedisServer,
    tmp_path: Path,
) -> Iterator[str]:
    port = free_port()
    env = fakes_env(fake_status_page, fake_verify_api, POLL_INTERVAL="0.2", POLL_JITTER="0",
                    STORE=redis_server.url, STORE_REFRESH=str(REFRESH), FLEET_LEASE=str(LEASE))
    argv = [sys.executable, "-m", "gunicorn", "--preload", "-w", "4", "-b", f"127.0.0.1:{port}",
            "--chdir", str(SITE), "--graceful-timeout", "2", "django_site.wsgi:application"]
    with served(argv, port=port, env=env, log_path=tmp_path / "gunicorn.log") as url:
        yield url

def test_gunicorn_four_preloaded_workers_share_one_poller(
    gunicorn_site: str, redis_server: RedisServer, fake_status_page: FakeStatusPage
) -> None:
    store = open_store(redis_server.url)
    assert isinstance(store, RedisStore)
    pids: set[str] = set()
    with httpx.Client(base_url=gunicorn_site, timeout=5) as client:
        def every_worker_joined() -> bool:
            # Watchers start on a worker's first request: keep asking until all four answered.
            for _ in range(8):
                pids.add(client.get("/failopen/flag").headers["X-Worker-Pid"])
            return len(pids) == 4 and len(fleet_report(store)["processes"]) == 4

        assert wait_for(every_worker_joined, timeout=30)
        assert wait_for(lambda: sum(p["polls"] for p in fleet_report(store)["processes"]) >= 10)
        report = fleet_report(store)
        pollers = [p for p in report["processes"] if p["polls"]]
        assert len(pollers) == 1 and pollers[0]["leader"], report
        assert report["leader"]["id"] == pollers[0]["id"]
        assert {str(p["pid"]) for p in report["processes"]} == pids
        # An override placed anywhere reaches every worker.
        EnforcementFlag(store=store).force_off("INC-11", ttl=60)

        def all_bypass() -> bool:
            answers = {}
            for _ in range(16):
                response = client.get("/failopen/flag")
                answers[response.headers["X-Worker-Pid"]] = response.json()["enforce"]
            return len(answers) == 4 and not any(answers.values())

        assert wait_for(all_bypass, timeout=20)
    store.close()
