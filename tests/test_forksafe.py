"""A lock held by another thread when the process forks must not hang the child."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard import Guard, OutageConfirmer
from failopen.engine.watcher import StatusWatcher
from failopen.providers.status import StatusReport
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.stores.memory import MemoryStore

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork"),
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]


class Source:
    def fetch(self) -> StatusReport:
        return StatusReport(global_status="major_outage", global_component=None, regions=(),
                            fetched_at=0.0, source="components")


class Unavailable:
    def verify(self, token: str) -> VerifyResult:
        return VerifyResult(VerifyOutcome.UNAVAILABLE, "vendor down")

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


def _child_runs_while_lock_held(lock: threading.Lock, work: Callable[[], bool]) -> bool:
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(5)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            signal.alarm(5)  # a hang ends the child, and the parent reads no "1"
            os.write(write_end, b"1" if work() else b"0")
        finally:
            os._exit(0)
    release.set()
    thread.join()
    os.close(write_end)
    verdict = os.read(read_end, 1)
    os.close(read_end)
    os.waitpid(pid, 0)
    return verdict == b"1"


def _system() -> tuple[EnforcementFlag, Guard, OutageConfirmer]:
    flag = EnforcementFlag()
    watcher = StatusWatcher(Source(), flag)
    confirmer = OutageConfirmer(Source(), watcher)
    return flag, Guard(flag, Unavailable(), confirmer), confirmer


def test_flag_lock() -> None:
    flag, _, _ = _system()
    assert _child_runs_while_lock_held(
        flag._lock, lambda: not flag.force_off("child", ttl=60).enforce
    )


def test_confirmer_lock() -> None:
    _, guard, confirmer = _system()
    assert _child_runs_while_lock_held(confirmer._lock, lambda: guard.decide("tok").bypassed)


def test_guard_counter_lock() -> None:
    _, guard, _ = _system()
    assert _child_runs_while_lock_held(
        guard._counts_lock, lambda: guard.decide(None).status_code == 403
    )


def test_memory_store_lock() -> None:
    store = MemoryStore()
    flag = EnforcementFlag(store=store)
    assert _child_runs_while_lock_held(store._lock, lambda: not flag.force_off("x").enforce)


def test_outage_rate_limit_in_memory() -> None:
    # One lock guards the windows; a preloaded parent's lock must not hang a worker, which
    # counts afresh (its parent's client has used its one a minute, the child's has not).
    pytest.importorskip("limits", reason='pip install "failopen[fallback]"')
    from failopen.fallback import OutageRateLimit

    limit = OutageRateLimit("1/minute")
    assert limit.hit("192.0.2.1", "/signup") is None
    assert _child_runs_while_lock_held(limit.memory._lock,
                                       lambda: limit.hit("192.0.2.1", "/signup") is None)


def test_used_solutions_in_memory() -> None:
    from failopen.fallback import MemoryUsedSolutions

    used = MemoryUsedSolutions()
    assert _child_runs_while_lock_held(used._lock,
                                       lambda: used.claim("k", time.time() + 60))


def test_the_fallback_hand_off_pool() -> None:
    # The parent's pool has threads (and its lock held); the child's hand-off must not wait on
    # threads that did not survive the fork.
    import asyncio

    from failopen.fallback import handoff

    assert asyncio.run(handoff.off_loop(lambda: 1)) == 1  # the parent's threads exist
    assert _child_runs_while_lock_held(
        handoff._pool._lock, lambda: asyncio.run(handoff.off_loop(lambda: 2)) == 2)
