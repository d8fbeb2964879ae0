"""Real multi-worker servers started while the status page reads ``major_outage``: the very first
token-less log-in on every worker is admitted (bypassed), as on workers that have been running
all along, and the page sees at most one status request per worker before those log-ins.

Polls are 30 s apart, so every status request a test sees is a worker's first turn. Before the
fix a fresh worker refused its first log-ins (403) until that first reading came.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from _redis_kit import RedisServer
from _serving import fakes_env, served

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
WORKERS = 2


def outage_env(page: FakeStatusPage, verify: FakeVerifyAPI, **settings: str) -> dict[str, str]:
    page.set_global("major_outage")
    # Many first log-ins from one client: the outage rate limit would cut them (tested alone).
    settings.setdefault("OUTAGE_RATE", "none")
    return fakes_env(page, verify, POLL_INTERVAL="30", POLL_JITTER="0", STATUS_TIMEOUT="5",
                     **settings)


def gunicorn(port: int) -> list[str]:
    """The Flask example under gunicorn, two sync workers, no --preload: each worker builds its
    runtime at import and starts its watcher on its first guarded request."""
    return [sys.executable, "-m", "gunicorn", "-w", str(WORKERS), "-k", "sync",
            "-b", f"127.0.0.1:{port}", "--graceful-timeout", "2",
            "--pythonpath", f"{ROOT / 'examples'},{HERE}", "_gunicorn_flask:app"]


@pytest.fixture
def gunicorn_site(fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI,
                  tmp_path: Path) -> Iterator[str]:
    port = free_port()
    with served(gunicorn(port), port=port, env=outage_env(fake_status_page, fake_verify_api),
                log_path=tmp_path / "gunicorn.log", ready_path="/health", cwd=tmp_path) as url:
        yield url


@pytest.fixture
def gunicorn_fleet_site(fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI,
                        redis_server: RedisServer, tmp_path: Path) -> Iterator[str]:
    """The same, both workers members of one fleet through a fresh (empty) Redis."""
    port = free_port()
    env = outage_env(fake_status_page, fake_verify_api, STORE=redis_server.url)
    with served(gunicorn(port), port=port, env=env, log_path=tmp_path / "gunicorn.log",
                ready_path="/health", cwd=tmp_path) as url:
        yield url


@pytest.fixture(params=["off", "on"])
def uvicorn_site(request: pytest.FixtureRequest, fake_status_page: FakeStatusPage,
                 fake_verify_api: FakeVerifyAPI, tmp_path: Path) -> Iterator[tuple[str, bool]]:
    """The Starlette example under ``uvicorn --workers 2`` (the async path: adecide), with the
    lifespan protocol off (the watcher starts on the first guarded request) and on (it starts
    with the worker, and its first reading races the first requests)."""
    port = free_port()
    env = outage_env(fake_status_page, fake_verify_api)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "examples"), str(HERE)])
    argv = [sys.executable, "-m", "uvicorn", "_uvicorn_asgi:app", "--workers", str(WORKERS),
            "--host", "127.0.0.1", "--port", str(port), "--app-dir", str(HERE),
            "--lifespan", request.param]
    with served(argv, port=port, env=env, log_path=tmp_path / "uvicorn.log",
                ready_path="/health", cwd=tmp_path) as url:
        yield url, request.param == "off"


def first_logins_on_every_worker(url: str, page: FakeStatusPage, *, polls: int = WORKERS,
                                 lazy: bool = True) -> None:
    if lazy:
        assert page.requests == 0, "no worker has read the page before its first guarded request"
    seen: dict[int, int] = {}
    with httpx.Client(base_url=url, timeout=10) as client, ThreadPoolExecutor(4) as pool:
        def login(_: int) -> tuple[int, httpx.Response]:
            response = client.post("/login", data={"username": "ann"},
                                   headers={"Accept": "application/json", "Connection": "close"})
            return int(response.headers["X-Worker-Pid"]), response

        for _ in range(50):
            for pid, response in pool.map(login, range(4)):
                assert response.status_code == 200, (pid, response.status_code, response.text)
                assert response.json()["bypassed"] is True, response.text
                seen[pid] = seen.get(pid, 0) + 1
            if len(seen) == WORKERS:
                break
    assert len(seen) == WORKERS, f"only workers {sorted(seen)} answered"
    assert page.requests <= polls, f"{page.requests} status requests for {WORKERS} workers"


@pytest.mark.slow
def test_gunicorn_workers_started_during_an_outage_admit_their_first_logins(
    gunicorn_site: str, fake_status_page: FakeStatusPage
) -> None:
    first_logins_on_every_worker(gunicorn_site, fake_status_page)


@pytest.mark.slow
def test_uvicorn_workers_started_during_an_outage_admit_their_first_logins(
    uvicorn_site: tuple[str, bool], fake_status_page: FakeStatusPage
) -> None:
    url, lazy = uvicorn_site
    first_logins_on_every_worker(url, fake_status_page, lazy=lazy)


@pytest.mark.slow
def test_a_gunicorn_fleet_started_during_an_outage_admits_every_workers_first_logins(
    gunicorn_fleet_site: str, fake_status_page: FakeStatusPage
) -> None:
    """A cold start of the whole fleet: one worker leads and reads the page, the other waits for
    its published reading; one status request in all."""
    first_logins_on_every_worker(gunicorn_fleet_site, fake_status_page, polls=1)
