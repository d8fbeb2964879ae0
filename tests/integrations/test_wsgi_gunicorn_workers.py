"""Several gunicorn workers with the outage fallback counted in memory: one WARNING per worker,
from the server's own word (``wsgi.multiprocess``), which ``failopen check`` cannot see on a
command line (issue 31, item 10). One worker: nothing said. Real gunicorn, the Flask example."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from _serving import fakes_env, served

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SAID = "the server runs several worker processes (wsgi.multiprocess)"


def _log_of(workers: int, tmp_path: Path, fake_status_page: FakeStatusPage,
            fake_verify_api: FakeVerifyAPI, **settings: str) -> str:
    """gunicorn's output after a few requests, each worker's first among them."""
    port = free_port()
    env = fakes_env(fake_status_page, fake_verify_api, **settings)
    env.pop("WEB_CONCURRENCY", None)
    argv = [sys.executable, "-m", "gunicorn", "--preload", "-w", str(workers), "-k", "sync",
            "-b", f"127.0.0.1:{port}", "--graceful-timeout", "2",
            "--pythonpath", f"{ROOT / 'examples'},{Path(__file__).parent}", "_gunicorn_flask:app"]
    log = tmp_path / f"gunicorn-{workers}.log"
    with served(argv, port=port, env=env, log_path=log, ready_path="/health",
                cwd=tmp_path) as url:
        pids = set()
        # Sync workers take turns at the socket: new connections reach every worker soon.
        for _ in range(40):
            pids.add(httpx.get(url + "/health", timeout=5).headers["X-Worker-Pid"])
            if len(pids) == workers:
                break
        assert len(pids) == workers, pids
    return log.read_text()


def test_several_workers_counting_in_memory_are_told_once_each(
        tmp_path: Path, fake_status_page: FakeStatusPage,
        fake_verify_api: FakeVerifyAPI) -> None:
    text = _log_of(2, tmp_path, fake_status_page, fake_verify_api)
    lines = [line for line in text.splitlines() if SAID in line]
    assert len(lines) == 2, text  # one per worker, however many requests each answered
    assert "the outage rate limit is kept in each one's memory (no Redis store): during an " \
           "outage each worker admits its own 20/minute per client and route" in lines[0]
    assert "FAILOPEN_STORE=redis://" in lines[0]


def test_one_worker_is_told_nothing(tmp_path: Path, fake_status_page: FakeStatusPage,
                                    fake_verify_api: FakeVerifyAPI) -> None:
    text = _log_of(1, tmp_path, fake_status_page, fake_verify_api)
    assert SAID not in text, text


def test_nothing_kept_in_memory_is_nothing_to_tell(
        tmp_path: Path, fake_status_page: FakeStatusPage,
        fake_verify_api: FakeVerifyAPI) -> None:
    text = _log_of(2, tmp_path, fake_status_page, fake_verify_api, OUTAGE_RATE="none")
    assert SAID not in text, text
