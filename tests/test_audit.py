"""The audit trail of bypasses: in full per request, or the first in full and then summaries."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from failopen.integrations.asgi import FailOpenMiddleware
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from failopen.config import Config
from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard import Guard
from failopen.exceptions import ConfigError
from failopen.observe.audit import BypassAudit
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.runtime import FailOpen
from failopen.testing import FakeClock, FakeVerifyAPI, solve_challenge


class Refuse:
    def verify(self, token: str) -> VerifyResult:
        return VerifyResult(VerifyOutcome.INVALID, "scripted")

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "failopen.audit"]


@pytest.fixture(autouse=True)
def capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="failopen.audit")


def test_each_writes_one_line_per_bypass(caplog: pytest.LogCaptureFixture) -> None:
    audit = BypassAudit("each", clock=FakeClock())
    for n in range(3):
        audit.record("/login", f"198.51.100.{n}", "outage")
    assert lines(caplog) == [f"bypass path='/login' client='198.51.100.{n}' "
                             "outcome=bypassed_flag_off route='/login' policy=open reason=outage"
                             for n in range(3)]
    audit.flush()
    assert len(lines(caplog)) == 3, "nothing is held back in 'each' mode"


def test_summary_writes_the_first_in_full_then_one_line_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    audit = BypassAudit("summary", interval=10.0, clock=clock)
    audit.record("/login", "198.51.100.1", "outage", first=True)
    for _ in range(4):
        audit.record("/login", "198.51.100.2", "outage")
        clock.advance(1)
    audit.record("/signup", "198.51.100.3", "outage")
    assert lines(caplog) == ["bypass path='/login' client='198.51.100.1' "
                             "outcome=bypassed_flag_off route='/login' policy=open reason=outage"]
    clock.advance(10)
    audit.record("/login", "198.51.100.2", "outage")
    assert lines(caplog)[1] == (
        "bypass summary: 7 requests in 14s; paths={'/login': 6, '/signup': 1}; "
        "outcomes={'bypassed_flag_off': 7}; 3 distinct clients, "
        "busiest={'198.51.100.2': 5, '198.51.100.1': 1, '198.51.100.3': 1}"
    )
    audit.flush()
    assert len(lines(caplog)) == 2, "an empty window writes nothing"


def test_a_flood_of_distinct_clients_is_counted_in_bounded_memory(
    caplog: pytest.LogCaptureFixture,
) -> None:
    audit = BypassAudit("summary", clock=FakeClock())
    for n in range(5000):
        audit.record(f"/login/{n}", f"client-{n}", "outage")
    assert len(audit._clients) <= 1001 and len(audit._paths) <= 1001
    audit.flush()
    (summary,) = lines(caplog)
    assert summary.startswith("bypass summary: 5000 requests")
    assert "'<other>': 4000" in summary


def test_guard_summarises_bypasses_and_flushes_when_the_flag_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)
    guard = Guard(flag, Refuse(), None, audit=BypassAudit("summary", clock=clock))
    flag.force_off("vendor down")
    for n in range(50):
        assert guard.decide(None, path="/login", client=f"203.0.113.{n % 5}").bypassed
    assert len(lines(caplog)) == 1, "one line in full, the rest counted"
    assert "client='203.0.113.0'" in lines(caplog)[0]
    flag.force_on("vendor back")
    assert len(lines(caplog)) == 2
    assert lines(caplog)[1].startswith("bypass summary: 50 requests")
    assert "5 distinct clients" in lines(caplog)[1]
    assert guard.counts() == {"bypassed_flag_off": 50}
    flag.force_off("down again")
    guard.decide(None, path="/login", client="203.0.113.9")
    assert "client='203.0.113.9'" in lines(caplog)[2], "a new flag state starts in full again"


def test_config_audit_must_be_each_or_summary() -> None:
    assert Config().audit == "summary"
    with pytest.raises(ConfigError, match="FAILOPEN_AUDIT: expected one of each, summary"):
        Config(audit="some")  # type: ignore[arg-type]


def test_stopping_failopen_writes_what_is_still_counted(caplog: pytest.LogCaptureFixture) -> None:
    from failopen.runtime import FailOpen

    clock = FakeClock()
    runtime = FailOpen(Config(protected_paths=("/login",)), verifier=Refuse(), clock=clock)
    runtime.flag.force_off("vendor down")
    for _ in range(3):
        assert runtime.guard.decide(None, path="/login").bypassed
    runtime.stop()
    assert lines(caplog)[-1].startswith("bypass summary: 3 requests")


# --- outage policies (issue 20): every admission names its outcome, route and policy -----------

FALLBACK_SECRET = "audit-test-fallback-secret-0123456789ab"
CLIENT = "203.0.113.9"


async def _answer(request: Request) -> JSONResponse:
    return JSONResponse({"outcome": request.state.failopen.outcome})


@pytest.fixture
def policed() -> Iterator[tuple[FailOpen, Any]]:
    """A real ASGI site with one route per policy, as docs/outage-policies.md sets it."""
    verify = FakeVerifyAPI()
    config = Config.from_env(environ={
        "FAILOPEN_PROTECTED_PATHS": "/login,/signup,/password-reset",
        "FAILOPEN_OUTAGE_POLICY_ROUTES": "/login=open,/signup=fallback,/password-reset=closed",
        "FAILOPEN_FALLBACK_SECRET": FALLBACK_SECRET, "FAILOPEN_FALLBACK_COST": "2000",
        "FAILOPEN_AUDIT": "each", "FAILOPEN_OUTAGE_RATE": "3/minute", "FAILOPEN_METRICS": "off",
    }, verify_url="https://verify.test" + verify.path, private_key=verify.private_key)
    runtime = FailOpen(config, verify_transport=verify.transport(),
                       verify_async_transport=verify.transport())
    app = Starlette(routes=[Route(path, _answer, methods=["POST"])
                            for path in ("/login", "/signup/{step}", "/signup", "/password-reset")])
    yield runtime, FailOpenMiddleware(app, runtime=runtime)
    runtime.stop()


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app, client=(CLIENT, 4711)),
                             base_url="http://testserver")


def audit_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "failopen.audit"]


@pytest.mark.anyio
async def test_each_admission_during_an_outage_names_its_outcome_route_and_policy(
    policed: tuple[FailOpen, Any], caplog: pytest.LogCaptureFixture,
) -> None:
    runtime, app = policed
    caplog.set_level(logging.INFO, logger="failopen.guard")
    runtime.flag.force_off("vendor ticket 7")
    async with _client(app) as client:
        solution = solve_challenge((await client.get("/failopen/challenge")).json())
        signed_up = await client.post("/signup/step-2", data={"altcha": solution})
        assert signed_up.json() == {"outcome": "bypassed_fallback"}
        assert (await client.post("/login")).json() == {"outcome": "bypassed_flag_off"}
        assert (await client.post("/password-reset")).status_code == 503
        assert (await client.post("/signup")).status_code == 403
        assert (await client.post("/signup", data={"altcha": solution})).status_code == 403
        for _ in range(3):
            await client.post("/login")
    why = "enforcement off (override): vendor ticket 7"
    assert lines(caplog)[:2] == [
        f"bypass path='/signup/step-2' client='{CLIENT}' outcome=bypassed_fallback "
        f"route='/signup' policy=fallback challenge=altcha reason={why}; fallback challenge "
        "solved",
        f"bypass path='/login' client='{CLIENT}' outcome=bypassed_flag_off route='/login' "
        f"policy=open reason={why}",
    ]
    fallback = audit_records(caplog)[0]
    assert (fallback.event, fallback.outcome, fallback.route, fallback.policy) == (  # type: ignore[attr-defined]
        "failopen.bypass", "bypassed_fallback", "/signup", "fallback")
    # Refusals are not bypasses: not in the audit trail, but each in the guard's reject line.
    assert len(audit_records(caplog)) == 4, "one fallback and three open admissions"
    refused = [r.outcome for r in caplog.records  # type: ignore[attr-defined]
               if getattr(r, "event", "") == "failopen.rejected"]
    assert refused == ["outage_closed", "fallback_required", "fallback_invalid",
                       "outage_rate_limited"]


def test_the_summary_counts_each_outcome(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    audit = BypassAudit("summary", interval=10.0, clock=clock)
    audit.record("/login", "198.51.100.1", "outage", first=True, outcome="bypassed_flag_off",
                 route="/login", policy="open")
    for n in range(3):
        audit.record("/signup", f"198.51.100.{n}", "outage; solved", outcome="bypassed_fallback",
                     route="/signup", policy="fallback")
    audit.record("/login", "198.51.100.1", "outage", outcome="bypassed_flag_off", route="/login",
                 policy="open")
    audit.flush()
    summary = lines(caplog)[-1]  # the first line, written in full, is counted here too
    assert "outcomes={'bypassed_fallback': 3, 'bypassed_flag_off': 2}" in summary, summary
    record = audit_records(caplog)[-1]
    assert record.outcomes == {"bypassed_fallback": 3, "bypassed_flag_off": 2}  # type: ignore[attr-defined]


def test_outcome_counts_stay_exact_while_threads_record_and_fold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # No lock on the recording side: each outcome has its own list, taken whole by each fold;
    # threads switched as often as the interpreter allows, to meet a fold mid-append.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        audit = BypassAudit("summary", interval=3600.0, clock=FakeClock())
        outcomes = ("bypassed_flag_off", "bypassed_fallback", "bypassed_confirmed_outage")

        def work(n: int) -> None:
            for i in range(3000):
                audit.record("/login", f"c{n}", "outage", outcome=outcomes[(i + n) % 3])

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    audit.flush()
    (record,) = audit_records(caplog)
    assert record.requests == 12_000  # type: ignore[attr-defined]
    assert record.outcomes == dict.fromkeys(sorted(outcomes), 4000)  # type: ignore[attr-defined]
