"""The status watcher: hysteresis, failures that are never evidence, backoff, the thread, fork."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque

import pytest

from failopen._internal.redact import public_error
from failopen.engine.flag import EnforcementFlag, FlagState
from failopen.engine.watcher import StatusWatcher
from failopen.exceptions import StatusParseError, StatusUnavailable
from failopen.providers.status import Component, StatusReport
from failopen.testing.clock import FakeClock


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


# --- a bypass ends with its evidence (issue 9, B4 and B5) -------------------------------------


def errors() -> list[Exception]:
    """What a failing page answers: hangs, 5xx, and a Retry-After it would like us to honour."""
    return [
        StatusUnavailable("no complete answer within 5s"),
        StatusUnavailable("slow down", status_code=429, retry_after=3600.0),
        StatusUnavailable("down", status_code=503),
        StatusParseError("not JSON"),
    ]


@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])
def test_a_bypass_is_polled_every_interval_whatever_the_page_answers(fraction: float) -> None:
    source = ScriptedSource(report("major_outage"))
    watcher = make(source, jitter=0.1, random_fraction=lambda: fraction, backoff_max=300.0)
    watcher.poll_once()
    assert watcher.flag.enforce is False
    source.answers = deque(errors() * 3)
    for _ in range(10):
        result = watcher.poll_once()
        assert result.reading == "failed"
        assert result.next_delay <= 10.0, "backoff or Retry-After stretched the bypass"
        assert result.next_delay >= 9.0, "jitter stays within its fraction"


def test_backoff_resumes_once_enforcing() -> None:
    source = ScriptedSource(report("operational"))
    watcher = make(source, random_fraction=lambda: 1.0, backoff_max=300.0)
    watcher.poll_once()
    source.answers = deque([StatusUnavailable("slow down", status_code=429, retry_after=120.0),
                            StatusUnavailable("down", status_code=503)])
    assert watcher.poll_once().next_delay == 120.0, "enforcing: Retry-After is honoured"
    assert watcher.poll_once().next_delay == 40.0  # 10 * 2**2: backing off


class Timeline:
    """The status page over fake time: an outage, ten intervals of failures, then operational.

    A failed poll costs a whole status timeout; a good one a second.
    """

    def __init__(self, clock: FakeClock, *, errors_from: float, operational_from: float,
                 timeout: float) -> None:
        self.clock = clock
        self.errors_from, self.operational_from = errors_from, operational_from
        self.timeout = timeout
        self.failures = deque(errors())

    def fetch(self) -> StatusReport:
        now = self.clock.monotonic()
        if now < self.errors_from:
            self.clock.advance(1.0)
            return report("major_outage")
        if now < self.operational_from:
            self.clock.advance(self.timeout)
            self.failures.rotate(1)
            raise self.failures[0]
        self.clock.advance(1.0)
        return report("operational")


@pytest.mark.parametrize("close_after", [1, 2, 3])
@pytest.mark.parametrize("phase", [0.0, 0.5, 12.3, 29.99])
@pytest.mark.parametrize("fraction", [0.0, 1.0])
def test_enforcement_is_back_within_close_after_intervals_plus_one_timeout(
    close_after: int, phase: float, fraction: float
) -> None:
    """The watcher's own loop on a fake clock: after ten intervals of errors during an outage,
    the page reads operational at ``back``; enforcement must resume by
    ``back + close_after * interval + status timeout``."""
    clock = FakeClock()
    interval, timeout = 30.0, 5.0
    start = clock.monotonic()
    back = start + 5.0 + 10 * interval + phase
    page = Timeline(clock, errors_from=start + 5.0, operational_from=back, timeout=timeout)
    watcher = StatusWatcher(
        page, EnforcementFlag(clock=clock), poll_interval=interval, jitter=0.1,
        close_after=close_after, backoff_max=300.0, clock=clock,
        random_fraction=lambda: fraction,
    )
    resumed: list[float] = []

    def on_change(old: FlagState, new: FlagState) -> None:
        if new.enforce and not old.enforce:
            resumed.append(clock.monotonic())
            watcher._stop.set()

    watcher.flag.add_listener(on_change)
    watcher._on_poll = lambda result: (
        watcher._stop.set() if clock.monotonic() > back + 3600 else None  # a bound for a failure
    )
    watcher._loop()
    assert resumed, "enforcement never came back"
    assert resumed[-1] > back
    assert resumed[-1] <= back + close_after * interval + timeout, (
        f"enforcement resumed {resumed[-1] - back:g}s after the page recovered"
    )


def stale_bypass(clock: FakeClock, **kwargs: object) -> tuple[StatusWatcher, ScriptedSource]:
    """A watcher bypassing on a real outage reading, whose page then only fails."""
    source = ScriptedSource(report("major_outage"))
    options: dict[str, object] = {"stale_after": 30.0, "max_stale_bypass": 120.0}
    options.update(kwargs)
    watcher = make(source, clock=clock, **options)
    watcher.poll_once()
    assert watcher.flag.enforce is False
    source.answers = deque([StatusUnavailable("connection reset by peer")])
    return watcher, source


def fail_for(watcher: StatusWatcher, clock: FakeClock, seconds: float) -> None:
    """Failed polls every 10 s and ticks in between, for ``seconds`` of fake time."""
    end = clock.monotonic() + seconds
    while clock.monotonic() < end:
        step = min(10.0, end - clock.monotonic())
        clock.advance(step)
        watcher.poll_once()
        watcher.tick()


def test_a_bypass_without_a_good_reading_for_max_stale_bypass_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    watcher, source = stale_bypass(clock)
    with caplog.at_level(logging.INFO, logger="failopen"):
        fail_for(watcher, clock, 120.0)
        assert watcher.flag.state.stale is True
        assert watcher.flag.enforce is False, "stale, but not yet past the limit"
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        fail_for(watcher, clock, 0.5)
    state = watcher.flag.state
    assert state.enforce is True, "a bypass with no good reading for the limit must end"
    assert (state.source, state.stale) == ("watcher", True)
    assert "FAILOPEN_MAX_STALE_BYPASS" in state.reason
    assert state.global_status == "major_outage", "the last thing the page said"
    assert state.error is not None and "connection reset" in state.error
    errors_logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors_logged) == 1 and "MAX_STALE_BYPASS" in errors_logged[0].getMessage()
    # More failed polls are no evidence: enforcement stays on, and the log says it once.
    fail_for(watcher, clock, 600.0)
    assert watcher.flag.enforce is True
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1


def test_after_a_stale_bypass_ends_only_new_outage_readings_reopen_it() -> None:
    clock = FakeClock()
    source = ScriptedSource(report("major_outage"))
    watcher = make(source, clock=clock, stale_after=30.0, max_stale_bypass=120.0, open_after=2)
    for _ in range(5):  # a long outage: the streak is well past open_after
        watcher.poll_once()
    assert watcher.flag.enforce is False
    source.answers = deque([StatusUnavailable("reset")])
    fail_for(watcher, clock, 130.0)
    assert watcher.flag.enforce is True
    source.answers = deque([report("major_outage")])
    watcher.poll_once()
    assert watcher.flag.enforce is True, "the old streak counted: open_after needs new readings"
    assert watcher.flag.state.stale is False
    watcher.poll_once()
    assert watcher.flag.enforce is False


def test_a_confirmed_bypass_ends_at_the_stale_limit_too() -> None:
    clock = FakeClock()
    source = ScriptedSource(StatusUnavailable("reset"))
    watcher = make(source, clock=clock, stale_after=30.0, max_stale_bypass=120.0)
    watcher.observe(report("major_outage"), source="confirmed", started=clock.monotonic())
    assert (watcher.flag.enforce, watcher.flag.state.source) == (False, "confirmed")
    fail_for(watcher, clock, 121.0)
    assert watcher.flag.enforce is True


def test_the_stale_limit_never_touches_an_operators_override() -> None:
    clock = FakeClock()
    watcher, _ = stale_bypass(clock)
    watcher.flag.force_off("ops: vendor confirmed the outage by phone", ttl=7200.0)
    fail_for(watcher, clock, 1000.0)
    state = watcher.flag.state
    assert (state.enforce, state.source) == (False, "override")
    assert watcher.flag.automatic_state.enforce is True, "the watcher's own bypass did end"
    # And force_off with no status reading at all (a page unreadable from boot): never ended.
    clock2 = FakeClock()
    unreadable = make(ScriptedSource(StatusUnavailable("reset")), clock=clock2,
                      stale_after=30.0, max_stale_bypass=120.0)
    unreadable.flag.force_off("ops", ttl=7200.0)
    fail_for(unreadable, clock2, 1000.0)
    assert (unreadable.flag.state.enforce, unreadable.flag.state.source) == (False, "override")


def test_the_poll_error_is_shown_while_stale_without_secrets_and_bounded() -> None:
    clock = FakeClock()
    source = ScriptedSource(report("major_outage"))
    watcher = make(source, clock=clock, stale_after=30.0)
    watcher.poll_once()
    secret = (
        "proxy https://ops:hunter2@proxy.internal:3128/ refused; redirect to "
        "https://status.test/api?token=s3cr3t#frag\n" + "x" * 10_000
    )
    source.answers = deque([StatusUnavailable(secret)])
    result = watcher.poll_once()
    watcher.tick()
    assert watcher.flag.state.stale is False
    assert watcher.flag.state.error is None, "not stale: no error shown"
    clock.advance(31.0)
    watcher.tick()
    state = watcher.flag.state
    assert state.stale is True
    for shown in (state.error, state.to_dict()["error"], result.error):
        assert shown is not None
        assert "StatusUnavailable" in shown and "proxy.internal" in shown
        assert "hunter2" not in shown and "s3cr3t" not in shown and "ops:" not in shown
        assert "\n" not in shown
        assert len(shown) <= 300
    source.answers = deque([report("major_outage")])
    watcher.poll_once()
    assert watcher.flag.state.error is None
    assert watcher.flag.state.to_dict()["error"] is None


@pytest.mark.parametrize(("text", "shown"), [
    ("proxy https://ops:hunter2@proxy.internal:3128/ refused",
     "ValueError: proxy https://***@proxy.internal:3128/ refused"),
    ("x://a@b://c:d@e/f?tok=1#x", "ValueError: x://***@b://***@e/f?***"),
    ("URL: 'https://u:p@h'", "ValueError: URL: 'https://***@h'"),
    ("https://h/p?token=abc and\thttp://x:y@z", "ValueError: https://h/p?*** and http://***@z"),
    ("plain words, user@example.com: no URL", "ValueError: plain words, user@example.com: no URL"),
])
def test_public_error_removes_what_a_url_may_carry(text: str, shown: str) -> None:
    assert public_error(ValueError(text)) == shown
