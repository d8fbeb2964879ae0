"""Two deployments on one redis-server and the default prefix (issue 18, item 1), as real processes.

The reproducer of the security finding: a laptop runs ``failopen emulate status`` set to
``major_outage`` with production's store URL. Production watches its own (operational) page and
must keep enforcing throughout, keep polling its own page, say once (an ERROR) what to change,
and ``failopen fleet`` must show the laptop's process as watching another page. The same for
verify probe results from a process that probes another verify URL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _fleet_kit import Member
from _redis_kit import RedisServer, wait_for

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LEASE = 1.5
REFRESH = 0.1
INTERVAL = 0.2
FAILOPEN = shutil.which("failopen", path=str(Path(sys.executable).parent))
FOREIGN_ERROR = "another deployment"


def failopen_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The ``failopen`` command as a user runs it."""
    assert FAILOPEN is not None, "the failopen console script is not installed in this venv"
    return subprocess.run([FAILOPEN, *argv], capture_output=True, text=True, timeout=30,
                          env=env if env is not None else clean_env())


def clean_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAILOPEN_", "DJANGO_"))}
    env.update({f"FAILOPEN_{name}": value for name, value in settings.items()})
    return env


@pytest.fixture
def emulated(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``failopen emulate status|verify --port N ...`` as a process of its own; its base URL."""
    running: list[subprocess.Popen[bytes]] = []
    logs: list[Any] = []

    def start(fake: str, *flags: str) -> str:
        assert FAILOPEN is not None
        port = free_port()
        log_path = tmp_path / f"emulate-{fake}-{port}.log"
        log = log_path.open("wb")
        logs.append(log)
        running.append(subprocess.Popen([FAILOPEN, "emulate", fake, "--port", str(port), *flags],
                                        stdout=log, stderr=subprocess.STDOUT,
                                        env=clean_env()))
        url = f"http://127.0.0.1:{port}"

        def answers() -> bool:
            try:
                return httpx.get(url + "/", timeout=1).status_code < 600
            except httpx.HTTPError:
                return False

        assert wait_for(answers, timeout=20), log_path.read_text()
        return url

    yield start
    for process in running:
        process.terminate()
        process.wait(10)
    for log in logs:
        log.close()


@pytest.fixture
def start_member(
    redis_server: RedisServer, fake_verify_api: FakeVerifyAPI, tmp_path: Path,
) -> Iterator[Callable[..., Member]]:
    """A fleet member process on the test's redis-server with the default prefix."""
    started: list[Member] = []

    def start(status_url: str, **settings: str) -> Member:
        env = clean_env(**{
            "STATUS_URL": status_url, "VERIFY_URL": fake_verify_api.verify_url,
            "PRIVATE_KEY": fake_verify_api.private_key, "PROTECTED_PATHS": "/login",
            "POLL_INTERVAL": str(INTERVAL), "POLL_JITTER": "0", "STORE": redis_server.url,
            "STORE_REFRESH": str(REFRESH), "FLEET_LEASE": str(LEASE), **settings})
        member = Member(env, tmp_path / f"member-{len(started)}.jsonl")
        started.append(member)
        assert wait_for(member.state, timeout=30), member.log()
        return member

    yield start
    for member in started:
        member.kill()


def foreign_errors(member: Member) -> list[str]:
    return [line for line in member.log().splitlines()
            if line.startswith("ERROR failopen.fleet:") and FOREIGN_ERROR in line]


def test_a_laptop_on_the_production_store_never_switches_production_off(
    emulated: Callable[..., str], start_member: Callable[..., Member],
    fake_status_page: FakeStatusPage, redis_server: RedisServer,
) -> None:
    # The laptop: a fake page set to major_outage through the CLI, and a member watching it.
    laptop_page = emulated("status")
    done = failopen_cli("emulate", "status", "--set", "global=major_outage", "--url", laptop_page)
    assert done.returncode == 0, done.stderr
    laptop = start_member(laptop_page)
    assert wait_for(lambda: laptop.state()["leader"] and not laptop.state()["enforce"])
    assert wait_for(lambda: redis_server.client().get("failopen:reading") is not None)

    # Production: its own page reads operational; it joins while the laptop holds the lease.
    production = [start_member(fake_status_page.url) for _ in range(2)]
    assert wait_for(lambda: all(m.state()["decisions"] > 100 for m in production))
    for member in production:
        state = member.state()
        assert state["turned_off"] == 0 and state["bypassed"] == 0, state
        assert state["enforce"] and state["source"] == "watcher", state
    # ... and it keeps polling its own page, one request per interval per process at most.
    started, before = time.monotonic(), [m.state()["polls"] for m in production]
    requests_before = fake_status_page.requests
    assert wait_for(lambda: all(m.state()["polls"] >= p + 5
                                for m, p in zip(production, before, strict=True)))
    elapsed = time.monotonic() - started
    polled = [m.state()["polls"] - p for m, p in zip(production, before, strict=True)]
    assert all(n <= elapsed / INTERVAL + 2 for n in polled), (polled, elapsed)
    print(f"\nunder the laptop's lease: {[round(n * INTERVAL / elapsed, 2) for n in polled]} "
          "status requests per interval per production process")
    assert fake_status_page.requests - requests_before >= sum(polled) - 2
    assert all(m.state()["foreign_leader"] == laptop.state()["id"] for m in production)
    assert laptop.state()["leader"] and not laptop.state()["enforce"]

    # The ERROR that says what to change: once, though every sync (20 a second) saw the laptop.
    for member in production:
        errors = foreign_errors(member)
        assert len(errors) == 1, member.log()
        assert "FAILOPEN_REDIS_PREFIX" in errors[0] and "'failopen:'" in errors[0]
        assert fake_status_page.url in errors[0]

    # ``failopen fleet``, run where production's settings are, shows the laptop's process.
    env = clean_env(STORE=redis_server.url, STATUS_URL=fake_status_page.url)
    done = failopen_cli("fleet", "--json", env=env)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    other = {p["id"]: p["other_page"] for p in report["processes"]}
    assert other == {laptop.state()["id"]: True,
                     **{m.state()["id"]: False for m in production}}, report
    assert report["leader"]["other_page"] is True and report["reading"]["other_page"] is True
    done = failopen_cli("fleet", env=env)
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith(f"  {laptop.state()['id']}")]
    assert "another status page" in line
    assert "FAILOPEN_REDIS_PREFIX" in done.stdout

    # The laptop goes away: production elects its own poller, and only that one polls.
    laptop.kill()
    assert wait_for(lambda: sum(m.state()["leader"] for m in production) == 1)
    follower = next(m for m in production if not m.state()["leader"])
    assert wait_for(lambda: follower.state()["foreign_leader"] is None)
    polls = follower.state()["polls"]
    time.sleep(5 * INTERVAL)
    assert follower.state()["polls"] <= polls + 1  # + 1: a poll under way at the hand-over
    for member in production:
        state = member.state()
        assert state["turned_off"] == 0 and state["bypassed"] == 0 and state["errors"] == 0
        assert state["off_thread"] == 0, state


def test_probe_results_of_another_verify_url_are_never_counted(
    emulated: Callable[..., str], start_member: Callable[..., Member],
    fake_status_page: FakeStatusPage,
) -> None:
    probing = {"EVIDENCE": "status,probe", "PROBE_INTERVAL": "0.3"}
    # Another deployment on the same status page whose verify API (its own fake) fails.
    broken_verify = emulated("verify", "--fault", "503")
    foreign = start_member(fake_status_page.url, VERIFY_URL=broken_verify + FakeVerifyAPI.path,
                           PRIVATE_KEY="test-private-key", **probing)
    assert wait_for(lambda: foreign.state()["leader"] and foreign.state()["probe_failed"] >= 2)

    production = [start_member(fake_status_page.url, **probing) for _ in range(2)]
    # Each counts some probe results within a few probe intervals: its own, or (before the fix)
    # the other deployment's failures.
    assert wait_for(lambda: all(m.state()["probe_healthy"] >= 3 or m.state()["probe_failed"]
                                for m in production))
    for member in production:
        state = member.state()
        assert state["probe_failed"] == 0, state
        assert state["probe_sent"] >= 3 and state["enforce"] and state["turned_off"] == 0
        assert state["foreign_leader"] == foreign.state()["id"]
        errors = foreign_errors(member)
        assert len(errors) == 1 and "verify" in errors[0], member.log()
