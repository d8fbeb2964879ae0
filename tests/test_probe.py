"""The verify probe (issue 13): opt-in outage evidence the status page is late to give.

Every scenario drives the real runtime (flag, watcher, guard, probe, HttpVerifier, StatusClient)
over the in-process fakes on a FakeClock, one watcher step at a time, so the streaks and windows
are exact and nothing sleeps.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from failopen import Config
from failopen.engine.probe import (
    PROBE_MIN_CALLS,
    PROBE_QUIET_FACTOR,
    PROBE_TOKEN_PREFIX,
    OutcomeWindow,
)
from failopen.engine.probe_record import ProbeResult, verdict_of
from failopen.exceptions import ConfigError
from failopen.providers.verify import HttpVerifier, VerifyOutcome, VerifyResult
from failopen.runtime import FailOpen
from failopen.testing import FakeClock, FakeStatusPage, FakeVerifyAPI
from failopen.testing._server import FakeRequest, Reply, as_transport
from failopen.web import flag_payload

POLL = 30.0
CRASH = "crash-"  # tokens a (buggy) vendor answers with a 500: an attacker's crafted tokens


class Site:
    """One process of a site over the fakes, stepped by hand on a FakeClock.

    ``probe_api`` answers the probe; by default it is the same fake as the requests' one (the
    real set-up: one vendor). A separate one lets a test break only one of the two paths.
    """

    def __init__(self, *, evidence: str = "status,probe", separate_probe: bool = False,
                 **changes: Any) -> None:
        self.clock = FakeClock()
        self.page = FakeStatusPage(clock=self.clock)
        self.api = FakeVerifyAPI(clock=self.clock)
        self.probe_api = FakeVerifyAPI(clock=self.clock) if separate_probe else self.api
        settings: dict[str, Any] = {
            "status_url": "https://status.test",
            "verify_url": "https://verify.test" + self.api.path,
            "private_key": self.api.private_key, "protected_paths": ("/login",),
            "poll_interval": POLL, "poll_jitter": 0.0,
            # Simulated hours of traffic from one client; the outage rate limit counts wall
            # time, and has tests of its own (tests/fallback/).
            "outage_rate": "none",
        }
        settings.update(changes)
        config = Config.from_mapping({"EVIDENCE": evidence}, **settings)
        transport = as_transport(self._requests_handler)
        probe_verifier = None
        if separate_probe:
            probe_verifier = HttpVerifier(
                config.verify_url or "", self.api.private_key,
                transport=self.probe_api.transport(), lane="probe")
        self.runtime = FailOpen(
            config, status_transport=self.page.transport(), verify_transport=transport,
            verify_async_transport=transport, clock=self.clock, probe_verifier=probe_verifier)
        self.next_poll = self.clock.monotonic()
        self.decisions: list[Any] = []

    def _requests_handler(self, request: FakeRequest) -> Reply:
        try:
            token = request.json().get("session_token", "")
        except (ValueError, AttributeError):
            token = ""
        if isinstance(token, str) and token.startswith(CRASH):
            return Reply.json({"error": "internal"}, status=500)
        return self.api.handler(request)

    @property
    def state(self) -> Any:
        return self.runtime.flag.state

    def step(self, seconds: float = 1.0, *, requests: int = 0, token: str | None = None) -> None:
        """One watcher turn (poll when due, else the probe when due), then requests, then time."""
        watcher, probe = self.runtime.watcher, self.runtime.probe
        if self.clock.monotonic() >= self.next_poll:
            result = watcher.poll_once()
            self.next_poll = self.clock.monotonic() + result.next_delay
        if probe is not None:
            probe.run_due()
        watcher.tick()
        for _ in range(requests):
            self.decisions.append(self.runtime.guard.decide(
                token if token is not None else self.api.issue_token(), path="/login"))
        self.clock.advance(seconds)

    def run(self, seconds: float, **kwargs: Any) -> None:
        for _ in range(int(seconds)):
            self.step(**kwargs)

    def bypassed(self) -> int:
        return sum(1 for d in self.decisions if d.bypassed)

    def close(self) -> None:
        self.runtime.stop()


@pytest.fixture
def sites() -> Iterator[list[Site]]:
    built: list[Site] = []
    yield built
    for site in built:
        site.close()


def site(sites: list[Site], **kwargs: Any) -> Site:
    built = Site(**kwargs)
    sites.append(built)
    return built


# --- the scenarios of the issue -------------------------------------------------------------------


def test_with_status_evidence_a_verify_outage_under_a_green_page_is_503_and_never_a_bypass(
    sites: list[Site],
) -> None:
    s = site(sites, evidence="status")
    assert s.runtime.probe is None
    s.api.set_fault("timeout")
    s.run(600, requests=2)
    assert s.bypassed() == 0
    assert {d.outcome for d in s.decisions} == {"cannot_verify"}
    assert s.state.enforce


def test_with_the_probe_a_verify_outage_bypasses_after_the_streak_and_recovers(
    sites: list[Site],
) -> None:
    s = site(sites)
    s.run(5, requests=2)
    assert s.state.enforce and s.bypassed() == 0
    s.api.set_fault("timeout")
    # Probes at 30, 60 and 90 s of the outage (the first came at the start): the third opens.
    s.run(85, requests=2)
    assert s.state.enforce, "two failed probes are not the streak"
    s.run(10, requests=2)
    state = s.state
    assert not state.enforce and state.source == "probe"
    assert "the status page still reads operational" in state.reason
    assert "failed 3 times in a row" in state.reason
    assert state.global_status == "operational"
    s.decisions.clear()
    s.run(60, requests=2)
    assert s.bypassed() == len(s.decisions) > 0
    # The vendor recovers: the next probe answers and the page reads operational: at once.
    s.api.set_fault(None)
    s.run(31, requests=0)
    assert s.state.enforce and s.state.source == "probe"
    assert "enforcement back" in s.state.reason
    s.decisions.clear()
    s.run(5, requests=2)
    assert s.bypassed() == 0 and {d.outcome for d in s.decisions} == {"valid"}


def test_a_probe_bypass_with_the_page_not_operational_ends_after_close_after_healthy_probes(
    sites: list[Site],
) -> None:
    s = site(sites, close_after=2)
    s.page.set_global("under_maintenance")  # a reading that is not an outage, nor operational
    s.api.set_fault("503")
    s.run(100, requests=2)
    assert not s.state.enforce and s.state.source == "probe"
    assert "reads under_maintenance (not an outage)" in s.state.reason
    s.api.set_fault(None)
    s.run(31)
    assert not s.state.enforce, "one healthy probe of two"
    s.run(30)
    assert s.state.enforce and "answered 2 times in a row" in s.state.reason


@pytest.mark.parametrize("token", [
    "junk-" + "x" * 40,              # unknown to the vendor: 400
    FakeVerifyAPI.DENIED,            # 200 {"error": ...}
    FakeVerifyAPI.BAD,               # 200, not solved
    "x" * 5000,                      # oversized: refused before any verify call
    "tok\u00e9n",                    # not ASCII: refused before any verify call
])
def test_junk_tokens_at_any_rate_never_bypass(sites: list[Site], token: str) -> None:
    s = site(sites)
    s.run(600, requests=20, token=token)
    assert s.bypassed() == 0 and s.state.enforce
    assert {d.outcome for d in s.decisions} == {"invalid_token"}


def test_junk_tokens_answered_by_the_vendor_outweigh_a_failing_probe(sites: list[Site]) -> None:
    # The probe path is broken (its own fake times out) while the vendor answers every request.
    s = site(sites, separate_probe=True)
    s.probe_api.set_fault("timeout")
    s.run(900, requests=5, token="junk-token-0123456789")
    assert s.bypassed() == 0 and s.state.enforce
    assert s.runtime.probe is not None and s.runtime.probe.counted["failed"] >= 25


def test_crafted_tokens_that_make_the_vendor_fail_never_bypass_while_the_probe_answers(
    sites: list[Site],
) -> None:
    s = site(sites)
    s.run(900, requests=20, token=CRASH + "abc")
    assert s.runtime.probe is not None
    assert s.runtime.probe.window.counts()[1] >= PROBE_MIN_CALLS, "requests look unavailable"
    assert s.bypassed() == 0 and s.state.enforce
    assert {d.outcome for d in s.decisions} == {"cannot_verify"}


def test_a_vendor_failing_unknown_tokens_plus_a_junk_flood_never_bypasses(
    sites: list[Site],
) -> None:
    """A vendor bug: every unknown token, the probe's included, gets a 500. The probe fails for
    good and an attacker's junk looks unavailable too; real users' tokens still verify, and one
    valid answer in the window proves the verify API works."""
    s = site(sites, separate_probe=True)
    s.probe_api.set_fault("500")
    for _ in range(900):
        s.step(requests=20, token=CRASH + "junk")
        s.step(requests=1)  # one real log-in every other second
    assert s.runtime.probe is not None and s.runtime.probe.counted["failed"] >= 50
    assert s.bypassed() == 0 and s.state.enforce


def test_requests_unavailable_while_the_probe_is_healthy_never_bypass(sites: list[Site]) -> None:
    # Only the requests' path fails (an overloaded lane of the site's own, a vendor shard).
    s = site(sites, separate_probe=True)
    s.api.set_fault("timeout")
    s.run(900, requests=5)
    assert s.bypassed() == 0 and s.state.enforce


def test_a_probe_failing_while_requests_succeed_never_bypasses(sites: list[Site]) -> None:
    s = site(sites, separate_probe=True)
    s.probe_api.set_fault("502")
    s.run(900, requests=1)  # 30 calls in the window: busy, all answered
    assert s.bypassed() == 0 and s.state.enforce
    assert s.runtime.probe is not None and s.runtime.probe.counted["failed"] == 30


def test_a_quiet_site_relies_on_the_probe_alone_only_after_a_longer_streak(
    sites: list[Site],
) -> None:
    s = site(sites)
    s.api.set_fault("timeout")
    needed = PROBE_QUIET_FACTOR * 3
    for probe in range(1, needed + 1):
        s.run(30)
        if probe < needed:
            assert s.state.enforce, f"{probe} failed probes on a quiet site"
    s.step()
    assert not s.state.enforce and s.state.source == "probe"
    assert "requests too few to weigh (0 verify calls" in s.state.reason


def test_a_stale_bypass_ends_after_close_after_healthy_probes(sites: list[Site]) -> None:
    s = site(sites, close_after=2)
    s.page.set_global("major_outage")
    s.step()
    assert not s.state.enforce and s.state.source == "watcher"
    s.page.set_fault("500")  # the page cannot be read from now on
    s.run(125)
    assert s.state.stale and not s.state.enforce, "one healthy probe since the page went stale"
    s.run(30)
    state = s.state
    assert state.enforce and state.source == "probe"
    assert "status page cannot be read" in state.reason
    # Stale after 90 s, two probes: long before FAILOPEN_MAX_STALE_BYPASS (900 s).
    assert s.clock.monotonic() - 1000.0 < 160
    # Opening again needs a new outage reading.
    s.page.set_fault(None)
    s.run(60)
    assert not s.state.enforce and s.state.source == "watcher"


def test_the_status_page_keeps_priority_where_it_speaks(sites: list[Site]) -> None:
    s = site(sites)
    s.api.set_fault("timeout")
    s.run(100, requests=2)
    assert s.state.source == "probe"
    s.page.set_global("major_outage")
    s.run(30)
    assert not s.state.enforce and s.state.source == "watcher"
    # The page recovers while the probe still fails: the page's recovery ends its bypass, and
    # the probe must build a new streak (and requests must fail again) to open once more.
    s.page.set_global("operational")
    s.run(60)
    assert s.state.enforce
    s.run(95, requests=2)
    assert not s.state.enforce and s.state.source == "probe"
    # An outage on the page with a healthy probe: the page decides.
    s.api.set_fault(None)
    s.page.set_global("major_outage")
    s.run(60)
    assert not s.state.enforce and s.state.source == "watcher"


def test_a_probe_bypass_is_re_checked_after_the_stale_limit(sites: list[Site]) -> None:
    s = site(sites, max_stale_bypass=300.0)
    s.api.set_fault("timeout")
    s.run(61, requests=2)  # failed probes at 0, 30 and 60 s
    assert s.state.source == "probe" and not s.state.enforce
    reasons: list[str] = []
    s.runtime.flag.add_listener(lambda old, new: reasons.append(new.reason))
    s.run(300, requests=2)  # the probe at 360 s: 300 s into the bypass
    assert s.state.enforce and any("re-checked after 300s" in r for r in reasons)
    s.run(89, requests=2)
    assert s.state.enforce, "a new streak is needed: probes at 390 and 420 s"
    s.run(2, requests=2)
    assert not s.state.enforce and s.state.source == "probe"


def test_an_override_wins_over_a_probe_bypass(sites: list[Site]) -> None:
    s = site(sites)
    s.api.set_fault("timeout")
    s.run(100, requests=2)
    s.runtime.flag.force_on("ops says enforce")
    s.decisions.clear()
    s.run(60, requests=2)
    assert s.bypassed() == 0


def test_the_probe_uses_its_own_tokens_never_a_request_s(sites: list[Site]) -> None:
    s = site(sites, separate_probe=True)
    s.run(200, requests=1, token="request-token-of-a-user")
    sent = s.probe_api.tokens_seen
    assert len(sent) >= 6
    assert all(t.startswith(PROBE_TOKEN_PREFIX) for t in sent)
    assert len(set(sent)) == len(sent), "a fresh synthetic token each time"
    assert not any(t.startswith(PROBE_TOKEN_PREFIX) for t in s.api.tokens_seen)


def test_the_probe_interval_defaults_to_the_poll_interval_and_can_be_set(
    sites: list[Site],
) -> None:
    s = site(sites)
    s.run(301)
    assert s.runtime.probe is not None and s.runtime.probe.sent == 11
    t = site(sites, probe_interval=10.0)
    t.run(301)
    assert t.runtime.probe is not None and t.runtime.probe.sent == 31


# --- what the probe's verdict is --------------------------------------------------------------


@pytest.mark.parametrize(("outcome", "status", "verdict"), [
    (VerifyOutcome.UNAVAILABLE, 503, "failed"),
    (VerifyOutcome.UNAVAILABLE, None, "failed"),
    (VerifyOutcome.INVALID, 400, "healthy"),
    (VerifyOutcome.INVALID, 401, "healthy"),
    (VerifyOutcome.VALID, 200, "healthy"),
    (VerifyOutcome.RATE_LIMITED, 429, "healthy"),
    (VerifyOutcome.OVERLOADED, None, "skipped"),
])
def test_the_probe_verdict_reuses_the_verifier_classification(
    outcome: VerifyOutcome, status: int | None, verdict: str,
) -> None:
    assert verdict_of(VerifyResult(outcome, "x", status)) == verdict


@pytest.mark.parametrize("fault", ["500", "502", "503", "timeout", "reset", "truncated",
                                   "not_json", "empty", "wrong_shape"])
def test_every_unavailable_fault_fails_the_probe_and_429_does_not(
    sites: list[Site], fault: str,
) -> None:
    s = site(sites)
    s.api.set_fault(fault)
    s.step()
    assert s.runtime.probe is not None and s.runtime.probe.last is not None
    assert s.runtime.probe.last.verdict == "failed"
    s.api.set_fault("429")
    s.run(30)
    assert s.runtime.probe.last.verdict == "healthy"


def test_a_probe_that_raises_is_skipped_not_evidence(sites: list[Site]) -> None:
    s = site(sites)
    probe = s.runtime.probe
    assert probe is not None

    class Broken:
        def verify(self, token: str) -> VerifyResult:
            raise RuntimeError("bug")

        async def averify(self, token: str) -> VerifyResult:
            raise RuntimeError("bug")

    probe.verifier = Broken()
    s.run(300, requests=2, token=CRASH + "x")
    assert probe.counted["skipped"] == 10 and probe.counted["failed"] == 0
    assert s.state.enforce


# --- the requests' window -------------------------------------------------------------------


def test_the_window_counts_vendor_answers_and_unavailable_calls_only() -> None:
    clock = FakeClock()
    window = OutcomeWindow(90.0, clock=clock)
    window.record(VerifyResult(VerifyOutcome.UNAVAILABLE, "t"))
    window.record(VerifyResult(VerifyOutcome.INVALID, "denied", 400))
    window.record(VerifyResult(VerifyOutcome.VALID, "ok", 200))
    window.record(VerifyResult(VerifyOutcome.RATE_LIMITED, "429", 429))
    window.record(VerifyResult(VerifyOutcome.INVALID, "token longer than 4096 characters"))
    window.record(VerifyResult(VerifyOutcome.OVERLOADED, "no worker"))
    assert window.counts() == (4, 1)
    clock.advance(60)
    window.record(VerifyResult(VerifyOutcome.UNAVAILABLE, "t"))
    assert window.counts() == (5, 2)
    clock.advance(45)  # the first calls are older than the window now
    assert window.counts() == (1, 1)
    clock.advance(90)
    assert window.counts() == (0, 0)


def test_async_decisions_feed_the_window_too(sites: list[Site]) -> None:
    import asyncio

    s = site(sites)
    s.api.set_fault("timeout")

    async def flood() -> None:
        for _ in range(12):
            await s.runtime.guard.adecide("some-token", path="/login")

    asyncio.run(flood())
    assert s.runtime.probe is not None and s.runtime.probe.window.counts() == (12, 12)


# --- settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(("environ", "named"), [
    ({"FAILOPEN_EVIDENCE": "probe"}, "FAILOPEN_EVIDENCE"),
    ({"FAILOPEN_EVIDENCE": "status,probe,gut"}, "FAILOPEN_EVIDENCE"),
    ({"FAILOPEN_EVIDENCE": "status,probe"}, "FAILOPEN_EVIDENCE"),  # no status or verify URL
    ({"FAILOPEN_EVIDENCE": "status,probe", "FAILOPEN_STATUS_URL": "https://s.example.com"},
     "FAILOPEN_VERIFY_URL"),
    ({"FAILOPEN_PROBE_OPEN_AFTER": "0"}, "FAILOPEN_PROBE_OPEN_AFTER"),
    ({"FAILOPEN_PROBE_OPEN_AFTER": "1"}, "FAILOPEN_PROBE_OPEN_AFTER: expected a whole number "
                                         "from 2"),
    ({"FAILOPEN_PROBE_INTERVAL": "-1"}, "FAILOPEN_PROBE_INTERVAL"),
])
def test_probe_misconfiguration_fails_at_start_up_naming_the_setting(
    environ: dict[str, str], named: str,
) -> None:
    with pytest.raises(ConfigError, match=named):
        Config.from_env(environ)


def test_evidence_defaults_to_status_and_probe_settings_have_defaults() -> None:
    config = Config()
    assert config.evidence == frozenset({"status"}) and not config.probe
    assert config.probe_open_after == 3
    assert config.probe_interval_seconds == config.poll_interval
    assert Config(poll_interval=7.0).probe_interval_seconds == 7.0


# --- visible: the flag endpoint and watch --json ---------------------------------------------


def test_the_flag_payload_has_a_probe_block_and_keeps_its_keys(sites: list[Site]) -> None:
    s = site(sites)
    s.api.set_fault("timeout")
    s.run(100, requests=2)
    payload = flag_payload(s.state, probe=s.runtime.probe)
    assert {"enforce", "source", "reason", "since", "expires_at", "global_status", "stale",
            "error", "mode"} <= set(payload)
    assert payload["source"] == "probe" and payload["enforce"] is False
    assert payload["probe"] == {
        "enabled": True, "last": "failed", "last_at": payload["probe"]["last_at"],
        "failures_in_a_row": 4, "healthy_in_a_row": 0,
    }
    assert "requests" not in payload["probe"], "the public endpoint shows no traffic counts"
    assert flag_payload(s.state)["probe"] is None
    json.dumps(payload)


def test_the_asgi_flag_endpoint_shows_the_probe(sites: list[Site]) -> None:
    import asyncio

    import httpx
    from failopen.integrations.asgi import FailOpenMiddleware

    s = site(sites)
    s.step()

    async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover - not reached
        raise AssertionError

    middleware = FailOpenMiddleware(app, runtime=s.runtime)

    async def get() -> Any:
        transport = httpx.ASGITransport(app=middleware)
        async with httpx.AsyncClient(transport=transport, base_url="http://site.test") as client:
            return (await client.get("/failopen/flag")).json()

    body = asyncio.run(get())
    assert body["probe"]["enabled"] is True and body["probe"]["last"] == "healthy"


def test_probe_results_are_counted(sites: list[Site]) -> None:
    s = site(sites)
    s.run(61)
    s.api.set_fault("timeout")
    s.run(30)
    probe = s.runtime.probe
    assert probe is not None
    described = probe.describe()
    assert described["sent"] == 4
    assert described["counted"] == {"healthy": 3, "failed": 1, "skipped": 0}
    assert described["requests"]["window_seconds"] == 60.0  # (3 - 1) probe intervals


def test_a_published_result_round_trips() -> None:
    result = ProbeResult("failed", "unavailable", "timeout", 1_800_000_000.0, id="a:1", by="a")
    from failopen.engine.probe_record import parse_probe

    assert parse_probe(result.to_json(), now=1_800_000_000.0) == result


def test_probes_and_a_probe_bypass_are_counted_in_prometheus(sites: list[Site]) -> None:
    from prometheus_client import CollectorRegistry

    from failopen.observe.metrics import install

    s = site(sites)
    registry = CollectorRegistry()
    install(s.runtime, registry=registry)

    def value(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    s.run(5, requests=2)
    assert value("failopen_verify_probes_total", result="healthy") == 1
    s.api.set_fault("timeout")
    s.run(95, requests=2)
    assert not s.state.enforce and s.state.source == "probe"
    assert value("failopen_verify_probes_total", result="failed") == 3
    assert value("failopen_flag_transitions_total", source="probe") == 1
    assert value("failopen_enforcing") == 0
