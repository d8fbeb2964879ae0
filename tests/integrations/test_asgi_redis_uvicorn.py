"""End to end under uvicorn (issue 30, A4): while the fleet's Redis is frozen, a request waiting
on it during an outage does not hold the worker's other requests.

One uvicorn worker in fleet mode on a real redis-server, enforcement off by an override in the
store. The redis-server is stopped (SIGSTOP); a protected ``POST /login`` (an ``open`` route
under the outage rate limit in Redis) begins asking it; ``GET /health`` on the same worker must
then be answered while that request still waits, before the test thaws Redis (SIGCONT), after
which the log-in is admitted and counted in Redis. Made on the event loop (as before), the Redis
call held ``/health`` until the call's timeout, after which the log-in was counted in memory.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _redis_kit import RedisServer, wait_for
from _serving import fakes_env, served

from failopen.engine.flag import EnforcementFlag
from failopen.stores import open_store
from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
# Far beyond what thawing takes on a free loop; what the old code made /health wait.
TIMEOUT = 20.0


@pytest.fixture
def worker(redis_server: RedisServer, tmp_path: Path) -> Iterator[str]:
    EnforcementFlag(store=open_store(redis_server.url)).force_off("vendor outage", ttl=600)
    page, verify = FakeStatusPage(), FakeVerifyAPI()
    with page.serve(), verify.serve():
        yield from _serve(page, verify, redis_server, tmp_path)


def _serve(page: FakeStatusPage, verify: FakeVerifyAPI, redis_server: RedisServer,
           tmp_path: Path) -> Iterator[str]:
    env = fakes_env(page, verify, STORE=redis_server.url, PROTECTED_PATHS="/login",
                    OUTAGE_RATE="20/minute", POLL_INTERVAL="3600")
    env["REDIS_OUTAGE_TIMEOUT"] = str(TIMEOUT)
    env["PYTHONPATH"] = f"{HERE}:{env.get('PYTHONPATH', '')}"
    port = free_port()
    with served(
            [sys.executable, "-m", "uvicorn", "_uvicorn_redis_outage:app", "--host", "127.0.0.1",
             "--port", str(port), "--log-level", "warning"],
            port=port, env=env, log_path=tmp_path / "uvicorn.log", ready_path="/health") as url:
        # The watcher starts with the first request to failopen and reads the store's override.
        assert wait_for(lambda: httpx.get(url + "/failopen/flag", timeout=5).json()["source"]
                        == "override")
        yield url


def test_a_frozen_redis_holds_the_log_in_not_the_worker(
    worker: str, redis_server: RedisServer,
) -> None:
    process = redis_server.process
    assert process is not None
    answers: list[httpx.Response] = []
    login = threading.Thread(target=lambda: answers.append(
        httpx.post(worker + "/login", timeout=TIMEOUT * 2)))
    process.send_signal(signal.SIGSTOP)
    try:
        login.start()
        # Served by the same worker while the log-in waits on Redis (the loop is free).
        asked = False
        for _ in range(2000):  # bounded: a log-in that never asks must fail, not hang
            asked = httpx.get(worker + "/health", timeout=TIMEOUT * 2).json()["asked"]
            if asked:
                break
        still_waiting = login.is_alive()
    finally:
        process.send_signal(signal.SIGCONT)
    login.join(TIMEOUT * 2)
    assert asked, "the log-in never asked the outage rate limit"
    assert still_waiting, "/health was answered only once the log-in was done with Redis"
    assert [a.status_code for a in answers] == [200]
    # Counted in Redis, not in the worker's memory after a timeout.
    assert redis_server.client().keys("failopen:fallback:rate*")
