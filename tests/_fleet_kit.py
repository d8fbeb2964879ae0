"""Fleet members as real processes (tests/fleet_member.py), for the tests that run several."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["Member"]

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
