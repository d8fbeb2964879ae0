"""What the benchmarks that start real servers share: CPU pinning and per-process CPU time."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from failopen.testing import free_port

__all__ = ["cpu_seconds", "free_port", "pin"]


def pin(cpu: int) -> list[str]:
    """A ``taskset`` prefix that keeps a process on one core, so server and load do not share."""
    if (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
        return ["taskset", "-c", str(cpu)]
    return []


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
