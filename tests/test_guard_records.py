"""What the guard leaves behind besides the decision: the audit line of a bypass, the probe's
count of verify results, and a refusal that never says "bypassed" when failopen itself failed.

Sync and async twins are both driven: each keeps its own copy of the calls, so each is pinned.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from failopen.engine.decision import fail_closed
from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard import Guard
from failopen.engine.outcome_window import OutcomeWindow
from failopen.observe.audit import BypassAudit
from failopen.observe.audit_file import AuditFile, hash_user_agent
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.testing.clock import FakeClock

AGENT = "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0"


class Verifier:
    """Answers every token with one scripted result, or raises (a bug in a verifier)."""

    def __init__(self, result: VerifyResult | Exception) -> None:
        self.result = result

    def verify(self, token: str) -> VerifyResult:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


def guard_with(result: VerifyResult | Exception, *, audit: BypassAudit | None = None,
               clock: FakeClock | None = None) -> Guard:
    flag = EnforcementFlag(clock=clock or FakeClock())
    return Guard(flag, Verifier(result), None, audit=audit)


def audit_lines(path: Path) -> list[dict[str, object]]:
    """The file's lines (none when nothing was ever written: the file is created lazily)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
async def test_a_flag_off_bypass_keeps_the_user_agent_in_its_audit_line(
    tmp_path: Path, twin: str,
) -> None:
    clock = FakeClock()
    file = AuditFile(str(tmp_path / "audit.jsonl"), time_now=clock.time)
    guard = guard_with(VerifyResult(VerifyOutcome.VALID, "solved"),
                       audit=BypassAudit(file=file, clock=clock), clock=clock)
    guard.flag.force_off("vendor outage, confirmed by phone")
    for agent in (AGENT, "curl/8.5.0"):  # the first of a window, then a cached decision
        if twin == "decide":
            decision = guard.decide("tok", path="/login", client="203.0.113.9",
                                    user_agent=agent)
        else:
            decision = await guard.adecide("tok", path="/login", client="203.0.113.9",
                                           user_agent=agent)
        assert decision.bypassed and decision.outcome == "bypassed_flag_off"
    file.close()
    lines = audit_lines(tmp_path / "audit.jsonl")
    assert [line["ua"] for line in lines] == [hash_user_agent(AGENT), hash_user_agent("curl/8.5.0")]
    assert hash_user_agent(AGENT) != hash_user_agent("")  # the check above could not pass blank
    assert {line["path"] for line in lines} == {"/login"}
    assert {line["client"] for line in lines} == {"203.0.113.9"}


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
@pytest.mark.parametrize(("outcome", "status", "expected"), [
    (VerifyOutcome.VALID, 200, (1, 0, 1)),
    (VerifyOutcome.UNAVAILABLE, None, (1, 1, 0)),
    (VerifyOutcome.INVALID, 400, (1, 0, 0)),
])
async def test_each_verify_result_is_counted_in_the_probes_window(
    twin: str, outcome: VerifyOutcome, status: int | None, expected: tuple[int, int, int],
) -> None:
    clock = FakeClock()
    guard = guard_with(VerifyResult(outcome, "scripted", status), clock=clock)
    window = OutcomeWindow(60.0, clock=clock)
    guard.outcome_window = window
    if twin == "decide":
        decision = guard.decide("tok", path="/login")
    else:
        decision = await guard.adecide("tok", path="/login")
    assert decision.outcome != "internal_error"
    assert window.tally() == expected


def test_fail_closed_refuses_and_never_says_bypassed() -> None:
    decision = fail_closed("failopen internal error", retry_after=7)
    assert (decision.allow, decision.bypassed, decision.outcome) == (False, False, "internal_error")
    assert (decision.status_code, decision.retry_after) == (503, 7)
    assert decision.to_dict()["bypassed"] is False


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
async def test_a_guard_that_fails_refuses_without_a_bypass_or_an_audit_line(
    tmp_path: Path, twin: str,
) -> None:
    clock = FakeClock()
    file = AuditFile(str(tmp_path / "audit.jsonl"), time_now=clock.time)
    guard = guard_with(RuntimeError("a bug in a verifier"),
                       audit=BypassAudit(file=file, clock=clock), clock=clock)
    if twin == "decide":
        decision = guard.decide("tok", path="/login")
    else:
        decision = await guard.adecide("tok", path="/login")
    file.close()
    assert (decision.allow, decision.bypassed) == (False, False)
    assert (decision.status_code, decision.outcome) == (503, "internal_error")
    assert guard.counts() == {"internal_error": 1}
    assert audit_lines(tmp_path / "audit.jsonl") == []
