"""``failopen rai sync`` as a real process, killed with SIGKILL at random points, then resumed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _sync_helpers import (
    KEY,
    SECRET,
    assert_exactly_once,
    output_size,
    partitions,
    temporaries,
)

from failopen.testing._server import FakeRequest, LoopbackServer, Reply
from failopen.testing.rai_emulator import RaiEmulator

pytestmark = pytest.mark.slow

FAILOPEN = Path(sys.executable).with_name("failopen")
SINCE = "2024-05-01T00:00:00Z"
UNTIL = "2024-06-01T00:00:00Z"


@pytest.fixture
def emulator() -> RaiEmulator:
    # Long enough to be killed mid-way: ~250 requests of 4 ms each.
    return RaiEmulator(client_secret=SECRET, cohorts=40, sessions_per_cohort=(30, 150),
                       latency=0.004)  # fmt: skip


def start(server: LoopbackServer, state: Path, out: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "FAILOPEN_RAI_BASE_URL": server.url,
        "FAILOPEN_RAI_CLIENT_ID": "test-client",
        "FAILOPEN_RAI_CLIENT_SECRET": SECRET,
    }
    argv = [str(FAILOPEN), "rai", "sync", "--public-key", KEY, "--state", str(state),
            "--out-dir", str(out), "--since", SINCE, "--until", UNTIL, "--page-size", "25",
            "--parallel", "3", "--batch-records", "120"]  # fmt: skip
    with open(state.with_suffix(".err"), "ab") as err:  # the child keeps its own copy
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)


def errors(state: Path) -> str:
    return state.with_suffix(".err").read_text()


def test_kill_9_at_random_points_then_resume_gives_the_uninterrupted_output(
    server: LoopbackServer, emulator: RaiEmulator, tmp_path: Path
) -> None:
    whole, pieces = tmp_path / "whole", tmp_path / "pieces"
    whole.mkdir()
    pieces.mkdir()
    reference = start(server, tmp_path / "whole.json", whole)
    assert reference.wait(60) == 0, errors(tmp_path / "whole.json")
    total = output_size(whole)

    # Kill points by progress, not by time (the machine's speed varies): once the output holds a
    # random share of the whole, plus a random few milliseconds (mid-fetch, mid-append, mid-save).
    rng = random.Random(1414)
    state = tmp_path / "pieces.json"
    kills = 0
    for share in sorted(rng.uniform(0.02, 0.95) for _ in range(6)):
        run = start(server, state, pieces)
        while run.poll() is None and output_size(pieces) < share * total:
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.03))
        if run.poll() is not None:
            assert run.returncode == 0, errors(state)
            break
        run.send_signal(signal.SIGKILL)
        run.wait(10)
        kills += 1
    final = start(server, state, pieces)
    assert final.wait(60) == 0, errors(state)
    assert kills >= 3  # the run really was interrupted, several times
    assert not temporaries(pieces)
    # Line for line in each partition: no gap, no duplicate (the run ids in the names differ).
    assert partitions(pieces) == partitions(whole)
    assert_exactly_once(pieces, emulator)


def test_two_runs_at_once_one_refuses_and_the_state_is_intact(
    emulator: RaiEmulator, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    state = tmp_path / "state.json"
    # The service holds every answer until the second run is done: the first run holds the
    # lock for as long as that takes, however slowly a loaded machine starts the second.
    gate = threading.Event()

    def held(request: FakeRequest) -> Reply:
        gate.wait(60)
        return emulator.handler(request)

    with LoopbackServer(held) as server:
        first = start(server, state, out)
        try:
            lock = Path(str(state) + ".lock")
            deadline = time.monotonic() + 30
            while not (lock.exists() and lock.read_text()):  # the pid: the lock is held
                assert time.monotonic() < deadline and first.poll() is None
                time.sleep(0.01)
            second = start(server, state, out)
            assert second.wait(60) == 1
        finally:
            gate.set()
        assert first.wait(60) == 0
    assert "another failopen rai sync is running" in errors(state)
    assert_exactly_once(out, emulator)
