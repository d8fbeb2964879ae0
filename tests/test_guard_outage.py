"""The guard with the outage gate a runtime builds: a solved fallback challenge, the outage rate
limit, the first reading that turns enforcement off while a request waits, the metrics and the
shadow log. Real components throughout (FallbackChallenges at a low cost, MemoryUsedSolutions,
OutageRateLimit in memory, FirstReading, the confirmer over a status source); what is pinned is
what a user sees: admitted or refused, the audit line and log record, which key limits whom.

tests/fallback/ tests the challenge and the rate limit on their own; tests/test_outage_policy.py
the default gate (no challenge, no rate limit).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from failopen.engine.first_reading import FirstReading
from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard import Decision, Guard, OutageConfirmer
from failopen.engine.outage import OutageGate
from failopen.engine.watcher import StatusWatcher
from failopen.fallback import FallbackChallenges, MemoryUsedSolutions, OutageRateLimit
from failopen.observe.audit import BypassAudit
from failopen.observe.audit_file import AuditFile, hash_user_agent
from failopen.observe.metrics import Metrics
from failopen.providers.status import StatusReport
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.secret import Secret
from failopen.testing.clock import FakeClock
from failopen.testing.fallback import solve_challenge

V = VerifyOutcome
AGENT = "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0"


class Page:
    """A status source that always reads the same global status."""

    def __init__(self, status: str) -> None:
        self.status = status

    def fetch(self) -> StatusReport:
        return StatusReport(global_status=self.status, global_component=None, regions=(),
                            fetched_at=0.0, source="components")


class Verifier:
    """The vendor's verify call, scripted; ``during`` runs while a call is under way."""

    def __init__(self, outcome: VerifyOutcome) -> None:
        self.result = VerifyResult(outcome, f"scripted {outcome.value}")
        self.during: list[Any] = []

    def verify(self, token: str) -> VerifyResult:
        for step in self.during:
            step()
        return self.result

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


class Outage:
    """One guard as a runtime wires it, its audit file, and the challenges it accepts."""

    def __init__(self, tmp_path: Path, outcome: VerifyOutcome = V.VALID, *,
                 status: str = "major_outage", rate: str | None = None,
                 mode: str = "enforce") -> None:
        self.clock = FakeClock()
        self.flag = EnforcementFlag(clock=self.clock)
        page = Page(status)
        confirmer = OutageConfirmer(page, StatusWatcher(page, self.flag, clock=self.clock),
                                    ttl=10.0, clock=self.clock, wait=10.0)
        self.path = tmp_path / "audit.jsonl"
        self.file = AuditFile(str(self.path), time_now=self.clock.time)
        self.verifier = Verifier(outcome)
        self.guard = Guard(self.flag, self.verifier, confirmer, mode=mode,  # type: ignore[arg-type]
                           audit=BypassAudit(file=self.file, clock=self.clock))
        self.challenges = FallbackChallenges(Secret("fallback-secret-" + "s" * 32), cost=50,
                                             ttl=300.0, clock=self.clock)
        self.guard.gate = OutageGate(
            rate=OutageRateLimit(rate) if rate is not None else None,
            challenges=self.challenges, used=MemoryUsedSolutions(clock=self.clock))

    def solved(self) -> str:
        return solve_challenge(self.challenges.issue())

    def lines(self) -> list[dict[str, Any]]:
        self.file.close()
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]


async def ask(guard: Guard, twin: str, token: str | None = "tok", **kwargs: Any) -> Decision:
    if twin == "decide":
        return guard.decide(token, **kwargs)
    if twin == "adecide":
        return await guard.adecide(token, **kwargs)
    decision = guard.bypass(**kwargs)
    assert decision is not None, "a request that needs no token is decided without one"
    return decision


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def said(record: logging.LogRecord, *names: str) -> tuple[object, ...]:
    return tuple(getattr(record, name) for name in names)


@pytest.fixture(autouse=True)
def _records(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="failopen")


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide", "bypass"])
async def test_a_solved_challenge_is_admitted_once_and_audited_in_full_once_per_outage(
    tmp_path: Path, twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(tmp_path)
    outage.flag.force_off("vendor outage, confirmed by phone")
    first_solution = outage.solved()
    kwargs = {"path": "/signup/step-2", "client": "203.0.113.9", "user_agent": AGENT,
              "policy": "fallback", "route": "/signup"}
    first = await ask(outage.guard, twin, solution=first_solution, **kwargs)
    assert (first.allow, first.bypassed, first.outcome, first.reason) == (
        True, True, "bypassed_fallback",
        "enforcement off (override): vendor outage, confirmed by phone; fallback challenge solved")
    again = await ask(outage.guard, twin, solution=outage.solved(), **kwargs)
    assert again == first
    replayed = await ask(outage.guard, twin, solution=first_solution, **kwargs)
    assert (replayed.allow, replayed.outcome, replayed.status_code, replayed.reason) == (
        False, "fallback_invalid", 403, "fallback solution refused: already used")
    # Written in full once per flag state (the rest are counted), and again in the next one.
    outage.flag.force_off("still down, second call")
    later = await ask(outage.guard, twin, solution=outage.solved(), **kwargs)
    assert later.reason == ("enforcement off (override): still down, second call; fallback "
                            "challenge solved")
    full = events(caplog, "failopen.bypass")
    assert [said(r, "path", "client", "outcome", "route", "policy") for r in full] == [
        ("/signup/step-2", "203.0.113.9", "bypassed_fallback", "/signup", "fallback")] * 2
    assert [r.reason for r in full] == [first.reason, later.reason]  # type: ignore[attr-defined]
    assert [(line["ua"], line["outcome"]) for line in outage.lines()] == [
        (hash_user_agent(AGENT), "bypassed_fallback")] * 3


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
async def test_a_confirmed_outage_admits_a_solved_challenge_and_audits_it(
    tmp_path: Path, twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(tmp_path, V.UNAVAILABLE)
    decision = await ask(outage.guard, twin, path="/signup/step-2", client="203.0.113.9",
                         user_agent=AGENT, policy="fallback", route="/signup",
                         solution=outage.solved())
    assert (decision.allow, decision.bypassed, decision.outcome) == (True, True,
                                                                     "bypassed_fallback")
    assert decision.reason.startswith("verify unavailable (scripted unavailable); outage "
                                      "confirmed: ")
    (record,) = events(caplog, "failopen.bypass")
    assert said(record, "path", "client", "outcome", "route", "policy") == (
        "/signup/step-2", "203.0.113.9", "bypassed_fallback", "/signup", "fallback")
    assert [line["ua"] for line in outage.lines()] == [hash_user_agent(AGENT)]


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide", "bypass"])
async def test_the_outage_rate_limit_counts_a_client_per_protected_route(
    tmp_path: Path, twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(tmp_path, rate="1/minute")
    outage.flag.force_off("vendor outage")

    async def admitted(path: str, client: str, route: str = "") -> Decision:
        return await ask(outage.guard, twin, path=path, client=client, route=route)

    assert (await admitted("/signup/a", "203.0.113.9", "/signup")).allow
    refused = await admitted("/signup/b", "203.0.113.9", "/signup")  # the same route
    assert (refused.allow, refused.status_code, refused.outcome, refused.reason) == (
        False, 429, "outage_rate_limited", "over the outage rate limit (/signup)")
    assert refused.retry_after is not None and 55 <= refused.retry_after <= 60
    (record,) = events(caplog, "failopen.rejected")
    assert said(record, "path", "status_code", "outcome") == ("/signup/b", 429,
                                                              "outage_rate_limited")
    assert (await admitted("/signup/a", "203.0.113.10", "/signup")).allow, "another client"
    assert (await admitted("/login", "203.0.113.9", "/login")).allow, "another route"
    # An IPv6 client counts by its /64: the next address of the same network is the same one.
    assert (await admitted("/signup/a", "2001:db8::1", "/signup")).allow
    assert not (await admitted("/signup/a", "2001:db8::2", "/signup")).allow
    # Without a route the path is the key: each path its own.
    assert (await admitted("/a", "198.51.100.7")).allow
    assert (await admitted("/b", "198.51.100.7")).allow
    assert not (await admitted("/a", "198.51.100.7")).allow


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
@pytest.mark.parametrize(("route", "later_path"), [("/signup", "/signup/b"), ("", "/signup/a")])
async def test_a_confirmed_outage_counts_under_the_rate_limit_the_flag_off_path_uses(
    tmp_path: Path, twin: str, route: str, later_path: str,
) -> None:
    outage = Outage(tmp_path, V.UNAVAILABLE, rate="1/minute")
    confirmed = await ask(outage.guard, twin, path="/signup/a", client="203.0.113.9",
                          route=route)
    assert confirmed.outcome == "bypassed_confirmed_outage"
    assert not outage.flag.state.enforce
    # The same client on the same protected route, now that the flag is off: over the limit.
    refused = await ask(outage.guard, twin, path=later_path, client="203.0.113.9", route=route)
    assert (refused.allow, refused.outcome) == (False, "outage_rate_limited")
    assert (await ask(outage.guard, twin, path=later_path, client="203.0.113.10",
                      route=route)).allow, "another client"


class TurnEnds:
    """Stands in for the watcher thread: the first turn ends, with the reading it brings
    (``outage``), at the moment the request next asks whether a watcher is there to end it,
    once ``armed`` (at once, or while the verify call is under way)."""

    def __init__(self, flag: EnforcementFlag, *, outage: bool, armed: bool) -> None:
        self.flag, self.outage, self.armed = flag, outage, armed
        self.first = FirstReading(wait=10.0, running=self.running)

    def arm(self) -> None:
        self.armed = True

    def running(self) -> bool:
        if self.armed and self.first.pending:
            if self.outage:
                self.flag.set_automatic(enforce=False, source="watcher",
                                        reason="global major_outage",
                                        global_status="major_outage")
            self.first.ended()
        return True


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
@pytest.mark.parametrize(("token", "during_verify"), [(None, False), ("tok", True)])
async def test_a_request_that_waited_for_the_first_reading_takes_its_routes_policy(
    tmp_path: Path, twin: str, token: str | None, during_verify: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(tmp_path, V.INVALID, status="operational")
    turn = TurnEnds(outage.flag, outage=True, armed=not during_verify)
    outage.guard.first_reading = turn.first
    outage.verifier.during.append(turn.arm)
    decision = await ask(outage.guard, twin, token, path="/signup/step-2",
                         client="203.0.113.9", user_agent=AGENT, policy="fallback",
                         route="/signup", solution=outage.solved())
    assert (decision.allow, decision.bypassed, decision.outcome) == (True, True,
                                                                     "bypassed_fallback")
    (record,) = events(caplog, "failopen.bypass")
    assert said(record, "route", "policy") == ("/signup", "fallback")
    assert [line["ua"] for line in outage.lines()] == [hash_user_agent(AGENT)]


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
async def test_a_first_reading_without_an_outage_leaves_a_rejected_token_refused(
    tmp_path: Path, twin: str,
) -> None:
    outage = Outage(tmp_path, V.INVALID, status="operational")
    turn = TurnEnds(outage.flag, outage=False, armed=False)
    outage.guard.first_reading = turn.first
    outage.verifier.during.append(turn.arm)
    decision = await ask(outage.guard, twin, path="/login")
    assert (decision.allow, decision.bypassed, decision.outcome) == (False, False,
                                                                     "invalid_token")
    assert not turn.first.pending, "it waited for the reading"
    assert outage.lines() == []


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
@pytest.mark.parametrize("token", [None, "tok"])
async def test_nothing_waits_for_the_first_reading_once_an_operator_forced_enforcement(
    tmp_path: Path, twin: str, token: str | None,
) -> None:
    outage = Outage(tmp_path, V.INVALID, status="operational")
    outage.flag.force_on("attack under way")
    outage.guard.first_reading = FirstReading(wait=5.0)  # a turn that never ends
    started = time.monotonic()
    decision = await ask(outage.guard, twin, token, path="/login")
    assert not decision.allow
    assert time.monotonic() - started < 2.5, "a refusal under an override answers at once"


@pytest.mark.anyio
async def test_an_async_request_with_a_token_does_not_wait_for_the_first_reading(
    tmp_path: Path,
) -> None:
    outage = Outage(tmp_path, V.VALID, status="operational")
    outage.guard.first_reading = FirstReading(wait=5.0)  # a turn that never ends
    decision = await asyncio.wait_for(outage.guard.adecide("tok", path="/login"), timeout=2.5)
    assert decision.outcome == "valid"


class Timings(Metrics):
    """A metrics sink that keeps the verify calls' durations, or fails (a broken exporter)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.seconds: list[float] = []

    def verify_call(self, seconds: float) -> None:
        if self.fail:
            raise RuntimeError("exporter broken")
        self.seconds.append(seconds)


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
async def test_each_verify_calls_duration_goes_to_the_metrics(tmp_path: Path, twin: str) -> None:
    outage = Outage(tmp_path, status="operational")
    outage.verifier.during.append(lambda: time.sleep(0.01))
    outage.guard.metrics = timings = Timings()
    assert (await ask(outage.guard, twin, path="/login")).outcome == "valid"
    (seconds,) = timings.seconds
    assert 0.01 <= seconds < 2.0


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
async def test_metrics_that_fail_are_logged_and_the_decision_stands(
    tmp_path: Path, twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(tmp_path, status="operational")
    outage.guard.metrics = Timings(fail=True)
    assert (await ask(outage.guard, twin, path="/login")).outcome == "valid"
    (record,) = events(caplog, "failopen.metrics_failed")
    assert (record.name, record.levelno, record.getMessage()) == (
        "failopen.guard", logging.ERROR, "metrics failed")
    assert record.exc_info is not None and "exporter broken" in str(record.exc_info[1])


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
@pytest.mark.parametrize("token", [None, "tok\x00", "tok"])
async def test_shadow_mode_names_the_client_it_would_have_let_through(
    tmp_path: Path, twin: str, token: str | None, caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(tmp_path, status="operational", mode="shadow")
    outage.flag.force_off("vendor outage")
    decision = await ask(outage.guard, twin, token, path="/login", client="203.0.113.9")
    assert decision.shadow and not decision.bypassed
    (record,) = events(caplog, "failopen.shadow_bypass")
    assert said(record, "path", "client") == ("/login", "203.0.113.9")


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide", "bypass"])
async def test_a_request_described_by_nothing_is_audited_as_nothing(
    tmp_path: Path, twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(tmp_path)
    outage.flag.force_off("vendor outage")
    assert (await ask(outage.guard, twin)).outcome == "bypassed_flag_off"
    (record,) = events(caplog, "failopen.bypass")
    assert said(record, "path", "client", "route", "policy") == ("", "", "", "open")
    assert [(line["path"], line["client"], line["ua"]) for line in outage.lines()] == [
        ("", "", "")]


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
@pytest.mark.parametrize(("policy", "instead"), [
    ("closed", "would refuse"), ("fallback", "would ask for the fallback challenge (altcha)"),
    ("nonsense", "would refuse"),  # enforce mode's gate treats an unknown policy as closed
])
@pytest.mark.parametrize("token", [None, "tok\x00", "tok"])
async def test_shadow_mode_says_what_the_route_s_outage_policy_would_do_not_a_bypass(
    tmp_path: Path, twin: str, policy: str, instead: str, token: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(tmp_path, status="operational", mode="shadow")
    outage.flag.force_off("vendor outage")
    decision = await ask(outage.guard, twin, token, path="/signup", client="203.0.113.9",
                         policy=policy)
    # Enforced as ever: the token decides.
    assert (decision.allow, decision.bypassed, decision.shadow) == (token == "tok", False, True)
    # Enforce mode would not have let it through unchecked: no "would bypass" to count.
    assert events(caplog, "failopen.shadow_bypass") == []
    (record,) = events(caplog, "failopen.shadow_outage_policy")
    assert said(record, "path", "client", "policy", "reason") == (
        "/signup", "203.0.113.9", policy, "enforcement off: vendor outage")
    assert record.getMessage() == (
        f"shadow: {instead} (outage policy {policy}) path='/signup' client='203.0.113.9' "
        "reason=enforcement off: vendor outage")
    assert (record.name, record.levelno) == ("failopen.audit", logging.WARNING)
    assert outage.lines() == []  # nothing bypassed, nothing in the audit file


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
async def test_shadow_mode_names_the_policy_of_the_open_route_it_would_have_let_through(
    tmp_path: Path, twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(tmp_path, status="operational", mode="shadow")
    outage.flag.force_off("vendor outage")
    await ask(outage.guard, twin, None, path="/login", client="203.0.113.9", policy="open")
    (record,) = events(caplog, "failopen.shadow_bypass")
    assert said(record, "path", "client", "policy") == ("/login", "203.0.113.9", "open")
    assert events(caplog, "failopen.shadow_outage_policy") == []


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
async def test_shadow_mode_on_a_just_confirmed_outage_reports_a_closed_route_s_refusal(
    tmp_path: Path, twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    # The flag is on; the verify call fails and the status page confirms the outage.
    outage = Outage(tmp_path, V.UNAVAILABLE, status="major_outage", mode="shadow")
    decision = await ask(outage.guard, twin, "tok", path="/reset", client="198.51.100.7",
                         policy="closed")
    assert not decision.allow and not decision.bypassed
    assert events(caplog, "failopen.shadow_bypass") == []
    (record,) = events(caplog, "failopen.shadow_outage_policy")
    assert said(record, "path", "client", "policy") == ("/reset", "198.51.100.7", "closed")


@pytest.mark.anyio
@pytest.mark.parametrize("twin", ["decide", "adecide"])
async def test_shadow_mode_on_a_confirmed_outage_spends_no_allowance_and_no_solution(
    tmp_path: Path, twin: str, caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(tmp_path, V.UNAVAILABLE, status="major_outage", rate="1/minute",
                    mode="shadow")
    solved = outage.solved()
    for _ in range(2):
        decisions = [
            await ask(outage.guard, twin, "tok", path="/login", client="198.51.100.7",
                      policy="open"),
            await ask(outage.guard, twin, "tok", path="/signup", client="198.51.100.7",
                      policy="fallback", solution=solved),
        ]
        # Enforced: the token could not be verified, so 503 (not a 429 of the rate limit, nor a
        # 403 for a solution shadow mode had used up itself).
        assert [(d.status_code, d.outcome) for d in decisions] == [(503, "cannot_verify")] * 2
    assert [r.policy for r in events(caplog, "failopen.shadow_bypass")] == ["open"] * 2
    assert [r.policy for r in events(caplog, "failopen.shadow_outage_policy")] \
        == ["fallback"] * 2
    # The solution is still good: switched to enforce mode, the route admits it once.
    outage.guard.mode = "enforce"
    admitted = await ask(outage.guard, twin, "tok", path="/signup", client="198.51.100.8",
                         policy="fallback", solution=solved)
    assert (admitted.allow, admitted.outcome) == (True, "bypassed_fallback")
