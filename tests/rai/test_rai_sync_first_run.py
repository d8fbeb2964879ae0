"""``failopen rai sync`` killed during its *first* run resumes with the same command minus --since.

Issue 18, item 13: a first run killed with SIGKILL left a state file the next run refused
("the state file has no 'pk_...' yet") unless --since was given again, and left its spools
(``.part`` files) behind. Real processes, killed at several points of progress, then resumed
without --since; the output must be byte for byte that of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _hostile import FAILOPEN
from _sync_helpers import (
    KEY,
    SECRET,
    assert_exactly_once,
    output_size,
    partitions,
)

from failopen.testing._server import LoopbackServer
from failopen.testing.rai_emulator import RaiEmulator

pytestmark = pytest.mark.slow

SINCE = "2024-05-01T00:00:00Z"
UNTIL = "2024-06-01T00:00:00Z"
KEY2 = "pk_live_other"


@pytest.fixture
def emulator() -> RaiEmulator:
    # Long enough to be killed mid-way: a few hundred requests of 4 ms each, two keys.
    return RaiEmulator(client_secret=SECRET, public_keys=(KEY, KEY2), cohorts=30,
                       sessions_per_cohort=(30, 120), latency=0.004)  # fmt: skip


def command(state: Path, out: Path | str, *extra: str) -> list[str]:
    return [str(FAILOPEN), "rai", "sync", "--public-key", KEY, "--public-key", KEY2,
            "--state", str(state), "--out-dir", str(out), "--until", UNTIL, "--page-size", "25",
            "--parallel", "3", "--batch-records", "100", *extra]  # fmt: skip


def start(server: LoopbackServer, argv: list[str], log: Path,
          tmpdir: Path | None = None) -> subprocess.Popen[bytes]:  # fmt: skip
    env = {
        **os.environ,
        "FAILOPEN_RAI_BASE_URL": server.url,
        "FAILOPEN_RAI_CLIENT_ID": "test-client",
        "FAILOPEN_RAI_CLIENT_SECRET": SECRET,
    }
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    with open(log, "ab") as err:  # the child keeps its own copy
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)


def kill_when(run: subprocess.Popen[bytes], ready: Callable[[], bool]) -> bool:
    """SIGKILL ``run`` once ``ready()``; False when it finished first."""
    deadline = time.monotonic() + 60
    while run.poll() is None and not ready():
        assert time.monotonic() < deadline, "the run never reached the kill point"
        time.sleep(0.001)
    if run.poll() is not None:
        return False
    run.send_signal(signal.SIGKILL)
    run.wait(10)
    return True


def delivered(state: Path) -> int:
    try:
        keys = json.loads(state.read_text())["keys"]
    except (FileNotFoundError, ValueError):
        return 0
    return sum(len(entry["delivered"]) for entry in keys.values())


def spools(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".failopen-sync-*"))


def test_a_first_run_killed_at_several_points_resumes_without_since(
    server: LoopbackServer, emulator: RaiEmulator, tmp_path: Path
) -> None:
    whole, pieces = tmp_path / "whole", tmp_path / "pieces"
    whole.mkdir()
    pieces.mkdir()
    reference = start(server, command(tmp_path / "whole.json", whole, "--since", SINCE),
                      tmp_path / "whole.err")  # fmt: skip
    assert reference.wait(120) == 0, (tmp_path / "whole.err").read_text()
    total = output_size(whole)

    state, log = tmp_path / "pieces.json", tmp_path / "pieces.err"
    # Only the very first run is given --since; every later one is "the same command minus
    # --since". Kill points by progress, not time: as soon as the state file exists (nothing
    # delivered yet), while spools are being filled, after some cohorts are delivered, and
    # mid-way through the output.
    points: list[Callable[[], bool]] = [
        state.exists,
        lambda: bool(spools(pieces)),
        lambda: delivered(state) >= 8,
        lambda: output_size(pieces) >= 0.5 * total,
        lambda: output_size(pieces) >= 0.8 * total,
    ]
    kills = 0
    for n, ready in enumerate(points):
        extra = ("--since", SINCE) if n == 0 else ()
        run = start(server, command(state, pieces, *extra), log)
        if not kill_when(run, ready):
            assert run.returncode == 0, log.read_text()
            break
        kills += 1
        if n == 0:
            assert delivered(state) == 0  # killed before any cohort was delivered
    final = start(server, command(state, pieces), log)
    assert final.wait(120) == 0, log.read_text()
    assert kills >= 4, log.read_text()
    assert "give --since" not in log.read_text()
    assert spools(pieces) == [] and not list(tmp_path.glob(".pieces.json.*"))
    # Line for line in each partition: no gap, no duplicate (the run ids in the names differ).
    assert partitions(pieces) == partitions(whole)
    assert_exactly_once(pieces, emulator)


def test_a_killed_first_run_to_stdout_leaves_no_spools_after_the_next(
    server: LoopbackServer, emulator: RaiEmulator, tmp_path: Path
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    state, log = tmp_path / "state.json", tmp_path / "err"
    run = start(server, command(state, "-", "--since", SINCE), log, tmpdir=temp)
    assert kill_when(run, lambda: bool(spools(temp)))
    assert spools(temp)  # a killed run leaves its spools behind...
    final = start(server, command(state, "-"), log, tmpdir=temp)
    assert final.wait(120) == 0, log.read_text()
    assert spools(temp) == []  # ...and the next run on the same state removes them


def test_a_stale_state_temporary_is_removed_and_nothing_else(
    server: LoopbackServer, tmp_path: Path
) -> None:
    # A run killed while replacing the state leaves its temporary file beside it.
    out = tmp_path / "out"
    out.mkdir()
    state, log = tmp_path / "state.json", tmp_path / "err"
    stale = tmp_path / ".state.json.k3j_9x0a.tmp"
    stale.write_text('{"version": 1')
    kept = [
        tmp_path / ".state.json.backup01",
        tmp_path / ".state.json.k3j_9x0a",
        tmp_path / ".other.json.k3j_9x0a.tmp",
    ]  # not names a save of this state makes
    for path in kept:
        path.write_text("mine")
    run = start(server, command(state, out, "--since", SINCE, "--until", "2024-05-02T00:00:00Z"),
                log)  # fmt: skip
    assert run.wait(120) == 0, log.read_text()
    assert not stale.exists()
    assert all(path.read_text() == "mine" for path in kept)


def test_a_run_killed_before_its_state_exists_says_what_to_do(tmp_path: Path) -> None:
    # Nothing was done, so nothing can be resumed: the message says to give --since.
    state = tmp_path / "state.json"
    result = subprocess.run(command(state, tmp_path), capture_output=True, text=True,
                            env={**os.environ, "FAILOPEN_RAI_BASE_URL": "http://127.0.0.1:9",
                                 "FAILOPEN_RAI_CLIENT_ID": "c",
                                 "FAILOPEN_RAI_CLIENT_SECRET": SECRET},
                            timeout=60, check=False)  # fmt: skip
    assert result.returncode == 2
    assert "no state file yet" in result.stderr and "give --since" in result.stderr
    assert "[request_id" not in result.stderr  # it never reached the API
