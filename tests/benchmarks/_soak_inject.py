"""Plays the soak's schedule on the running fleet, and records when each fault really began and
ended: the oracle judges by those times, not the planned ones (a command takes its time).

One thread, one action at a time, in order of planned time: an action that runs late delays the
next, and both are recorded as they happened.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from _soak_fleet import Fleet
from _soak_schedule import (
    LEADER_KILL,
    OVERRIDE_OFF_LAPSING,
    OVERRIDE_OFF_LIFTED,
    OVERRIDE_ON,
    REDIS_FLUSHALL,
    REDIS_KILL,
    REDIS_PAUSE,
    SENTINEL_FAILOVER,
    STATUS_500,
    STATUS_MALFORMED,
    STATUS_OUTAGE,
    STATUS_OVERSIZED,
    STATUS_REGIONAL,
    STATUS_TIMEOUT,
    VERIFY_429,
    VERIFY_DOWN,
    VERIFY_SLOW,
    WORKERS_RECYCLE,
    Fault,
)

__all__ = ["Injector"]

STATUS_FAULT = {STATUS_500: "500", STATUS_TIMEOUT: "timeout", STATUS_MALFORMED: "malformed",
                STATUS_OVERSIZED: "huge"}
VERIFY_FAULT = {VERIFY_DOWN: "503", VERIFY_SLOW: "slow_drip", VERIFY_429: "429"}
#: An override that is meant to be lifted still gets a TTL: should the lift fail, it lapses
#: (and the oracle is told when).
LIFT_MARGIN = 30


class Injector:
    """Runs the schedule against ``fleet``; ``applied`` is the faults as they happened."""

    def __init__(self, fleet: Fleet, schedule: list[Fault], now: Callable[[], float]) -> None:
        self.fleet = fleet
        self.schedule = schedule
        self.now = now
        self.applied: list[Fault] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-injector", daemon=True)
        self._started: dict[int, tuple[float, float, dict[str, str]]] = {}

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        actions: list[tuple[float, int, str]] = []
        for i, fault in enumerate(self.schedule):
            actions.append((fault.start, i, "start"))
            if fault.end > fault.start and fault.kind != OVERRIDE_OFF_LAPSING:
                actions.append((fault.end, i, "end"))
        actions.sort()
        for at, i, phase in actions:
            if self._stop.wait(max(0.0, at - self.now())):
                return
            fault = self.schedule[i]
            began = self.now()
            try:
                detail = self._act(fault, phase)
            except Exception as exc:  # the fault was not applied: say so; the oracle is told
                detail = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                self.errors.append(f"{began:7.1f}s {fault.kind} {phase}: {detail['error']}")
            done = self.now()
            if phase == "start":
                self._started[i] = (began, done, detail)
                if fault.end == fault.start or fault.kind == OVERRIDE_OFF_LAPSING:
                    self._record(i, began, done, None, None)
            else:
                self._record(i, *self._started.get(i, (began, began, {}))[:2], began, done,
                             extra=detail)

    def _record(self, i: int, began: float, settled: float, ending: float | None,
                done: float | None, extra: dict[str, str] | None = None) -> None:
        fault = self.schedule[i]
        detail = {**fault.detail, **self._started.get(i, (0, 0, {}))[2], **(extra or {})}
        if "error" in self._started.get(i, (0, 0, {}))[2]:
            return  # never applied: no evidence, nothing to judge it by
        if fault.kind == OVERRIDE_OFF_LAPSING:
            ttl = float(detail["ttl"])
            ending, done = began + ttl, settled + ttl
        elif fault.kind == SENTINEL_FAILOVER:
            # The window is the failover itself: from the kill until the sentinel named the new
            # primary (the restart of the killed server as a replica comes after it).
            settled = float(detail["killed_at"])
            ending = done = float(detail["promoted_at"])
        elif done is None:
            ending, done = began, settled
        assert ending is not None and done is not None
        if "lift_failed" in detail:
            ending, done = began + LIFT_MARGIN, settled + LIFT_MARGIN
        self.applied.append(replace(fault, start=began, end=done, settled_at=settled,
                                    ending_at=ending, detail=detail))

    def _act(self, fault: Fault, phase: str) -> dict[str, str]:
        fleet, kind, start = self.fleet, fault.kind, phase == "start"
        if kind == STATUS_OUTAGE:
            fleet.status(**{"global": "major_outage" if start else "operational"})
        elif kind == STATUS_REGIONAL:
            fleet.status(region=fault.detail["region"],
                         status="major_outage" if start else "operational")
        elif kind in STATUS_FAULT:
            fleet.status(fault=STATUS_FAULT[kind] if start else None)
        elif kind in VERIFY_FAULT:
            fleet.verify(VERIFY_FAULT[kind] if start else None)
        elif kind == REDIS_KILL:
            return fleet.redis_kill() if start else fleet.redis_restart()
        elif kind == REDIS_PAUSE:
            return fleet.redis_signal(signal.SIGSTOP if start else signal.SIGCONT)
        elif kind == SENTINEL_FAILOVER:
            return fleet.redis_failover(self.now)
        elif kind == REDIS_FLUSHALL:
            fleet.redis_flushall()
        elif kind == LEADER_KILL:
            return self._kill_leader()
        elif kind == WORKERS_RECYCLE:
            return {"app": ",".join(fleet.recycle())}
        elif kind in (OVERRIDE_OFF_LIFTED, OVERRIDE_ON, OVERRIDE_OFF_LAPSING):
            return self._override(fault, start)
        return {}

    def _kill_leader(self) -> dict[str, str]:
        found, how = None, "the leader key"
        deadline = self.now() + 3
        while found is None and self.now() < deadline:
            try:
                found = self.fleet.leader()
            except Exception:  # Redis paused or down: the process that last held the lease
                found, how = self.fleet.last_leader, "the last leader seen (Redis unreachable)"
                break
            if found is None:
                time.sleep(0.1)
        if found is None:
            raise RuntimeError("no process held the lease")
        app, pid = found
        os.kill(pid, signal.SIGKILL)
        return {"app": app, "pid": str(pid), "found_by": how}

    def _override(self, fault: Fault, start: bool) -> dict[str, str]:
        if not start:
            done = self.fleet.override("auto")
            if done.returncode != 0:
                self.errors.append(f"override auto failed: {done.stderr.strip()[:300]}")
                return {"lift_failed": done.stderr.strip()[:300]}
            return {}
        if fault.kind == OVERRIDE_ON:
            done = self.fleet.override("on", ttl=f"{int(fault.end - fault.start) + LIFT_MARGIN}s")
        elif fault.kind == OVERRIDE_OFF_LIFTED:
            done = self.fleet.override("off",
                                       ttl=f"{int(fault.end - fault.start) + LIFT_MARGIN}s")
        else:
            done = self.fleet.override("off", ttl=f"{fault.detail['ttl']}s")
        if done.returncode != 0:
            raise RuntimeError(f"override failed: {done.stderr.strip()[:300]}")
        return {}


def describe(fault: Fault) -> dict[str, Any]:
    """A fault as the JSON report shows it."""
    return {"kind": fault.kind, "start": round(fault.start, 2), "end": round(fault.end, 2),
            **({"detail": fault.detail} if fault.detail else {})}
