"""A hostile session-intelligence API for the rai tests: the emulator, except where it misbehaves.

:class:`EndlessPages` answers chosen list endpoints with a page and a fresh ``next_page_token``,
again and again, as a broken or malicious service could. After ``give_up`` pages it ends the
listing, only so that a client with no bound of its own finishes (and its test fails on the
request count) instead of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from failopen.testing._rai_requests import route
from failopen.testing._server import FakeRequest, Reply
from failopen.testing.rai_emulator import RaiEmulator

FAILOPEN = Path(sys.executable).with_name("failopen")


class EndlessPages:
    """The emulator, but ``endpoints`` (or one cohort's sessions) never reach a last page."""

    def __init__(
        self,
        emulator: RaiEmulator,
        endpoints: Collection[str],
        *,
        records: int = 0,
        cohort_id: str | None = None,
        give_up: int = 3000,
    ) -> None:
        self.emulator = emulator
        self.endpoints = frozenset(endpoints)
        self.records = records
        self.cohort_id = cohort_id
        self.give_up = give_up
        self.pages = 0  # endless pages served
        self._lock = threading.Lock()

    def handler(self, request: FakeRequest) -> Reply:
        """Answer one request (a LoopbackServer handler)."""
        endpoint, cohort_id = route(request.method, request.path)
        if endpoint not in self.endpoints or (
            self.cohort_id is not None and cohort_id != self.cohort_id
        ):
            return self.emulator.handler(request)
        with self._lock:
            self.pages += 1
            n = self.pages
        key = "cohorts" if endpoint == "list_cohorts" else "sessions"
        items = [self._record(key, n, i) for i in range(self.records)]
        token = f"endless-{n}" if n < self.give_up else ""
        body = {key: items, "next_page_token": token, "schema_version": "rai-v1"}
        return Reply.json(body)

    @staticmethod
    def _record(key: str, n: int, i: int) -> dict[str, Any]:
        if key == "cohorts":
            return {"cohort_id": f"coh_endless_{n}_{i}",
                    "cohort_window_start": "2024-05-01T00:00:01Z"}  # fmt: skip
        return {"session_id": f"ses_endless_{n}_{i}", "cohort_id": "coh_endless",
                "session_created": "2024-05-01T00:00:01Z"}  # fmt: skip


def run_cli(base_url: str, secret: str, *argv: str, timeout: float = 60,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``failopen ARGV`` as a user runs it: a real process, credentials in the environment."""
    environment = {**os.environ, "FAILOPEN_RAI_BASE_URL": base_url,
                   "FAILOPEN_RAI_CLIENT_ID": "test-client", "FAILOPEN_RAI_CLIENT_SECRET": secret,
                   **(env or {})}  # fmt: skip
    return subprocess.run([str(FAILOPEN), *argv], env=environment, capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip
