"""The audit trail of bypasses: in full per request, or the first in full and then summaries."""

from __future__ import annotations

import logging

import pytest

from failopen.config import Config
from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard import Guard
from failopen.exceptions import ConfigError
from failopen.observe.audit import BypassAudit
from failopen.testing import FakeClock
from failopen.vendor.verify import VerifyOutcome, VerifyResult


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
    assert lines(caplog) == [f"bypass path='/login' client='198.51.100.{n}' reason=outage"
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
    assert lines(caplog) == ["bypass path='/login' client='198.51.100.1' reason=outage"]
    clock.advance(10)
    audit.record("/login", "198.51.100.2", "outage")
    assert lines(caplog)[1] == (
        "bypass summary: 7 requests in 14s; paths={'/login': 6, '/signup': 1}; "
        "3 distinct clients, busiest={'198.51.100.2': 5, '198.51.100.1': 1, '198.51.100.3': 1}"
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
