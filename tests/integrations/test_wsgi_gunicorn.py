"""The Flask example under a real gunicorn (sync workers, ``--preload -w 2``) against the fakes.

The runtime is built once in the master (``--preload``); each worker starts its own watcher on
its first guarded request. Both workers must refuse token-less log-ins, admit them within about
one poll interval of the fake status page reporting ``major_outage``, and refuse them again after
it recovers. No answer may be a 5xx; a declared body over the cap is refused before it is sent.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from _serving import fakes_env, served

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

ROOT = Path(__file__).resolve().parents[2]
POLL = 0.2
SLACK = 0.5  # request latency and scheduling on a loaded machine, on top of the poll interval
WORKERS = 2


@pytest.fixture
def site(
    fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI, tmp_path: Path
) -> Iterator[str]:
    """The example under gunicorn; killed (its whole process group) whatever the test does."""
    port = free_port()
    # Load from one client: the outage rate limit would cut it (it has tests of its own).
    env = fakes_env(fake_status_page, fake_verify_api, POLL_INTERVAL=str(POLL), POLL_JITTER="0",
                    MAX_BODY_BYTES="65536", OUTAGE_RATE="none")
    argv = [sys.executable, "-m", "gunicorn", "--preload", "-w", str(WORKERS), "-k", "sync",
            "-b", f"127.0.0.1:{port}", "--graceful-timeout", "2",
            "--pythonpath", f"{ROOT / 'examples'},{Path(__file__).parent}", "_gunicorn_flask:app"]
    with served(argv, port=port, env=env, log_path=tmp_path / "gunicorn.log",
                ready_path="/health", cwd=tmp_path) as url:
        yield url

def login(client: httpx.Client) -> tuple[int, int, str, float, float]:
    """(worker pid, status, body, when sent, when answered) of a token-less log-in."""
    sent = time.monotonic()
    response = client.post("/login", data={"username": "ann"},
                           headers={"Accept": "application/json"})
    assert response.status_code in (200, 403), response.text  # never a 5xx
    if response.status_code == 200:
        assert response.json()["bypassed"] is True
    return (int(response.headers["X-Worker-Pid"]), response.status_code, response.text, sent,
            time.monotonic())


def until_both(client: httpx.Client, pool: ThreadPoolExecutor, status: int,
               timeout: float) -> dict[int, float]:
    """Concurrent log-ins until every worker answered ``status``; how soon each first did.
    A worker that answered ``status`` never answers otherwise to a request sent after that."""
    started = time.monotonic()
    first: dict[int, float] = {}
    while len(first) < WORKERS:
        assert time.monotonic() - started < timeout, f"only {sorted(first)} answered {status}"
        batch = list(pool.map(lambda _: login(client), range(4)))
        for pid, got, _, _, received in batch:
            if got == status and received < first.get(pid, float("inf")):
                first[pid] = received
        for pid, got, text, sent, _ in batch:
            assert got == status or sent < first.get(pid, float("inf")), (
                f"worker {pid} went back to {got}: {text[:300]}")
    return {pid: at - started for pid, at in first.items()}


@pytest.mark.slow
def test_two_preloaded_workers_fail_open_on_an_outage_and_close_after(
    site: str, fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI
) -> None:
    with httpx.Client(base_url=site, timeout=5) as client, ThreadPoolExecutor(4) as pool:
        page = client.get("/")
        assert 'data-failopen-flag-url="/failopen/flag"' in page.text
        admitted = client.post("/login", data={"username": "ann",
                                                "enforcement-token": fake_verify_api.GOOD})
        assert admitted.json()["decision"]["outcome"] == "valid"
        until_both(client, pool, 403, timeout=20)  # each worker's watcher starts here
        time.sleep(POLL)  # each watcher has made its first reading (operational)
        fake_status_page.set_global("major_outage")
        opened = until_both(client, pool, 200, timeout=10)
        assert max(opened.values()) <= POLL + SLACK, opened
        fake_status_page.set_global("operational")
        closed = until_both(client, pool, 403, timeout=10)
        assert max(closed.values()) <= 2 * POLL + SLACK, closed


@pytest.mark.slow
def test_a_declared_body_over_the_cap_is_refused_before_it_is_sent(site: str) -> None:
    host, port = site.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"POST /login HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/x-www-form-urlencoded\r\n"
                     b"Content-Length: 100000000\r\n\r\nenforcement-token=")
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert httpx.get(site + "/health", timeout=5).status_code == 200
