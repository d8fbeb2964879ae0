"""Fleet members as real processes (tests/fleet_member.py), for the tests that run several."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from _redis_kit import wait_for

__all__ = ["Member", "Members", "member_env"]

HERE = Path(__file__).resolve().parent


class Member:
    """One fleet member process; ``state()`` is its latest JSON line, ``log()`` its stderr."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self.out = log.open("wb")
        self.err_path = log.with_suffix(".stderr")
        self.err = self.err_path.open("wb")
        self.proc = subprocess.Popen([sys.executable, str(HERE / "fleet_member.py")], env=env,
                                     stdout=self.out, stderr=self.err)

    def state(self) -> dict[str, Any]:
        lines = self.log_path.read_bytes().splitlines()
        for line in reversed(lines[-3:]):
            try:
                data: dict[str, Any] = json.loads(line)
                return data
            except ValueError:
                continue  # a line half-written
        return {}

    def log(self) -> str:
        """What the process logged so far (WARNING and above, one record a line)."""
        return self.err_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.out.close()
        self.err.close()


def member_env(store: str, status_url: str, verify_url: str, private_key: str, *,
               refresh: float, lease: float, **extra: str) -> dict[str, str]:
    """The environment of a member of one fleet: this process's own without any FAILOPEN_*, the
    fakes, ``/login`` protected, a fast poll, ``store`` with ``refresh`` and ``lease``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    env.update({
        "FAILOPEN_STATUS_URL": status_url, "FAILOPEN_VERIFY_URL": verify_url,
        "FAILOPEN_PRIVATE_KEY": private_key, "FAILOPEN_PROTECTED_PATHS": "/login",
        "FAILOPEN_POLL_INTERVAL": "0.2", "FAILOPEN_POLL_JITTER": "0",
        "FAILOPEN_STORE": store, "FAILOPEN_STORE_REFRESH": str(refresh),
        "FAILOPEN_FLEET_LEASE": str(lease), **extra,
    })
    return env


class Members:
    """Starts members with one environment, each logging under ``directory``; ``stop`` kills
    them all (a stopped one is woken first, so that it can be reaped)."""

    def __init__(self, env: dict[str, str], directory: Path) -> None:
        self.env, self.directory = env, directory
        self.started: list[Member] = []

    def start(self, n: int) -> list[Member]:
        made = [Member(self.env, self.directory / f"member-{len(self.started) + i}.jsonl")
                for i in range(n)]
        self.started.extend(made)
        assert wait_for(lambda: all(m.state() for m in made), timeout=30)
        return made

    def stop(self) -> None:
        for member in self.started:
            if member.proc.poll() is None:
                os.kill(member.proc.pid, signal.SIGCONT)
            member.kill()
