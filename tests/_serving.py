"""A real server process for end-to-end tests, pointed at the test kit's fakes.

Started in a session of its own, awaited until it answers, and killed (its whole process group:
gunicorn's workers too) whatever the test does. Its output goes to a file, not a pipe: nobody
reads it while the test runs, and a full pipe would block the workers on their next log line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from failopen.testing import FakeStatusPage, FakeVerifyAPI

__all__ = ["fakes_env", "served"]


def fakes_env(status_page: FakeStatusPage, verify_api: FakeVerifyAPI,
              **settings: str) -> dict[str, str]:
    """This process's environment without any FAILOPEN_ or DJANGO_ variable, plus the fakes'
    addresses and ``settings`` (``POLL_INTERVAL="0.2"`` sets FAILOPEN_POLL_INTERVAL)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAILOPEN_", "DJANGO_"))}
    env.update({
        "FAILOPEN_STATUS_URL": status_page.url,
        "FAILOPEN_VERIFY_URL": verify_api.verify_url,
        "FAILOPEN_PRIVATE_KEY": verify_api.private_key,
        "FAILOPEN_PUBLIC_KEY": "example-public-key",
    })
    env.update({f"FAILOPEN_{name}": value for name, value in settings.items()})
    return env


@contextmanager
def served(argv: Sequence[str], *, port: int, env: dict[str, str], log_path: Path,
           ready_path: str = "/", cwd: Path | None = None) -> Iterator[str]:
    """Run ``argv`` until the block ends; yields its URL once ``ready_path`` answers 200."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                assert proc.poll() is None, log_path.read_text()
                try:
                    if httpx.get(url + ready_path, timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"{argv[2:4]} did not come up"
                time.sleep(0.05)
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):  # it died on its own, group and all
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
