"""The example site under gunicorn ``--preload -w 2`` against the served fakes.

Both workers must admit token-less log-ins within about one poll interval of the fake status
page reporting ``major_outage``, and refuse them again after it recovers (``close_after`` = 2
good readings). ``X-Worker-Pid`` (set by the example's middleware) tells the workers apart.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from _serving import fakes_env, served

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

SITE = Path(__file__).resolve().parents[3] / "examples" / "django_site"
POLL = 0.2
# Request latency and scheduling on a loaded machine, on top of the poll interval itself.
SLACK = 0.5
WORKERS = 2



@pytest.fixture
def site(
    fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI, tmp_path: Path
) -> Iterator[str]:
    """The example under gunicorn; killed (its whole process group) whatever the test does."""
    port = free_port()
    # The outage rate limit off: this one client's batches until both workers open may pass the
    # default 20 admissions a minute on a loaded machine (a 429 read as flapping).
    env = fakes_env(fake_status_page, fake_verify_api, POLL_INTERVAL=str(POLL), POLL_JITTER="0",
                    OUTAGE_RATE="none")
    argv = [sys.executable, "-m", "gunicorn", "--preload", "-w", str(WORKERS),
            "-b", f"127.0.0.1:{port}", "--chdir", str(SITE), "--graceful-timeout", "2",
            "django_site.wsgi:application"]
    with served(argv, port=port, env=env, log_path=tmp_path / "gunicorn.log") as url:
        yield url

class Browser:
    """Log-in POSTs without an enforcement token, with the CSRF cookie and form token."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=5)
        page = self.client.get("/")
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert match, page.text
        self.csrf = match.group(1)
        assert 'data-failopen-flag-url="/failopen/flag"' in page.text

    def login(self) -> tuple[int, int, str, float, float]:
        """(worker pid, status, body, when sent, when answered): monotonic seconds."""
        sent = time.monotonic()
        response = self.client.post("/login/", data={"csrfmiddlewaretoken": self.csrf,
                                                     "username": "ann"})
        if response.status_code == 200:
            assert response.json()["bypassed"] is True
        return (int(response.headers["X-Worker-Pid"]), response.status_code, response.text,
                sent, time.monotonic())

    def close(self) -> None:
        self.client.close()


def until_both(browser: Browser, pool: ThreadPoolExecutor, status: int,
               timeout: float) -> dict[int, float]:
    """Concurrent log-ins until every worker answered ``status``; how soon each first did.

    Once a worker has answered ``status``, every request sent to it after that answer arrived
    must get ``status`` too: no flapping. (Requests of one batch run concurrently, so only the
    time a request was sent says whether the worker handled it after an earlier answer.)
    """
    started = time.monotonic()
    first: dict[int, float] = {}
    while len(first) < WORKERS:
        assert time.monotonic() - started < timeout, f"only {sorted(first)} answered {status}"
        batch = list(pool.map(lambda _: browser.login(), range(4)))
        for pid, got, _, _, received in batch:
            if got == status and received < first.get(pid, float("inf")):
                first[pid] = received
        for pid, got, text, sent, _ in batch:
            assert got == status or sent < first.get(pid, float("inf")), (
                f"worker {pid} went back to {got}: {text[:300]}")
    return {pid: at - started for pid, at in first.items()}


@pytest.mark.slow
def test_two_preloaded_workers_fail_open_on_an_outage_and_close_after(
    site: str, fake_status_page: FakeStatusPage
) -> None:
    browser = Browser(site)
    with ThreadPoolExecutor(4) as pool:
        try:
            # Both workers serve, and refuse: their watchers start on this first use.
            until_both(browser, pool, 403, timeout=20)
            time.sleep(POLL)  # each watcher has made its first reading (operational)
            fake_status_page.set_global("major_outage")
            opened = until_both(browser, pool, 200, timeout=10)
            assert max(opened.values()) <= POLL + SLACK, opened
            fake_status_page.set_global("operational")
            closed = until_both(browser, pool, 403, timeout=10)
            assert max(closed.values()) <= 2 * POLL + SLACK, closed
        finally:
            browser.close()
    print(f"\nfail-open after {opened}, closed after {closed} (s per worker pid)")
