"""The decision: every branch, shadow mode, single-flight confirmation, no unearned bypass."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from _redis_kit import wait_for

from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard import Decision, Guard, OutageConfirmer
from failopen.engine.watcher import StatusWatcher
from failopen.exceptions import StatusUnavailable
from failopen.providers.status import StatusReport
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.testing.clock import FakeClock


def report(status: str) -> StatusReport:
    return StatusReport(
        global_status=status, global_component=None, regions=(), fetched_at=0.0, source="components"
    )


class Source:
    def __init__(self, answer: StatusReport | Exception) -> None:
        self.answer = answer
        self.calls = 0
        self.gate: threading.Event | None = None
        self.fetching = threading.Event()

    def fetch(self) -> StatusReport:
        self.calls += 1
        self.fetching.set()
        if self.gate is not None:
            self.gate.wait(5)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Verifier:
    def __init__(self, outcome: VerifyOutcome, retry_after: float | None = None) -> None:
        self.result = VerifyResult(outcome, f"scripted {outcome.value}", retry_after=retry_after)
        self.tokens: list[str] = []

    def verify(self, token: str) -> VerifyResult:
        self.tokens.append(token)
        return self.result

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


def build(
    outcome: VerifyOutcome = VerifyOutcome.VALID,
    status: StatusReport | Exception | None = None,
    *,
    mode: str = "enforce",
    clock: FakeClock | None = None,
    retry_after: float | None = None,
    wait: float = 10.0,
) -> tuple[Guard, Source, Verifier]:
    clock = clock or FakeClock()
    flag = EnforcementFlag(clock=clock)
    source = Source(status if status is not None else report("operational"))
    watcher = StatusWatcher(source, flag, clock=clock)
    # A generous wait unless a test is about the bound: callers then see the check's result.
    confirmer = OutageConfirmer(source, watcher, ttl=10.0, clock=clock, wait=wait)
    verifier = Verifier(outcome, retry_after)
    guard = Guard(flag, verifier, confirmer, mode=mode)  # type: ignore[arg-type]
    return guard, source, verifier


def test_valid_token_is_admitted() -> None:
    guard, source, verifier = build(VerifyOutcome.VALID)
    decision = guard.decide("tok", path="/login")
    assert decision.allow and not decision.bypassed
    assert decision.outcome == "valid"
    assert verifier.tokens == ["tok"]
    assert source.calls == 0, "a working verify never touches the status page"


@pytest.mark.parametrize("token", [None, ""])
def test_missing_token_is_403_without_calling_the_vendor(token: str | None) -> None:
    guard, _, verifier = build()
    decision = guard.decide(token)
    assert (decision.allow, decision.status_code, decision.outcome) == (False, 403, "missing_token")
    assert verifier.tokens == []


@pytest.mark.parametrize("token", ["x" * 5000, "abc\x00def", "line\nbreak"])
def test_malformed_token_is_403_without_calling_the_vendor(token: str) -> None:
    guard, _, verifier = build()
    assert guard.decide(token).status_code == 403
    assert verifier.tokens == []


def test_invalid_token_is_403_even_during_an_outage_report() -> None:
    guard, source, _ = build(VerifyOutcome.INVALID, report("major_outage"))
    decision = guard.decide("tok")
    assert (decision.allow, decision.status_code) == (False, 403)
    assert source.calls == 0, "an invalid token is not a reason to look for an outage"
    assert guard.flag.enforce


def test_rate_limited_verify_never_bypasses() -> None:
    guard, source, _ = build(VerifyOutcome.RATE_LIMITED, report("major_outage"), retry_after=7)
    decision = guard.decide("tok")
    assert (decision.allow, decision.status_code, decision.retry_after) == (False, 503, 7)
    assert decision.outcome == "rate_limited"
    assert source.calls == 0
    assert guard.flag.enforce


def test_unavailable_verify_with_confirmed_outage_bypasses_and_flips_the_flag(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard, source, _ = build(VerifyOutcome.UNAVAILABLE, report("major_outage"))
    with caplog.at_level(logging.WARNING, logger="failopen.audit"):
        decision = guard.decide("tok", path="/login", client="198.51.100.9")
    assert decision.allow and decision.bypassed
    assert decision.outcome == "bypassed_confirmed_outage"
    assert guard.flag.state.enforce is False
    assert guard.flag.state.source == "confirmed"
    assert "path='/login' client='198.51.100.9'" in caplog.text
    # Once the flag is off, requests bypass without verifying or checking again.
    assert guard.decide(None).bypassed
    assert source.calls == 1


@pytest.mark.parametrize(
    "status",
    [
        report("operational"),
        report("degraded_performance"),
        report("mystery"),
        StatusUnavailable("status page down", status_code=500),
    ],
)
def test_unavailable_verify_without_confirmed_outage_is_503(
    status: StatusReport | Exception,
) -> None:
    guard, _, _ = build(VerifyOutcome.UNAVAILABLE, status)
    decision = guard.decide("tok")
    assert (decision.allow, decision.status_code, decision.outcome) == (False, 503, "cannot_verify")
    assert decision.retry_after == 5
    assert guard.flag.enforce


def test_flag_off_bypasses_without_verifying() -> None:
    guard, _, verifier = build(VerifyOutcome.INVALID)
    guard.flag.force_off("ops: vendor outage confirmed by phone")
    decision = guard.decide(None, path="/signup")
    assert decision.allow and decision.bypassed
    assert decision.outcome == "bypassed_flag_off"
    assert "override" in decision.reason
    assert verifier.tokens == []


def test_override_on_beats_a_confirmed_outage() -> None:
    guard, _, _ = build(VerifyOutcome.UNAVAILABLE, report("major_outage"))
    guard.flag.force_on("ops: never bypass today")
    decision = guard.decide("tok")
    assert (decision.allow, decision.status_code) == (False, 503)


def test_confirmation_is_cached_for_the_ttl() -> None:
    clock = FakeClock()
    guard, source, _ = build(VerifyOutcome.UNAVAILABLE, report("operational"), clock=clock)
    for _ in range(50):
        assert guard.decide("tok").status_code == 503
    assert source.calls == 1
    clock.advance(10.01)
    guard.decide("tok")
    assert source.calls == 2


def test_confirmation_is_single_flight_under_a_flood() -> None:
    """A flood of failing verifies makes one status request. While it is under way, one more
    caller waits for it and every other is refused at once (503, never admitted without the
    page's answer), so a slow page holds two threads, not all of them (issue 31, item 8);
    once it has confirmed the outage, all are admitted."""
    guard, source, _ = build(VerifyOutcome.UNAVAILABLE, report("major_outage"))
    confirmer = guard.confirmer
    assert confirmer is not None
    source.gate = threading.Event()
    with ThreadPoolExecutor(8) as pool:
        try:
            checking = pool.submit(guard.decide, "t")
            assert source.fetching.wait(10)
            waiting = pool.submit(guard.decide, "t")
            # (Before issue 31 there was no such place: every caller waited.)
            assert wait_for(lambda: not hasattr(confirmer, "_waiter")
                            or confirmer._waiter.locked())
            refused = [pool.submit(guard.decide, "t").result(10) for _ in range(48)]
        finally:
            source.gate.set()
        assert checking.result(10).allow and waiting.result(10).allow
    assert {(d.status_code, d.outcome) for d in refused} == {(503, "cannot_verify")}
    assert source.calls == 1
    assert [guard.decide("t").allow for _ in range(10)] == [True] * 10


def test_failed_confirmation_is_cached_too() -> None:
    guard, source, _ = build(VerifyOutcome.UNAVAILABLE, StatusUnavailable("down"))
    for _ in range(20):
        guard.decide("tok")
    assert source.calls == 1


def test_shadow_mode_logs_what_it_would_do_but_enforces(caplog: pytest.LogCaptureFixture) -> None:
    guard, _, verifier = build(VerifyOutcome.UNAVAILABLE, report("major_outage"), mode="shadow")
    with caplog.at_level(logging.WARNING, logger="failopen.audit"):
        decision = guard.decide("tok", path="/login")
    assert not decision.allow and decision.status_code == 503
    assert "shadow: would bypass" in caplog.text
    # The flag is off now; shadow mode still verifies every token.
    assert guard.flag.enforce is False
    verifier.result = VerifyResult(VerifyOutcome.INVALID, "bad")
    assert guard.decide("tok").status_code == 403
    verifier.result = VerifyResult(VerifyOutcome.VALID, "ok")
    valid = guard.decide("tok")
    assert valid.allow and not valid.bypassed and valid.shadow
    assert guard.decide(None).status_code == 403


def test_internal_error_refuses_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    guard, _, verifier = build()

    def explode(token: str) -> VerifyResult:
        raise RuntimeError("bug")

    verifier.verify = explode  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR):
        decision = guard.decide("tok")
    assert (decision.allow, decision.status_code, decision.outcome) == (
        False,
        503,
        "internal_error",
    )
    assert "bug" in caplog.text


def test_counts_every_outcome() -> None:
    guard, _, verifier = build(VerifyOutcome.VALID)
    guard.decide("a")
    guard.decide("b")
    guard.decide(None)
    assert guard.counts() == {"valid": 2, "missing_token": 1}


@pytest.mark.anyio
async def test_async_twin_matches() -> None:
    guard, source, _ = build(VerifyOutcome.UNAVAILABLE, report("major_outage"))
    decision = await guard.adecide("tok", path="/login")
    assert decision.bypassed and decision.outcome == "bypassed_confirmed_outage"
    assert source.calls == 1
    guard2, _, _ = build(VerifyOutcome.INVALID)
    assert (await guard2.adecide("tok")).status_code == 403
    assert (await guard2.adecide(None)).outcome == "missing_token"


def test_cached_confirmation_never_outlives_a_recovery() -> None:
    guard, source, _ = build(VerifyOutcome.UNAVAILABLE, report("major_outage"))
    assert guard.decide("tok").bypassed
    watcher = guard.confirmer._watcher  # type: ignore[union-attr]
    source.answer = report("operational")
    watcher.poll_once()
    watcher.poll_once()
    assert guard.flag.enforce
    # Still inside the confirmation TTL: the cache must not resurrect the outage.
    decision = guard.decide("tok")
    assert (decision.allow, decision.status_code) == (False, 503)


@pytest.mark.parametrize("token", [123, ["a"], b"bytes"])
def test_a_token_that_is_not_a_string_is_malformed_not_a_crash(
    token: object, caplog: pytest.LogCaptureFixture
) -> None:
    guard, _, verifier = build()
    with caplog.at_level(logging.ERROR):
        decision = guard.decide(token)  # type: ignore[arg-type]
    assert (decision.status_code, decision.outcome) == (403, "invalid_token")
    assert verifier.tokens == []
    assert "Traceback" not in caplog.text


def test_audit_lines_cannot_be_forged_through_the_path(caplog: pytest.LogCaptureFixture) -> None:
    guard, _, _ = build()
    guard.flag.force_off("ops")
    forged = "/login\n2030-01-01 failopen.audit WARNING bypass path=/admin"
    with caplog.at_level(logging.WARNING, logger="failopen.audit"):
        guard.decide(None, path=forged, client="10.0.0.1\r\nx")
    (record,) = [r for r in caplog.records if r.name == "failopen.audit"]
    assert "\n" not in record.getMessage() and "\r" not in record.getMessage()


@pytest.mark.parametrize(("hint", "allowed"), [(7.0, {7}), (float("inf"), {5, 3600}),
                                               (1e12, {3600}), (-3.0, {5}), (None, {5})])
def test_retry_after_from_the_vendor_is_clamped(hint: float | None, allowed: set[int]) -> None:
    guard, _, _ = build(VerifyOutcome.RATE_LIMITED, retry_after=hint)
    assert guard.decide("tok").retry_after in allowed


def test_outcomes_the_guard_does_not_know_are_refused_without_confirmation() -> None:
    guard, source, verifier = build(VerifyOutcome.VALID, report("major_outage"))
    verifier.result = VerifyResult("overloaded", "our own queue")  # type: ignore[arg-type]
    decision = guard.decide("tok")
    assert (decision.allow, decision.status_code, decision.outcome) == (False, 503, "cannot_verify")
    assert source.calls == 0
    assert guard.flag.enforce


def test_bypass_needs_no_token_while_the_flag_is_off(caplog: pytest.LogCaptureFixture) -> None:
    guard, source, verifier = build(VerifyOutcome.VALID)
    assert guard.bypass(path="/login") is None, "flag on: the token must be read and verified"
    assert guard.counts() == {}, "asking whether a bypass applies is not a decision"
    guard.flag.force_off("vendor down")
    with caplog.at_level(logging.WARNING, logger="failopen.audit"):
        decision = guard.bypass(path="/login", client="203.0.113.9")
    assert decision is not None and decision.bypassed and decision.outcome == "bypassed_flag_off"
    assert guard.counts() == {"bypassed_flag_off": 1}
    assert "'203.0.113.9'" in caplog.text, "a bypass is audited wherever it is decided"
    assert verifier.tokens == [] and source.calls == 0


def test_bypass_in_shadow_mode_defers_to_decide() -> None:
    guard, _, _ = build(VerifyOutcome.VALID, mode="shadow")
    guard.flag.force_off("vendor down")
    assert guard.bypass(path="/login") is None, "shadow mode enforces: the token is needed"


def test_bypass_that_fails_defers_to_decide(caplog: pytest.LogCaptureFixture) -> None:
    guard, _, _ = build(VerifyOutcome.VALID)

    class Broken:
        @property
        def state(self) -> None:
            raise RuntimeError("boom")

    guard.flag = Broken()  # type: ignore[assignment]
    assert guard.bypass(path="/login") is None
    assert "deciding with the token instead" in caplog.text


@pytest.mark.anyio
async def test_async_callers_share_one_pending_check_instead_of_a_thread_each() -> None:
    import asyncio

    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)
    source = Source(report("major_outage"))
    source.gate = threading.Event()
    watcher = StatusWatcher(source, flag, clock=clock)
    calls = 0

    class Counting(OutageConfirmer):
        def confirm(self) -> bool:
            nonlocal calls
            calls += 1
            return super().confirm()

    confirmer = Counting(source, watcher, ttl=10.0, clock=clock, wait=10.0)
    tasks = [asyncio.create_task(confirmer.aconfirm()) for _ in range(200)]
    await asyncio.sleep(0.05)
    tasks[0].cancel()  # one caller gone must not cancel the check the others wait for
    source.gate.set()
    results = await asyncio.gather(*tasks[1:])
    assert all(results), "the confirmed outage reaches every waiting caller"
    assert calls == 1, f"{calls} thread-pool jobs for one check"
    assert source.calls == 1


# --- a slow status page never holds every worker (issue 9, D16) -----------------------------------


def in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    return thread, out


def test_waiters_give_up_after_the_bound_and_answer_from_the_flag() -> None:
    guard, source, _ = build(VerifyOutcome.UNAVAILABLE, report("major_outage"), wait=0.01)
    source.gate = threading.Event()
    try:
        first, first_out = in_thread(lambda: guard.decide("t"))
        assert source.fetching.wait(5), "the first caller never began the check"
        # The check hangs (a slow status page): a flood of callers must not queue behind it.
        waiters = [in_thread(lambda: guard.decide("t")) for _ in range(20)]
        for thread, _ in waiters:
            thread.join(5)
            assert not thread.is_alive(), "a caller waited on the check past the bound"
        for _, out in waiters:
            [decision] = out
            assert isinstance(decision, Decision)
            assert (decision.outcome, decision.status_code) == ("cannot_verify", 503)
        assert source.calls == 1, "still one check in flight"
    finally:
        source.gate.set()
    first.join(5)
    [decision] = first_out
    assert isinstance(decision, Decision) and decision.outcome == "bypassed_confirmed_outage"
    assert guard.decide("t").outcome == "bypassed_flag_off"
    assert source.calls == 1


@pytest.mark.anyio
async def test_async_latecomers_answer_from_the_flag_within_the_bound() -> None:
    import asyncio

    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)
    source = Source(report("major_outage"))
    source.gate = threading.Event()
    confirmer = OutageConfirmer(source, StatusWatcher(source, flag, clock=clock), ttl=10.0,
                                clock=clock, wait=0.01)
    first = asyncio.create_task(confirmer.aconfirm())
    try:
        while not source.fetching.is_set():
            await asyncio.sleep(0.001)
        late = await asyncio.wait_for(
            asyncio.gather(*(confirmer.aconfirm() for _ in range(50))), timeout=5
        )
        assert late == [False] * 50, "the flag as it is while the check runs"
    finally:
        source.gate.set()
    assert await first is True
    assert source.calls == 1
