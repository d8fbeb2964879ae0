"""The fault matrix: every way the vendor can fail, from every state, over real loopback sockets.

The security rule under test: enforcement is skipped only on evidence, meaning a reading of the
*global* component in a ``bypass_on`` state (by the watcher, or by the guard's confirmation) or an
operator's override. A status page that cannot be read, reads half a document, or reports a status
nobody defined is no evidence either way: an enforcing flag stays enforcing, a bypassing flag stays
bypassing, and when the fault clears the readings decide again. On the verify side only an
*unavailable* vendor may lead to a bypass, and only once the status page confirms an outage: a
429, a denied, bad or missing token are things an attacker can cause, so they never do.

The fault lists are read from the fakes (``FakeStatusPage.FAULTS``, ``FakeVerifyAPI.FAULTS``): a
fault added to a fake is covered here without editing this file.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from failopen.config import Config
from failopen.engine.guard import Decision
from failopen.engine.watcher import PollResult
from failopen.runtime import FailOpen
from failopen.testing import FakeClock, FakeStatusPage, FakeVerifyAPI
from failopen.testing.status_page import UNKNOWN_STATUS

pytestmark = pytest.mark.slow

STATUS_FAULTS = sorted(FakeStatusPage.FAULTS)
VERIFY_FAULTS = sorted(FakeVerifyAPI.FAULTS)
#: Faults that still give a usable reading: the page answers, but with a status the spec does not
#: define. That is a "neutral" reading, not a failed poll. Every other fault is a failed poll.
NEUTRAL_FAULTS = frozenset({"unknown_status"})
#: Verify faults a caller can provoke: never a reason to bypass.
PROVOKABLE_VERIFY_FAULTS = frozenset({"429"})
SLOW_FAULTS = frozenset({"timeout", "slow_drip"})

TIMEOUT = 0.3  # status_timeout and verify_timeout: a hanging fault costs this, not 5 s
OUTAGE, OPERATIONAL = "major_outage", "operational"


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll until ``predicate()`` holds; the timeout only bounds a failure, it is not asserted."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def expected_reading(fault: str) -> str:
    return "neutral" if fault in NEUTRAL_FAULTS else "failed"


# One server per fake for the whole module (stopping a server costs a poll interval); every test
# gets it back healthy and operational. Tests count requests as differences, never absolutely.


@pytest.fixture(scope="module")
def served_page() -> Iterator[FakeStatusPage]:
    fake = FakeStatusPage(regions=("us-east-1", "eu-west-1"))
    with fake.serve():
        yield fake


@pytest.fixture(scope="module")
def served_api() -> Iterator[FakeVerifyAPI]:
    fake = FakeVerifyAPI()
    with fake.serve():
        yield fake


@pytest.fixture
def page(served_page: FakeStatusPage) -> FakeStatusPage:
    served_page.set_fault(None)
    served_page.set_global(OPERATIONAL)
    for region in served_page.region_ids:
        served_page.set_region(region, OPERATIONAL)
    return served_page


@pytest.fixture
def api(served_api: FakeVerifyAPI) -> FakeVerifyAPI:
    served_api.reset()
    return served_api


@pytest.fixture
def build(page: FakeStatusPage) -> Iterator[Callable[..., FailOpen]]:
    """FailOpen instances against the served page (and verify API when given); stopped after."""
    built: list[FailOpen] = []

    def make(
        *, api: FakeVerifyAPI | None = None, clock: Any = None, on_poll: Any = None,
        **changes: Any,
    ) -> FailOpen:
        settings: dict[str, Any] = {
            "status_url": page.server.url,  # type: ignore[attr-defined]
            "status_timeout": TIMEOUT,
            "poll_interval": 10.0,
            "poll_jitter": 0.0,
            "open_after": 1,
            "close_after": 2,
        }
        if api is not None:
            settings.update(
                verify_url=api.verify_url,  # type: ignore[attr-defined]
                private_key=api.private_key,
                verify_timeout=TIMEOUT,
                protected_paths=("/login",),
            )
        settings.update(changes)
        # The verify fake speaks plain http on loopback: a transport that skips loading the CA
        # bundle saves ~30 ms per client and changes nothing on the socket (the verifier's own
        # client uses httpx's default limits too). The status client keeps its own transport: it
        # sets connection limits of its own, which an injected transport would bypass.
        kwargs: dict[str, Any] = {
            "on_poll": on_poll,
            "verify_transport": httpx.HTTPTransport(verify=False),
        }
        if clock is not None:
            kwargs["clock"] = clock
        runtime = FailOpen(Config(**settings), **kwargs)
        built.append(runtime)
        return runtime

    yield make
    for runtime in built:
        runtime.stop()


def started(build: Callable[..., FailOpen], api: FakeVerifyAPI, **changes: Any) -> FailOpen:
    """A FailOpen whose watcher thread runs and has read the page (operational) once.

    It polls again only in an hour, so what follows is decided by the guard and its
    confirmation alone, as in the minutes between two polls.
    """
    polled = threading.Event()
    runtime = build(api=api, poll_interval=3600.0, on_poll=lambda result: polled.set(), **changes)
    runtime.start()
    assert polled.wait(5), "the watcher never polled"
    assert (runtime.state.enforce, runtime.state.source) == (True, "watcher")
    return runtime


def assert_no_bypass(decision: Decision) -> None:
    assert decision.bypassed is False
    assert decision.outcome not in ("bypassed_flag_off", "bypassed_confirmed_outage")


# --- the status page: every fault, from enforcing and from bypassing ----------------------------


# An unknown status is a reading that is no outage: from bypassing it counts towards ending the
# bypass (test_an_unknown_status_during_a_bypass_counts_towards_ending_it), so it is no fault there.
FAULT_STARTS = [(start, fault) for start in ("enforcing", "bypassing") for fault in STATUS_FAULTS
                if not (start == "bypassing" and fault in NEUTRAL_FAULTS)]


@pytest.mark.parametrize(("start", "fault"), FAULT_STARTS)
def test_a_status_page_fault_is_never_evidence(
    build: Callable[..., FailOpen], page: FakeStatusPage, start: str, fault: str
) -> None:
    clock = FakeClock()
    runtime = build(clock=clock, stale_after=30.0)
    enforcing = start == "enforcing"

    # Reach the start state through a real reading of the page.
    page.set_global(OPERATIONAL if enforcing else OUTAGE)
    first = runtime.poll_now()
    assert first is not None and first.reading == ("operational" if enforcing else "impaired")
    assert (runtime.state.enforce, runtime.state.source) == (enforcing, "watcher")

    # Behind the fault the page now says the opposite. A fault that leaks any of it (half a
    # document, a body read anyway) would move the flag: it must not.
    page.set_fault(fault)
    page.set_global(OUTAGE if enforcing else OPERATIONAL)
    asked = page.requests
    # More polls than open_after and close_after (one for the slow faults, to keep the suite
    # fast: one failed poll already tells whether a failure counts as a reading).
    polls = 1 if fault in SLOW_FAULTS else 3
    for _ in range(polls):
        result = runtime.poll_now()
        assert result is not None
        assert result.reading == expected_reading(fault), result
        assert result.reading not in ("impaired", "operational")
        assert runtime.state.enforce is enforcing
        clock.advance(10.0)
    # The server counts a request when its thread reads it, which on a loaded machine can be
    # after the poll gave up on it (a 0.3 s time-out): wait for the count rather than race it.
    assert wait_for(lambda: page.requests >= asked + polls), "every poll went over the socket"
    if fault not in NEUTRAL_FAULTS:
        assert result.error, "a failed poll says why"
        # No good reading for longer than stale_after: marked stale, value kept.
        clock.advance(31.0)
        runtime.watcher.tick()  # type: ignore[union-attr]
        assert runtime.state.stale is True
        assert runtime.state.enforce is enforcing

    # The fault clears: the page's readings decide again.
    page.set_fault(None)
    if enforcing:  # the page says major_outage: one reading (open_after=1) stops enforcing
        assert runtime.poll_now().reading == "impaired"  # type: ignore[union-attr]
        assert (runtime.state.enforce, runtime.state.source) == (False, "watcher")
        assert runtime.state.global_status == OUTAGE
    else:  # the page says operational: the failed polls counted for nothing, so it takes two
        assert runtime.poll_now().reading == "operational"  # type: ignore[union-attr]
        assert runtime.state.enforce is False, "one operational reading is not close_after"
        assert runtime.poll_now().reading == "operational"  # type: ignore[union-attr]
        assert (runtime.state.enforce, runtime.state.source) == (True, "watcher")
    assert runtime.state.stale is False


@pytest.mark.parametrize("fault", sorted(set(STATUS_FAULTS) - NEUTRAL_FAULTS))
def test_the_watcher_thread_survives_every_fault_and_recovers(
    build: Callable[..., FailOpen], page: FakeStatusPage, fault: str
) -> None:
    """The real thread, polling every 20 ms, from a bypassing state (the outage the fault must
    not end by itself), through the fault, to recovery."""
    polls: list[PollResult] = []
    runtime = build(
        poll_interval=0.02, backoff_max=0.05, stale_after=0.1, store_refresh=0.05,
        on_poll=polls.append,
    )
    page.set_global(OUTAGE)
    runtime.start()
    assert wait_for(lambda: runtime.state.enforce is False), "the outage was never read"
    assert runtime.state.source == "watcher"

    page.set_fault(fault)  # first the fault, then the status behind it, so no poll can see it
    page.set_global(OPERATIONAL)
    mark = len(polls)
    wanted = 2 if fault in SLOW_FAULTS else 4

    def faulted() -> int:
        return sum(1 for p in polls[mark:] if p.reading == expected_reading(fault))

    assert wait_for(lambda: faulted() >= wanted), f"polls stopped: {polls[mark:]}"
    assert runtime.watcher.running  # type: ignore[union-attr]
    assert runtime.state.enforce is False, "a failing page ended the bypass"
    assert all(p.reading != "operational" for p in polls[mark:])
    if fault not in NEUTRAL_FAULTS:
        assert wait_for(lambda: runtime.state.stale), "never marked stale"
        assert runtime.state.enforce is False

    page.set_fault(None)
    recovered = len(polls)
    assert wait_for(lambda: runtime.state.enforce is True), "never recovered"
    assert runtime.watcher.running  # type: ignore[union-attr]
    assert runtime.state.source == "watcher" and runtime.state.stale is False
    operational = [p for p in polls[recovered:] if p.reading == "operational"]
    assert len(operational) >= 2, "re-enforced before close_after operational readings"


@pytest.mark.parametrize("fault", ["truncated", "malformed", "unknown_status", "reset"])
def test_the_watcher_thread_keeps_enforcing_through_a_fault_hiding_an_outage(
    build: Callable[..., FailOpen], page: FakeStatusPage, fault: str
) -> None:
    polls: list[PollResult] = []
    runtime = build(poll_interval=0.02, backoff_max=0.05, on_poll=polls.append)
    runtime.start()
    assert wait_for(lambda: runtime.state.source == "watcher")
    page.set_fault(fault)
    page.set_global(OUTAGE)  # half of this document is what "truncated"/"malformed" send
    mark = len(polls)
    assert wait_for(lambda: len(polls) >= mark + 5)
    assert runtime.watcher.running  # type: ignore[union-attr]
    assert runtime.state.enforce is True
    assert all(p.reading != "impaired" for p in polls[mark:])
    page.set_fault(None)
    assert wait_for(lambda: runtime.state.enforce is False)
    assert runtime.state.global_status == OUTAGE


# --- the verify call: every token and every fault, with the page operational or in outage -------


TOKEN_CASES: list[tuple[str | None, int, str]] = [
    (FakeVerifyAPI.GOOD, 200, "valid"),
    (FakeVerifyAPI.UNVERIFIED, 200, "valid"),  # require_verified is off by default
    (FakeVerifyAPI.BAD, 403, "invalid_token"),
    (FakeVerifyAPI.DENIED, 403, "invalid_token"),
    ("never-issued-token", 403, "invalid_token"),
    (None, 403, "missing_token"),
    ("", 403, "missing_token"),
    ("tok\x00en", 403, "invalid_token"),
    ("x" * 5000, 403, "invalid_token"),
]


@pytest.mark.parametrize(("token", "status_code", "outcome"), TOKEN_CASES)
@pytest.mark.parametrize("status", [OPERATIONAL, OUTAGE])
def test_a_token_is_judged_on_its_merits_whatever_the_status_page_says(
    build: Callable[..., FailOpen], page: FakeStatusPage, api: FakeVerifyAPI,
    status: str, token: str | None, status_code: int, outcome: str,
) -> None:
    runtime = started(build, api)
    page.set_global(status)  # not yet read by the watcher: only a confirmation could see it
    asked = page.requests
    decision = runtime.decide(token, path="/login", client="198.51.100.7")
    assert_no_bypass(decision)
    assert (decision.status_code, decision.outcome) == (status_code, outcome)
    assert decision.allow is (status_code == 200)
    assert page.requests == asked, "a verify that answered never asks the status page"
    assert runtime.state.enforce is True


@pytest.mark.parametrize("status", [OPERATIONAL, OUTAGE])
def test_require_verified_rejects_an_unverified_token_in_an_outage_too(
    build: Callable[..., FailOpen], page: FakeStatusPage, api: FakeVerifyAPI, status: str
) -> None:
    runtime = started(build, api, require_verified=True)
    page.set_global(status)
    decision = runtime.decide(FakeVerifyAPI.UNVERIFIED, path="/login")
    assert_no_bypass(decision)
    assert (decision.status_code, decision.outcome) == (403, "invalid_token")


@pytest.mark.parametrize("fault", VERIFY_FAULTS)
@pytest.mark.parametrize("status", [OPERATIONAL, OUTAGE])
def test_a_verify_fault_bypasses_only_when_unavailable_and_the_outage_is_confirmed(
    build: Callable[..., FailOpen], page: FakeStatusPage, api: FakeVerifyAPI,
    status: str, fault: str,
) -> None:
    runtime = started(build, api)
    api.set_fault(fault)
    page.set_global(status)
    asked = page.requests
    decision = runtime.decide(FakeVerifyAPI.GOOD, path="/login", client="198.51.100.7")
    if fault in PROVOKABLE_VERIFY_FAULTS:
        assert_no_bypass(decision)
        assert (decision.status_code, decision.outcome) == (503, "rate_limited")
        assert page.requests == asked, "a 429 must not even make us look at the status page"
        assert runtime.state.enforce is True
    elif status == OUTAGE:
        assert (decision.allow, decision.bypassed) == (True, True)
        assert decision.outcome == "bypassed_confirmed_outage"
        assert page.requests == asked + 1, "exactly one confirmation request"
        state = runtime.state
        assert (state.enforce, state.source, state.global_status) == (False, "confirmed", OUTAGE)
    else:
        assert_no_bypass(decision)
        assert (decision.status_code, decision.outcome) == (503, "cannot_verify")
        assert decision.retry_after is not None
        assert page.requests == asked + 1
        assert runtime.state.enforce is True


@pytest.mark.parametrize("token", [None, "", "tok\x00en", "x" * 5000, "tok\u2028en"])
def test_a_token_refused_locally_stays_refused_when_verify_is_down_in_an_outage(
    build: Callable[..., FailOpen], page: FakeStatusPage, api: FakeVerifyAPI, token: str | None
) -> None:
    """Missing and malformed tokens are refused before any verify call, so no outage, however
    confirmed, lets them through while enforcing (a flood of them costs the vendor nothing)."""
    runtime = started(build, api)
    api.set_fault("503")
    page.set_global(OUTAGE)
    verifies, asked = api.requests, page.requests
    decision = runtime.decide(token, path="/login")
    assert_no_bypass(decision)
    assert decision.status_code == 403
    assert (api.requests, page.requests) == (verifies, asked), "no verify call, no status check"
    assert runtime.state.enforce is True


@pytest.mark.parametrize("fault", sorted(set(VERIFY_FAULTS) - SLOW_FAULTS))
@pytest.mark.anyio
async def test_adecide_follows_the_same_matrix(
    build: Callable[..., FailOpen], page: FakeStatusPage, api: FakeVerifyAPI, fault: str
) -> None:
    runtime = started(build, api)
    try:
        api.set_fault(fault)
        page.set_global(OUTAGE)
        decision = await runtime.adecide(FakeVerifyAPI.GOOD, path="/login")
        if fault in PROVOKABLE_VERIFY_FAULTS:
            assert_no_bypass(decision)
            assert decision.outcome == "rate_limited"
            assert runtime.state.enforce is True
        else:
            assert decision.outcome == "bypassed_confirmed_outage"
            assert runtime.state.source == "confirmed"
    finally:
        await runtime.verifier.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize("status_fault", STATUS_FAULTS)
def test_a_faulty_status_page_confirms_no_outage(
    build: Callable[..., FailOpen], page: FakeStatusPage, api: FakeVerifyAPI, status_fault: str
) -> None:
    """Verify is down and the page's document says major_outage, but the page is faulty: half a
    document, an error, a status nobody defined. That confirms nothing."""
    runtime = started(build, api)
    api.set_fault("503")
    page.set_global(OUTAGE)
    page.set_fault(status_fault)
    for _ in range(3):  # the first asks the page; the rest reuse the failed check (confirm_ttl)
        decision = runtime.decide(FakeVerifyAPI.GOOD, path="/login")
        assert_no_bypass(decision)
        assert (decision.status_code, decision.outcome) == (503, "cannot_verify")
    assert runtime.state.enforce is True
    assert runtime.confirmer is not None and runtime.confirmer.requests == 1


# --- readings that are not an outage of the global component ------------------------------------


@pytest.mark.parametrize(
    "regions", [{"eu-west-1": OUTAGE}, {"us-east-1": OUTAGE, "eu-west-1": "partial_outage"}]
)
def test_a_regional_outage_with_the_global_operational_never_bypasses(
    build: Callable[..., FailOpen], page: FakeStatusPage, api: FakeVerifyAPI,
    regions: dict[str, str],
) -> None:
    runtime = started(build, api)
    for region, status in regions.items():
        page.set_region(region, status)
    for _ in range(3):
        assert runtime.poll_now().reading == "operational"  # type: ignore[union-attr]
    api.set_fault("503")  # and verify is down too: the confirmation reads the same page
    decision = runtime.decide(FakeVerifyAPI.GOOD, path="/login")
    assert_no_bypass(decision)
    assert decision.outcome == "cannot_verify"
    assert runtime.state.enforce is True


@pytest.mark.parametrize(
    "status",
    [
        UNKNOWN_STATUS, "degraded_performance", "under_maintenance", "MAJOR_OUTAGE",
        "Major_Outage", "major_outage ", "major-outage", "outage", "",
    ],
)
def test_a_global_status_outside_bypass_on_never_bypasses(
    build: Callable[..., FailOpen], page: FakeStatusPage, api: FakeVerifyAPI, status: str
) -> None:
    runtime = started(build, api)
    page.set_global(status)
    for _ in range(3):
        result = runtime.poll_now()
        assert result is not None and result.reading == "neutral"
        assert result.report is not None and result.report.global_status == status
    api.set_fault("503")
    decision = runtime.decide(FakeVerifyAPI.GOOD, path="/login")
    assert_no_bypass(decision)
    assert runtime.state.enforce is True
    assert runtime.state.global_status == status


def test_an_unknown_status_during_a_bypass_counts_towards_ending_it(
    build: Callable[..., FailOpen], page: FakeStatusPage
) -> None:
    # The evidence for bypassing ended with the last outage reading: a status that is no outage
    # (unknown, degraded, under maintenance) moves towards enforcement like operational does.
    runtime = build()
    page.set_global(OUTAGE)
    runtime.poll_now()
    assert runtime.state.enforce is False
    page.set_global(UNKNOWN_STATUS)
    runtime.poll_now()
    assert runtime.state.enforce is False, "one reading is not close_after"
    page.set_global(OPERATIONAL)
    runtime.poll_now()
    assert runtime.state.enforce is True, "the unknown status broke the streak"
    page.set_global(UNKNOWN_STATUS)
    runtime.poll_now()
    runtime.poll_now()
    assert runtime.state.enforce is True, "an unknown status never opens a bypass"


# --- the indicator fallback ---------------------------------------------------------------------


COMPONENTS_FAULTS = ["503", "malformed", "reset"]


@pytest.mark.parametrize("fault", COMPONENTS_FAULTS)
@pytest.mark.parametrize("status", ["partial_outage", OUTAGE, "degraded_performance"])
def test_the_indicator_fallback_never_bypasses_by_default(
    build: Callable[..., FailOpen], page: FakeStatusPage, api: FakeVerifyAPI,
    fault: str, status: str,
) -> None:
    runtime = started(build, api, indicator_fallback=True)
    page.set_fault(fault, endpoint="components")
    page.set_global(status)
    for _ in range(3):
        result = runtime.poll_now()
        assert result is not None and result.reading == "neutral", result
        assert result.report is not None and result.report.source == "indicator"
        assert result.report.global_status.startswith("indicator:")
    api.set_fault("503")
    decision = runtime.decide(FakeVerifyAPI.GOOD, path="/login")
    assert_no_bypass(decision)
    assert runtime.state.enforce is True


@pytest.mark.parametrize(
    ("status", "bypasses"),
    [(OUTAGE, True), ("partial_outage", False), ("degraded_performance", False)],
)
def test_the_indicator_fallback_bypasses_only_on_a_listed_indicator(
    build: Callable[..., FailOpen], page: FakeStatusPage, api: FakeVerifyAPI,
    status: str, bypasses: bool,
) -> None:
    # The fake maps major_outage to the indicator "critical", partial_outage to "major".
    bypass_on = frozenset({"partial_outage", OUTAGE, "indicator:critical"})
    runtime = build(api=api, indicator_fallback=True, bypass_on=bypass_on)
    page.set_fault("503", endpoint="components")
    page.set_global(status)
    result = runtime.poll_now()
    assert result is not None and result.report is not None
    assert result.report.source == "indicator"
    assert runtime.state.enforce is (not bypasses)
    if bypasses:
        assert result.reading == "impaired"
        assert runtime.state.global_status == "indicator:critical"


def test_the_indicator_fallback_confirms_only_a_listed_indicator(
    build: Callable[..., FailOpen], page: FakeStatusPage, api: FakeVerifyAPI
) -> None:
    bypass_on = frozenset({OUTAGE, "indicator:critical"})
    runtime = started(
        build, api, indicator_fallback=True, bypass_on=bypass_on, confirm_ttl=0.05
    )
    api.set_fault("503")
    page.set_fault("503", endpoint="components")
    page.set_global("partial_outage")  # indicator "major": not listed
    assert runtime.decide(FakeVerifyAPI.GOOD, path="/login").outcome == "cannot_verify"
    confirmer = runtime.confirmer
    assert confirmer is not None and wait_for(lambda: not confirmer.fresh())
    page.set_global(OUTAGE)  # indicator "critical": listed
    assert runtime.decide(FakeVerifyAPI.GOOD, path="/login").outcome == (
        "bypassed_confirmed_outage"
    )


def test_a_missing_global_component_never_falls_back_to_the_indicator(
    build: Callable[..., FailOpen], page: FakeStatusPage, api: FakeVerifyAPI
) -> None:
    # Which component is global is then unknown, and the page-wide indicator also counts
    # regional incidents: an ambiguous page never bypasses, opt-in fallback or not (issue 9, C7).
    bypass_on = frozenset({OUTAGE, "indicator:critical"})
    runtime = started(build, api, indicator_fallback=True, bypass_on=bypass_on)
    page.set_fault("missing_global", endpoint="components")
    page.set_global(OUTAGE)  # indicator "critical": listed
    result = runtime.poll_now()
    assert result is not None and result.reading == "failed", result
    api.set_fault("503")
    assert_no_bypass(runtime.decide(FakeVerifyAPI.GOOD, path="/login"))
    assert runtime.state.enforce is True


@pytest.mark.parametrize("fault", ["503", "malformed", "timeout"])
def test_the_indicator_fallback_failing_too_is_no_evidence(
    build: Callable[..., FailOpen], page: FakeStatusPage, fault: str
) -> None:
    runtime = build(
        indicator_fallback=True, bypass_on=frozenset({OUTAGE, "indicator:critical"})
    )
    page.set_fault(fault)  # both documents
    page.set_global(OUTAGE)
    for _ in range(2):
        assert runtime.poll_now().reading == "failed"  # type: ignore[union-attr]
    assert runtime.state.enforce is True


# --- a bypass ends with its evidence (issue 9, B5) ---------------------------------------------


@pytest.mark.parametrize("fault", ["reset", "503"])
def test_dropping_the_status_page_after_an_outage_cannot_keep_enforcement_off(
    build: Callable[..., FailOpen], page: FakeStatusPage, fault: str
) -> None:
    """Someone who can reset the connections to the status page after a real outage: the bypass
    ends at FAILOPEN_MAX_STALE_BYPASS; an operator's force_off is not affected."""
    clock = FakeClock()
    runtime = build(clock=clock, stale_after=30.0, max_stale_bypass=120.0)
    watcher = runtime.watcher
    page.set_global(OUTAGE)
    assert runtime.poll_now().reading == "impaired"
    assert runtime.state.enforce is False
    page.set_fault(fault)
    for _ in range(12):  # 120 s: failed polls every 10 s, within the limit
        clock.advance(10.0)
        assert runtime.poll_now().reading == "failed"
        watcher.tick()
    assert (runtime.state.enforce, runtime.state.stale) == (False, True)
    assert runtime.state.error is not None
    clock.advance(1.0)
    watcher.tick()
    state = runtime.state
    assert state.enforce is True, "a bypass outlived its evidence"
    assert "FAILOPEN_MAX_STALE_BYPASS" in state.reason
    assert state.error is not None and state.error.startswith("StatusUnavailable: status page")
    # An operator who knows better forces it off: the stale limit leaves that alone.
    runtime.flag.force_off("ops: vendor confirmed by phone", ttl=3600.0)
    for _ in range(30):
        clock.advance(10.0)
        runtime.poll_now()
        watcher.tick()
    assert (runtime.state.enforce, runtime.state.source) == (False, "override")
