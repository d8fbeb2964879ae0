"""Every field of every decision, from both twins: what an adapter answers and what is logged.

tests/test_guard.py proves the branches; this pins what each branch hands back (allow, bypassed,
outcome, reason, status, Retry-After) and the log records an operator's alerts match on
(``failopen.bypass``, ``failopen.shadow_bypass``, ``failopen.guard_error``), for ``decide`` and
``adecide`` alike: each twin keeps its own copy of the calls.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from failopen.engine.first_reading import FirstReading
from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard import Decision, Guard, OutageConfirmer
from failopen.engine.watcher import StatusWatcher
from failopen.observe.audit import BypassAudit
from failopen.observe.audit_file import AuditFile, hash_user_agent
from failopen.providers.status import StatusReport
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.testing.clock import FakeClock

V = VerifyOutcome
TWINS = ["decide", "adecide"]


class Page:
    """A status source that always reads the same global status."""

    def __init__(self, status: str) -> None:
        self.status = status
        self.calls = 0

    def fetch(self) -> StatusReport:
        self.calls += 1
        return StatusReport(global_status=self.status, global_component=None, regions=(),
                            fetched_at=0.0, source="components")


class Verifier:
    def __init__(self, result: VerifyResult) -> None:
        self.result = result
        self.tokens: list[str] = []

    def verify(self, token: str) -> VerifyResult:
        self.tokens.append(token)
        return self.result

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


def build(result: VerifyResult, *, status: str = "operational",
          mode: str = "enforce") -> Guard:
    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)
    page = Page(status)
    confirmer = OutageConfirmer(page, StatusWatcher(page, flag, clock=clock), ttl=10.0,
                                clock=clock, wait=10.0)
    guard = Guard(flag, Verifier(result), confirmer, mode=mode)  # type: ignore[arg-type]
    guard.page = page  # type: ignore[attr-defined]  # for the tests to count status checks
    return guard


async def ask(guard: Guard, twin: str, token: str | None = "tok", **kwargs: Any) -> Decision:
    if twin == "decide":
        return guard.decide(token, **kwargs)
    return await guard.adecide(token, **kwargs)


def fields(decision: Decision) -> tuple[object, ...]:
    return (decision.allow, decision.bypassed, decision.outcome, decision.reason,
            decision.status_code, decision.retry_after)


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize(("result", "expected"), [
    (VerifyResult(V.VALID, "solved"), (True, False, "valid", "token verified", 200, None)),
    (VerifyResult(V.INVALID, "challenge not solved", 200),
     (False, False, "invalid_token", "token rejected: challenge not solved", 403, None)),
    (VerifyResult(V.RATE_LIMITED, "429"),
     (False, False, "rate_limited", "verify call rate-limited", 503, 5)),
    (VerifyResult(V.RATE_LIMITED, "429", 429, 1.0),
     (False, False, "rate_limited", "verify call rate-limited", 503, 1)),
    (VerifyResult(V.RATE_LIMITED, "429", 429, 0.0),
     (False, False, "rate_limited", "verify call rate-limited", 503, 5)),
    (VerifyResult(V.RATE_LIMITED, "429", 429, 3600.0),
     (False, False, "rate_limited", "verify call rate-limited", 503, 3600)),
    (VerifyResult(V.UNAVAILABLE, "timeout"),
     (False, False, "cannot_verify", "cannot verify now (timeout); no outage confirmed", 503, 5)),
    (VerifyResult(V.OVERLOADED, "overloaded"),
     (False, False, "cannot_verify", "cannot verify now (overloaded); no outage confirmed", 503,
      5)),
])
async def test_each_verify_result_gives_its_decision(
    twin: str, result: VerifyResult, expected: tuple[object, ...],
) -> None:
    guard = build(result)
    assert fields(await ask(guard, twin, path="/login")) == expected
    assert guard.verifier.tokens == ["tok"]  # type: ignore[attr-defined]
    assert guard.flag.state.enforce is True
    # Only an unavailable verify asks the status page: anything else is the vendor's answer.
    expected_checks = 1 if result.outcome is V.UNAVAILABLE else 0
    assert guard.page.calls == expected_checks  # type: ignore[attr-defined]


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_a_confirmed_outage_admits_and_audits_the_request(
    twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    guard = build(VerifyResult(V.UNAVAILABLE, "timeout"), status="major_outage")
    with caplog.at_level(logging.INFO):
        decision = await ask(guard, twin, path="/login", client="203.0.113.9",
                             user_agent="UA/1", route="/login/")
    state = guard.flag.state
    assert fields(decision) == (
        True, True, "bypassed_confirmed_outage",
        f"verify unavailable (timeout); outage confirmed: {state.reason}", 200, None)
    assert state.enforce is False
    (bypass,) = events(caplog, "failopen.bypass")
    assert (bypass.path, bypass.client, bypass.route, bypass.policy, bypass.outcome) == (  # type: ignore[attr-defined]
        "/login", "203.0.113.9", "/login/", "open", "bypassed_confirmed_outage")
    assert guard.counts() == {"bypassed_confirmed_outage": 1}


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_flag_off_follows_the_routes_policy_and_audits_its_route(
    twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    guard = build(VerifyResult(V.VALID, "solved"))
    guard.flag.force_off("outage by phone", ttl=600)
    with caplog.at_level(logging.INFO):
        opened = await ask(guard, twin, None, path="/login", client="198.51.100.7",
                           user_agent="UA/2", route="/login/")
        closed = await ask(guard, twin, None, path="/reset", policy="closed")
        fallback = await ask(guard, twin, None, path="/signup", policy="fallback")
    assert fields(opened) == (True, True, "bypassed_flag_off",
                              "enforcement off (override): outage by phone", 200, None)
    (bypass,) = events(caplog, "failopen.bypass")
    assert (bypass.path, bypass.client, bypass.route) == (  # type: ignore[attr-defined]
        "/login", "198.51.100.7", "/login/")
    assert fields(closed) == (False, False, "outage_closed",
                              "enforcement off; this route is closed during an outage", 503, 5)
    assert (fallback.allow, fallback.outcome) == (False, "fallback_required")
    assert guard.verifier.tokens == []  # type: ignore[attr-defined]


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_shadow_mode_enforces_and_logs_what_it_would_have_done(
    twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    guard = build(VerifyResult(V.UNAVAILABLE, "timeout"), status="major_outage", mode="shadow")
    with caplog.at_level(logging.INFO):
        refused = await ask(guard, twin, path="/login", client="203.0.113.9")
    assert fields(refused) == (
        False, False, "cannot_verify",
        "shadow mode enforces: verify unavailable (timeout); outage confirmed: "
        f"{guard.flag.state.reason}", 503, 5)
    (would,) = events(caplog, "failopen.shadow_bypass")
    assert would.levelno == logging.WARNING and would.name == "failopen.audit"
    assert (would.path, would.client) == ("/login", "203.0.113.9")  # type: ignore[attr-defined]
    assert would.reason.startswith("verify unavailable (timeout)")  # type: ignore[attr-defined]
    assert would.getMessage().startswith(
        "shadow: would bypass path='/login' client='203.0.113.9' reason=verify unavailable")
    # The flag is off now: a valid token is admitted, marked shadow, the same in every field.
    guard.verifier.result = VerifyResult(V.VALID, "solved")  # type: ignore[attr-defined]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        valid = await ask(guard, twin, path="/login", client="c")
    assert fields(valid) == (True, False, "valid", "token verified", 200, None)
    assert valid.shadow is True
    (would,) = events(caplog, "failopen.shadow_bypass")
    assert would.reason == f"enforcement off: {guard.flag.state.reason}"  # type: ignore[attr-defined]
    guard.verifier.result = VerifyResult(V.RATE_LIMITED, "429", 429, 9.0)  # type: ignore[attr-defined]
    limited = await ask(guard, twin)
    assert (limited.status_code, limited.retry_after, limited.shadow) == (503, 9, True)


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_a_failure_inside_the_guard_is_logged_and_refused(
    twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    guard = build(VerifyResult(V.VALID, "solved"))
    guard.retry_after = 11
    guard.verifier = None  # type: ignore[assignment]  # a bug: the call itself fails
    with caplog.at_level(logging.INFO):
        decision = await ask(guard, twin)
    assert fields(decision) == (False, False, "internal_error", "failopen internal error", 503, 11)
    (error,) = events(caplog, "failopen.guard_error")
    assert (error.levelno, error.name) == (logging.ERROR, "failopen.guard")
    assert error.getMessage() == "failopen guard failed; refusing the request"
    assert error.exc_info is not None
    assert guard.counts() == {"internal_error": 1}


def test_bypass_answers_only_when_no_token_is_needed(caplog: pytest.LogCaptureFixture) -> None:
    guard = build(VerifyResult(V.VALID, "solved"))
    assert guard.bypass(path="/login") is None  # enforcing: decide with the token
    guard.flag.force_off("outage", ttl=600)
    with caplog.at_level(logging.INFO):
        decision = guard.bypass(path="/login", client="c", user_agent="UA", route="/login/")
    assert decision is not None and decision.outcome == "bypassed_flag_off"
    (bypass,) = events(caplog, "failopen.bypass")
    assert bypass.route == "/login/"  # type: ignore[attr-defined]
    # A fallback route without a solution in a header: it may be in the body.
    assert guard.bypass(path="/signup", policy="fallback") is None
    closed = guard.bypass(path="/reset", policy="closed")
    assert closed is not None and closed.outcome == "outage_closed"


def test_bypass_that_fails_logs_and_leaves_the_decision_to_decide(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = build(VerifyResult(V.VALID, "solved"))
    guard.flag = None  # type: ignore[assignment]  # a bug: reading the flag fails
    with caplog.at_level(logging.INFO):
        assert guard.bypass(path="/login") is None
    (error,) = events(caplog, "failopen.guard_error")
    assert error.levelno == logging.ERROR
    assert error.getMessage() == "failopen bypass check failed; deciding with the token instead"


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_a_refusal_and_an_admission_are_logged_with_their_fields(
    twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    guard = build(VerifyResult(V.INVALID, "challenge not solved", 200))
    with caplog.at_level(logging.DEBUG, logger="failopen.guard"):
        await ask(guard, twin, path="/login", client="c")
    (rejected,) = events(caplog, "failopen.rejected")
    assert rejected.levelno == logging.INFO
    assert rejected.getMessage() == \
        "reject path='/login' status=403 reason=token rejected: challenge not solved"
    assert (rejected.path, rejected.status_code, rejected.outcome, rejected.reason) == (  # type: ignore[attr-defined]
        "/login", 403, "invalid_token", "token rejected: challenge not solved")
    guard.verifier.result = VerifyResult(V.VALID, "solved")  # type: ignore[attr-defined]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="failopen.guard"):
        await ask(guard, twin, path="/login")
    (allowed,) = events(caplog, "failopen.allowed")
    assert allowed.getMessage() == "allow path='/login' reason=token verified"
    assert (allowed.path, allowed.outcome) == ("/login", "valid")  # type: ignore[attr-defined]


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_a_confirmed_outage_on_a_closed_route_refuses_and_logs_the_request(
    twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    guard = build(VerifyResult(V.UNAVAILABLE, "timeout"), status="major_outage")
    with caplog.at_level(logging.INFO, logger="failopen.guard"):
        decision = await ask(guard, twin, path="/reset", client="c", policy="closed")
    assert (decision.allow, decision.outcome, decision.status_code) == (False, "outage_closed", 503)
    (rejected,) = events(caplog, "failopen.rejected")
    assert (rejected.path, rejected.outcome) == ("/reset", "outage_closed")  # type: ignore[attr-defined]


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_a_bypass_without_route_or_user_agent_is_audited_under_its_path(
    twin: str, caplog: pytest.LogCaptureFixture, tmp_path: Path,
) -> None:
    clock = FakeClock()
    file = AuditFile(str(tmp_path / "audit.jsonl"), time_now=clock.time)
    guard = build(VerifyResult(V.VALID, "solved"))
    guard.audit = BypassAudit(file=file, clock=clock)
    guard.flag.force_off("outage", ttl=600)
    with caplog.at_level(logging.INFO):
        await ask(guard, twin, None, path="/login")
    file.close()
    (bypass,) = events(caplog, "failopen.bypass")
    assert (bypass.route, bypass.policy) == ("/login", "open")  # type: ignore[attr-defined]
    (line,) = [json.loads(text) for text in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert line["ua"] == hash_user_agent("")


class EndsTheFirstTurn(Verifier):
    """Refuses the token, and has the watcher's first turn turn enforcement off while the
    request waits for it (async: on the loop, deterministic; sync: from another thread)."""

    def __init__(self, guard: Guard) -> None:
        super().__init__(VerifyResult(V.INVALID, "challenge not solved", 200))
        self.guard = guard
        self.first = FirstReading(wait=5.0)
        guard.first_reading = self.first
        guard.verifier = self

    def first_turn(self) -> None:
        self.guard.flag.set_automatic(enforce=False, source="watcher", reason="major outage",
                                      global_status="major_outage")
        self.first.ended()

    def verify(self, token: str) -> VerifyResult:
        threading.Timer(0.05, self.first_turn).start()  # the watcher's thread
        return super().verify(token)

    async def averify(self, token: str) -> VerifyResult:
        asyncio.get_running_loop().call_soon(self.first_turn)  # runs while adecide waits
        return self.result


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_a_refusal_that_waited_for_the_first_reading_bypasses_as_any_other(
    twin: str, caplog: pytest.LogCaptureFixture, tmp_path: Path,
) -> None:
    # A fresh worker during an outage: its first refused request waits for the watcher's first
    # turn, which turns enforcement off; the request is then admitted, and audited, in full.
    clock = FakeClock()
    file = AuditFile(str(tmp_path / "audit.jsonl"), time_now=clock.time)
    guard = build(VerifyResult(V.VALID, "unused"))
    guard.audit = BypassAudit(file=file, clock=clock)
    EndsTheFirstTurn(guard)
    with caplog.at_level(logging.INFO):
        decision = await ask(guard, twin, path="/login", client="203.0.113.9",
                             user_agent="UA/3", route="/login/")
    file.close()
    assert fields(decision) == (True, True, "bypassed_flag_off",
                                "enforcement off (watcher): major outage", 200, None)
    (bypass,) = events(caplog, "failopen.bypass")
    assert (bypass.path, bypass.client, bypass.route, bypass.policy) == (  # type: ignore[attr-defined]
        "/login", "203.0.113.9", "/login/", "open")
    (line,) = [json.loads(text) for text in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert line["ua"] == hash_user_agent("UA/3")


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_a_closed_route_that_waited_for_the_first_reading_is_refused(twin: str) -> None:
    guard = build(VerifyResult(V.VALID, "unused"))
    EndsTheFirstTurn(guard)
    decision = await ask(guard, twin, path="/reset", policy="closed")
    assert (decision.allow, decision.outcome) == (False, "outage_closed")


def test_a_hint_beyond_an_hour_is_cut_to_an_hour() -> None:
    guard = build(VerifyResult(V.RATE_LIMITED, "429", 429, 5000.0))
    assert guard.decide("tok").retry_after == 3600


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_without_a_confirmer_an_unavailable_verify_never_bypasses(twin: str) -> None:
    # No way to confirm an outage: no evidence, so no bypass, whatever the verify call says.
    flag = EnforcementFlag(clock=FakeClock())
    guard = Guard(flag, Verifier(VerifyResult(V.UNAVAILABLE, "timeout")), None)
    decision = await ask(guard, twin, path="/login")
    assert fields(decision) == (
        False, False, "cannot_verify", "cannot verify now (timeout); no outage confirmed", 503, 5)
    assert flag.state.enforce is True


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_shadow_mode_while_enforcing_logs_nothing_and_marks_nothing(
    twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    guard = build(VerifyResult(V.VALID, "solved"), mode="shadow")
    with caplog.at_level(logging.INFO):
        decision = await ask(guard, twin, path="/login", client="c")
    assert fields(decision) == (True, False, "valid", "token verified", 200, None)
    assert decision.shadow is False
    assert events(caplog, "failopen.shadow_bypass") == []


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_shadow_mode_names_the_client_of_each_request_it_would_have_admitted(
    twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    guard = build(VerifyResult(V.VALID, "solved"), mode="shadow")
    guard.flag.force_off("outage", ttl=600)
    with caplog.at_level(logging.DEBUG):
        await ask(guard, twin, path="/login", client="198.51.100.7")
    (would,) = events(caplog, "failopen.shadow_bypass")
    assert (would.path, would.client) == ("/login", "198.51.100.7")  # type: ignore[attr-defined]
    (allowed,) = events(caplog, "failopen.allowed")
    assert allowed.reason == "token verified"  # type: ignore[attr-defined]


@pytest.mark.anyio
@pytest.mark.parametrize("twin", TWINS)
async def test_a_missing_or_unusable_token_is_refused_saying_which_and_logged(
    twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    guard = build(VerifyResult(V.VALID, "solved"))
    with caplog.at_level(logging.INFO, logger="failopen.guard"):
        missing = await ask(guard, twin, None, path="/login")
        malformed = await ask(guard, twin, "t" * 4097, path="/signup")
        longest = await ask(guard, twin, "t" * 4096, path="/login")
    assert fields(missing) == (False, False, "missing_token", "no enforcement token", 403, None)
    assert fields(malformed) == (
        False, False, "invalid_token", "malformed enforcement token", 403, None)
    assert longest.outcome == "valid"  # 4096 characters is the longest token verified
    assert guard.verifier.tokens == ["t" * 4096]  # type: ignore[attr-defined]
    assert [r.path for r in events(caplog, "failopen.rejected")] == ["/login", "/signup"]  # type: ignore[attr-defined]


def test_a_decision_as_json_has_the_documented_keys() -> None:
    decision = Decision(allow=False, bypassed=False, outcome="invalid_token", reason="r",
                        status_code=403, shadow=True)
    assert decision.to_dict() == {"allow": False, "bypassed": False, "outcome": "invalid_token",
                                  "reason": "r", "shadow": True}
