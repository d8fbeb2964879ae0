"""Instructions per request, counted by callgrind: a ratio the machine's load does not move.

A benchmark that takes ``--instructions`` runs itself once per variant and route under
``valgrind --tool=callgrind`` in its ``--one VARIANT ROUTE --count N`` mode (build the app, warm
it up, answer N requests, exit), for N requests and for none: the difference, divided by N, is
what one request costs, start-up and warm-up cancelled. Wall-time ratios on a shared 2-core
machine move by several per cent between runs; these move by a few tenths of one.

Needs Debian's ``valgrind`` (``apt-get install valgrind``); without it the benchmarks say so and
print their wall-time tables only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["available", "per_request"]

_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def available() -> bool:
    """True when valgrind is installed."""
    return shutil.which("valgrind") is not None


def _collected(script: Path, args: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        # One hash seed for every run: set and dict layouts, and so the work, alike in each.
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
             sys.executable, str(script), *args],
            capture_output=True, text=True, env=env, check=False, timeout=1800,
        )
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run of {script.name} {' '.join(args)} failed "
                         f"({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return int(found[1])


def per_request(script: Path, variant: str, route: str, count: int) -> float:
    """Instructions one request costs: ``count`` requests' run minus a run of none."""
    args = ["--one", variant, route, "--count"]
    return (_collected(script, [*args, str(count)]) - _collected(script, [*args, "0"])) / count
