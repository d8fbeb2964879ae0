"""The status watcher: hysteresis, failures that are never evidence, backoff, the thread, fork."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque

import pytest

from failopen.exceptions import StatusParseError, StatusUnavailable
from failopen.flag import EnforcementFlag
from failopen.status import Component, StatusReport
from failopen.testing.clock import FakeClock
from failopen.watcher import StatusWatcher


def report(status: str, *, regions: dict[str, str] | None = None) -> StatusReport:
    comps = tuple(
        Component(
            id=f"r{i}",
            name=name,
            status=s,
            description=name,
            group=False,
            group_id=None,
            updated_at=None,
            known=True,
        )
        for i, (name, s) in enumerate((regions or {}).items())
    )
    return StatusReport(
        global_status=status,
        global_component=None,
        regions=comps,
        fetched_at=0.0,
        source="components",
    )


class ScriptedSource:
    """Answers with the next scripted report or raises the next scripted error."""

    def __init__(self, *answers: StatusReport | Exception) -> None:
        self.answers: deque[StatusReport | Exception] = deque(answers)
        self.calls = 0

    def push(self, *answers: StatusReport | Exception) -> None:
        self.answers.extend(answers)

    def fetch(self) -> StatusReport:
        self.calls += 1
        answer = self.answers.popleft() if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def make(source: ScriptedSource, clock: FakeClock | None = None, **kwargs: object) -> StatusWatcher:
    clock = clock or FakeClock()
    flag = EnforcementFlag(clock=clock)
    options: dict[str, object] = {
        "poll_interval": 10.0,
        "jitter": 0.0,
        "clock": clock,
        "random_fraction": lambda: 0.5,
    }
    options.update(kwargs)
    return StatusWatcher(source, flag, **options)  # type: ignore[arg-type]


def test_global_outage_bypasses_and_recovery_needs_two_operational_readings() -> None:
    source = ScriptedSource(report("operational"))
    watcher = make(source)
    watcher.poll_once()
    assert watcher.flag.state.enforce is True
    assert watcher.flag.state.source == "watcher"
    source.push(report("major_outage"))
    source.answers.popleft()
    watcher.poll_once()
    assert watcher.flag.state.enforce is False
    assert watcher.flag.state.global_status == "major_outage"
    source.answers = deque([report("operational")])
    watcher.poll_once()
    assert watcher.flag.state.enforce is False, "one operational reading is not enough"
    watcher.poll_once()
    assert watcher.flag.state.enforce is True


def test_open_after_requires_consecutive_impaired_readings() -> None:
    source = ScriptedSource(
        report("partial_outage"),
        report("operational"),
        report("partial_outage"),
        report("partial_outage"),
    )
    watcher = make(source, open_after=2)
    watcher.poll_once()
    assert watcher.flag.enforce
    watcher.poll_once()  # operational breaks the streak
    watcher.poll_once()
    assert watcher.flag.enforce
    watcher.poll_once()
    assert not watcher.flag.enforce


@pytest.mark.parametrize("status", ["degraded_performance", "under_maintenance", "on_fire"])
def test_statuses_outside_bypass_on_never_bypass(status: str) -> None:
    watcher = make(ScriptedSource(report(status)))
    for _ in range(5):
        watcher.poll_once()
    assert watcher.flag.state.enforce is True
    assert watcher.flag.state.global_status == status


def test_bypass_on_is_configurable() -> None:
    watcher = make(
        ScriptedSource(report("degraded_performance")),
        bypass_on=frozenset({"degraded_performance"}),
    )
    watcher.poll_once()
    assert watcher.flag.enforce is False


def test_regional_impairment_with_global_operational_never_bypasses(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = ScriptedSource(report("operational", regions={"eu-west-1": "major_outage"}))
    watcher = make(source)
    with caplog.at_level(logging.INFO, logger="failopen.watcher"):
        for _ in range(3):
            watcher.poll_once()
    assert watcher.flag.enforce is True
    assert "eu-west-1=major_outage" in caplog.text
    assert caplog.text.count("regional impairment") == 1, "logged on change, not every poll"


@pytest.mark.parametrize(
    "error",
    [
        StatusUnavailable("HTTP 500", status_code=500),
        StatusUnavailable("HTTP 429", status_code=429),
        StatusParseError("not JSON"),
        RuntimeError("bug in a transport"),
    ],
)
@pytest.mark.parametrize("start", ["operational", "major_outage"])
def test_failures_are_never_evidence(error: Exception, start: str) -> None:
    source = ScriptedSource(report(start))
    watcher = make(source)
    watcher.poll_once()
    before = watcher.flag.state.enforce
    source.answers = deque([error])
    for _ in range(5):
        result = watcher.poll_once()
        assert result.reading == "failed"
        assert result.error
    assert watcher.flag.state.enforce == before


def test_failures_back_off_exponentially_with_full_jitter_and_honour_retry_after() -> None:
    fractions = deque([1.0, 1.0, 1.0, 0.0])
    source = ScriptedSource(StatusUnavailable("down", status_code=503))
    watcher = make(source, random_fraction=lambda: fractions.popleft(), backoff_max=60.0)
    assert watcher.poll_once().next_delay == 20.0  # 10 * 2**1
    assert watcher.poll_once().next_delay == 40.0
    assert watcher.poll_once().next_delay == 60.0  # capped
    source.answers = deque([StatusUnavailable("slow down", status_code=429, retry_after=45.0)])
    assert watcher.poll_once().next_delay == 45.0  # jitter drew 0, Retry-After wins
    source.answers = deque([report("operational")])
    fractions.extend([0.5])
    assert watcher.poll_once().next_delay == 10.0, "back to the normal interval after success"


def test_interval_jitter_stays_within_bounds() -> None:
    for fraction, expected in ((0.0, 9.0), (1.0, 11.0)):
        watcher = make(
            ScriptedSource(report("operational")), jitter=0.1, random_fraction=lambda f=fraction: f
        )
        assert watcher.poll_once().next_delay == pytest.approx(expected)


def test_state_goes_stale_without_good_readings_and_recovers() -> None:
    clock = FakeClock()
    source = ScriptedSource(report("major_outage"))
    watcher = make(source, clock=clock, stale_after=30.0)
    watcher.poll_once()
    source.answers = deque([StatusUnavailable("down")])
    clock.advance(29)
    watcher.poll_once()
    watcher.tick()
    assert watcher.flag.state.stale is False
    clock.advance(2)
    watcher.tick()
    assert watcher.flag.state.stale is True
    assert watcher.flag.state.enforce is False, "stale keeps the last value"
    source.answers = deque([report("major_outage")])
    watcher.poll_once()
    assert watcher.flag.state.stale is False


def test_override_wins_over_readings() -> None:
    source = ScriptedSource(report("major_outage"))
    watcher = make(source)
    watcher.flag.force_on("ops")
    watcher.poll_once()
    assert watcher.flag.enforce is True
    watcher.flag.automatic()
    assert watcher.flag.enforce is False


def test_thread_polls_survives_errors_and_stops_at_once() -> None:
    source = ScriptedSource(RuntimeError("first poll explodes"), report("major_outage"))
    flag = EnforcementFlag()
    # After the good poll the thread would sleep a minute: only stop() can end that wait quickly.
    watcher = StatusWatcher(source, flag, poll_interval=60, jitter=0.0, backoff_max=0.02,
                            store_refresh=60)
    watcher.start()
    try:
        deadline = time.monotonic() + 5
        while flag.enforce and time.monotonic() < deadline:
            time.sleep(0.005)
        assert flag.enforce is False, "the poll after the failed one went through"
        assert source.calls == 2
        assert watcher.running
        assert any(t.name == "failopen.status-watcher" for t in threading.enumerate())
        thread = watcher._thread
        assert thread is not None
        time.sleep(0.05)  # let the thread reach its minute-long wait
    finally:
        started = time.monotonic()
        watcher.stop()
    assert time.monotonic() - started < 0.5, "stop() interrupts the sleep"
    assert not watcher.running
    assert not thread.is_alive()


def test_start_is_idempotent_and_ensure_running_restarts() -> None:
    watcher = StatusWatcher(
        ScriptedSource(report("operational")), EnforcementFlag(), poll_interval=60
    )
    try:
        watcher.start()
        first = watcher._thread
        watcher.start()
        assert watcher._thread is first
        watcher.stop()
        watcher.ensure_running()
        assert watcher.running and watcher._thread is not first
    finally:
        watcher.stop()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_has_a_live_watcher() -> None:
    source = ScriptedSource(report("operational"))
    watcher = StatusWatcher(source, EnforcementFlag(), poll_interval=0.01, jitter=0.0)
    watcher.start()
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # child: the parent's thread is gone; ours must be running and polling
            try:
                before = source.calls
                deadline = time.monotonic() + 5
                while source.calls < before + 3 and time.monotonic() < deadline:
                    time.sleep(0.005)
                ok = watcher.running and source.calls >= before + 3
                os.write(write_end, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write_end)
        verdict = os.read(read_end, 1)
        os.waitpid(pid, 0)
        assert verdict == b"1", "child has no polling watcher thread"
        assert watcher.running, "parent's watcher unaffected"
    finally:
        os.close(read_end)
        watcher.stop()


def test_confirmations_do_not_make_open_after_arrive_faster() -> None:
    source = ScriptedSource(report("major_outage"))
    watcher = make(source, open_after=3)
    watcher.poll_once()  # watcher streak 1
    for _ in range(5):  # request-driven confirmations, however many
        watcher.observe(report("major_outage"), source="confirmed")
    assert watcher.flag.enforce is True
    watcher.poll_once()  # watcher streak 2: one confirmation on top makes 3
    watcher.observe(report("major_outage"), source="confirmed")
    assert watcher.flag.enforce is False
    assert watcher.flag.state.source == "confirmed"


def test_an_older_reading_never_overwrites_a_newer_one() -> None:
    clock = FakeClock()
    source = ScriptedSource(report("operational"))
    watcher = make(source, clock=clock)
    slow_check_started = clock.monotonic()  # a confirmation begins, and is slow
    clock.advance(1)
    watcher.poll_once()  # a newer poll reads operational and is applied first
    result = watcher.observe(report("major_outage"), source="confirmed",
                             started=slow_check_started)
    assert result.error == "superseded by a newer reading"
    assert watcher.flag.enforce is True


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_that_dies_is_restarted_on_next_use(caplog: pytest.LogCaptureFixture) -> None:
    watcher = StatusWatcher(ScriptedSource(report("operational")), EnforcementFlag(),
                            poll_interval=60)

    def die() -> None:
        raise SystemExit  # escapes the per-poll guard, as only a BaseException can

    watcher.tick = die  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.ERROR, logger="failopen.watcher"):
            watcher.start()
            first = watcher._thread
            assert first is not None
            first.join(5)
        assert watcher._thread is None
        assert "ended unexpectedly" in caplog.text
        del watcher.tick
        watcher.ensure_running()
        assert watcher.running and watcher._thread is not first
    finally:
        watcher.stop()


def test_a_page_unreadable_from_boot_goes_stale() -> None:
    source = ScriptedSource(StatusUnavailable("wrong URL", status_code=404))
    flag = EnforcementFlag()
    watcher = StatusWatcher(source, flag, poll_interval=0.01, jitter=0.0, stale_after=0.05,
                            backoff_max=0.01, store_refresh=0.01)
    watcher.start()
    try:
        deadline = time.monotonic() + 5
        while not flag.state.stale and time.monotonic() < deadline:
            time.sleep(0.005)
        assert flag.state.stale is True
        assert flag.state.enforce is True
    finally:
        watcher.stop()
