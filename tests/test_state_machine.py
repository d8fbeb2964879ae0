"""A Hypothesis state machine over the whole decision: status changes, faults, overrides, time.

It drives the real objects (EnforcementFlag, StatusWatcher, OutageConfirmer, Guard, StatusClient
reading a FakeStatusPage in-process) one step at a time on a FakeClock, and keeps its own model of
what the state must be. After every step it checks the security rules:

* an unexpired override always wins, and an expired one has lapsed;
* the flag is off only under an unexpired ``force_off``, or, with no override, after ``open_after``
  consecutive readings of the global component in ``bypass_on`` with no streak of
  ``close_after`` readings that are not an outage (operational, degraded, unknown) since.
  Readings come from the watcher's polls and from the guard's confirmations; a confirmation
  counts as one reading on top of the watcher's streak but does not extend it (so request
  traffic cannot make readings arrive faster than the polls);
* a request is bypassed only then; a rate-limited, invalid, missing or malformed token is never
  admitted while enforcing, and shadow mode never bypasses;
* a failed poll is no reading at all; a status nobody defined is a reading that moves nothing;
* a bypass with no good reading for ``max_stale_bypass`` ends, and only new outage readings (the
  old streak no longer counts) open it again; while bypassing, the page is polled every interval
  whatever it answers (no backoff stretches a bypass).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from failopen.config import KNOWN_IMPAIRED
from failopen.engine.flag import FORCE_OFF_DEFAULT_TTL, EnforcementFlag
from failopen.engine.guard import Decision, Guard, OutageConfirmer
from failopen.engine.watcher import StatusWatcher
from failopen.providers.status import KNOWN_STATUSES, StatusClient
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.testing import FakeClock, FakeStatusPage
from failopen.testing.status_page import UNKNOWN_STATUS

GLOBAL_STATUSES = [*sorted(KNOWN_STATUSES), UNKNOWN_STATUS, "MAJOR_OUTAGE", ""]
# Drawn more often: the statuses that move the flag, so that runs reach outages and recoveries.
LIKELY_STATUSES = ["operational", "operational", "major_outage", "partial_outage"]
REGIONS = ("us-east-1", "eu-west-1")
#: Faults after which the page still yields a reading (of a status nobody defined).
NEUTRAL_FAULTS = frozenset({"unknown_status"})
BYPASS_ON_CHOICES = [
    frozenset({"partial_outage", "major_outage"}),  # the default
    frozenset({"major_outage"}),
    KNOWN_IMPAIRED,  # degraded_performance too, on purpose
]
MAX_TOKEN = 4096

times = st.one_of(
    st.sampled_from([0.001, 0.5, 1.0, 5.0, 9.999, 10.0, 10.001, 30.0, 31.0, 60.0, 301.0]),
    st.floats(min_value=0.0, max_value=400.0, allow_nan=False, allow_infinity=False),
)
ttls = st.one_of(
    st.none(),
    st.sampled_from([0.5, 1.0, 5.0, 10.0, 30.0, 60.0]),
    st.floats(min_value=0.001, max_value=200.0, allow_nan=False, allow_infinity=False),
)
tokens = st.one_of(
    st.just("tok-123"),
    st.sampled_from([None, "", "bad\x00tok", "tab\ttok", "tok\u2028"]),
    st.sampled_from([MAX_TOKEN, MAX_TOKEN + 1]).map(lambda n: "x" * n),
    st.text(max_size=20),
)
# Every outcome the verifier knows (a new one is drawn too), unavailable (the one that asks the
# status page) more often.
outcomes = st.one_of(st.just(VerifyOutcome.UNAVAILABLE), st.sampled_from(list(VerifyOutcome)))


class ScriptedVerifier:
    """Answers with whatever outcome the machine drew for this request; counts calls."""

    def __init__(self) -> None:
        self.next: VerifyOutcome = VerifyOutcome.VALID
        self.calls = 0

    def verify(self, token: str) -> VerifyResult:
        self.calls += 1
        return VerifyResult(self.next, f"scripted {self.next.value}")

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


@dataclass
class ModelOverride:
    enforce: bool
    expires_at: float | None  # wall-clock seconds, as the flag computes it


class FailOpenMachine(RuleBasedStateMachine):
    """The real objects, and a model of what they must say."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.page = FakeStatusPage(regions=REGIONS, clock=self.clock)
        self.client = StatusClient(
            "https://status.test", timeout=5.0, transport=self.page.transport(), clock=self.clock
        )
        self.verifier = ScriptedVerifier()

    @initialize(
        open_after=st.integers(1, 3),
        close_after=st.integers(1, 3),
        bypass_on=st.sampled_from(BYPASS_ON_CHOICES),
        stale_after=st.sampled_from([15.0, 30.0, 100.0]),
        confirm_ttl=st.sampled_from([0.5, 10.0, 30.0]),
        shadow=st.sampled_from([False, False, False, True]),
        max_stale_bypass=st.sampled_from([100.0, 150.0, 900.0]),
    )
    def build(
        self, open_after: int, close_after: int, bypass_on: frozenset[str], stale_after: float,
        confirm_ttl: float, shadow: bool, max_stale_bypass: float = 900.0,
    ) -> None:
        self.flag = EnforcementFlag(clock=self.clock)
        self.watcher = StatusWatcher(
            self.client, self.flag, poll_interval=10.0, jitter=0.0, bypass_on=bypass_on,
            open_after=open_after, close_after=close_after, stale_after=stale_after,
            max_stale_bypass=max_stale_bypass, clock=self.clock, random_fraction=lambda: 0.5,
        )
        self.confirmer = OutageConfirmer(
            self.client, self.watcher, ttl=confirm_ttl, clock=self.clock
        )
        self.guard = Guard(
            self.flag, self.verifier, self.confirmer, mode="shadow" if shadow else "enforce"
        )
        self.open_after, self.close_after = open_after, close_after
        self.bypass_on, self.stale_after, self.confirm_ttl = bypass_on, stale_after, confirm_ttl
        self.shadow = shadow
        self.max_stale_bypass = max_stale_bypass
        # The model.
        self.global_status = "operational"
        self.fault: str | None = None
        self.override: ModelOverride | None = None
        self.auto_enforce = True
        self.auto_source = "default"
        self.auto_global: str | None = None
        self.impaired = self.operational = 0
        self.last_good: float | None = None
        self.stale = False
        self.confirm_until: float | None = None  # monotonic; the confirmation cache's expiry
        self.confirm_requests = 0
        # Every good reading with who made it, oldest first (a failed poll is no reading).
        self.readings: list[tuple[str, str]] = []

    def teardown(self) -> None:
        self.client.close()

    # --- the model ------------------------------------------------------------------------

    def live_override(self) -> ModelOverride | None:
        override = self.override
        expires_at = None if override is None else override.expires_at
        if expires_at is not None and self.clock.time() >= expires_at:
            return None
        return override

    def model_enforce(self) -> bool:
        override = self.live_override()
        return override.enforce if override is not None else self.auto_enforce

    def expected_reading(self) -> tuple[str, str | None]:
        """What one read of the page must give: (reading, global status or None)."""
        if self.fault is None:
            status = self.global_status
        elif self.fault in NEUTRAL_FAULTS:
            status = UNKNOWN_STATUS
        else:
            return "failed", None
        if status in self.bypass_on:
            return "impaired", status
        if status == "operational":
            return "operational", status
        return "neutral", status

    def apply_reading(self, source: str) -> str:
        """The hysteresis, as the watcher documents it, for one read of the page.

        The watcher's own polls make the streaks. A confirmation (made for a request) counts as
        one more reading on top of the watcher's streak, but does not extend it: request traffic,
        which a caller controls, must not make readings arrive faster than the polls would.
        """
        reading, status = self.expected_reading()
        if reading == "failed":
            return reading  # no reading at all: streaks, value and staleness stay as they were
        impaired = self.impaired + 1 if reading == "impaired" else 0
        # Any good reading that is not an outage counts towards ending a bypass.
        operational = self.operational + 1 if reading != "impaired" else 0
        if source == "watcher":
            self.impaired, self.operational = impaired, operational
        if reading == "impaired" and impaired >= self.open_after:
            self.auto_enforce = False
        elif reading != "impaired" and operational >= self.close_after:
            self.auto_enforce = True
        self.readings.append((reading, source))
        self.auto_source, self.auto_global = source, status
        self.last_good = self.clock.monotonic()
        self.stale = False
        return reading

    def evidence_of_outage(self) -> bool:
        """The rule restated over the whole history of good readings, apart from the counters:
        the last time a reading completed ``open_after`` impaired readings in a row (counting the
        watcher's run before it) came after the last time one completed ``close_after``
        readings that are not an outage."""
        opened = closed = -1
        run_impaired = run_operational = 0  # the watcher's runs so far
        for index, (reading, source) in enumerate(self.readings):
            with_this = (
                run_impaired + 1 if reading == "impaired" else 0,
                run_operational + 1 if reading != "impaired" else 0,
            )
            if reading == "ended":  # the stale limit: the old streak is no evidence any more
                closed, run_impaired, run_operational = index, 0, 0
                continue
            if reading == "impaired" and with_this[0] >= self.open_after:
                opened = index
            if reading != "impaired" and with_this[1] >= self.close_after:
                closed = index
            if source == "watcher":
                run_impaired, run_operational = with_this
        return opened > closed

    def expected_decision(self, token: str | None, outcome: VerifyOutcome) -> tuple[Any, ...]:
        """(allow, bypassed, outcome, status_code, verifier called) for one request."""
        if not self.shadow and not self.model_enforce():
            return True, True, "bypassed_flag_off", 200, False
        if not token:
            return False, False, "missing_token", 403, False
        if len(token) > MAX_TOKEN or not token.isprintable():
            return False, False, "invalid_token", 403, False
        if outcome is VerifyOutcome.VALID:
            return True, False, "valid", 200, True
        if outcome is VerifyOutcome.INVALID:
            return False, False, "invalid_token", 403, True
        if outcome is VerifyOutcome.RATE_LIMITED:
            return False, False, "rate_limited", 503, True
        if outcome is VerifyOutcome.MISCONFIGURED:  # our settings are wrong: never a reason
            return False, False, "misconfigured", 503, True
        if outcome is not VerifyOutcome.UNAVAILABLE:  # e.g. our own overload: never a reason
            return False, False, "cannot_verify", 503, True
        now = self.clock.monotonic()
        if self.confirm_until is None or now >= self.confirm_until:
            self.confirm_requests += 1
            self.apply_reading("confirmed")
            self.confirm_until = now + self.confirm_ttl
        if not self.model_enforce() and not self.shadow:
            return True, True, "bypassed_confirmed_outage", 200, True
        return False, False, "cannot_verify", 503, True

    # --- the world changes ------------------------------------------------------------------

    # A change of the page is often followed at once by polls: that is how the watcher meets it,
    # and it lets short runs reach outages, faults and recoveries.

    @rule(
        status=st.sampled_from(LIKELY_STATUSES) | st.sampled_from(GLOBAL_STATUSES),
        polls=st.integers(0, 2),
    )
    def set_global(self, status: str, polls: int) -> None:
        self.page.set_global(status)
        self.global_status = status
        self.poll(polls)

    @rule(region=st.sampled_from(REGIONS), status=st.sampled_from(GLOBAL_STATUSES))
    def set_region(self, region: str, status: str) -> None:
        self.page.set_region(region, status)  # diagnosis only: the model ignores regions

    @rule(fault=st.none() | st.sampled_from(sorted(FakeStatusPage.FAULTS)), polls=st.integers(0, 2))
    def set_fault(self, fault: str | None, polls: int) -> None:
        self.page.set_fault(fault)
        self.fault = fault
        self.poll(polls)

    @rule(seconds=times)
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # --- operators ------------------------------------------------------------------------

    @rule(enforce=st.booleans(), ttl=ttls)
    def place_override(self, enforce: bool, ttl: float | None) -> None:
        # Forcing off always ends: an hour unless told otherwise.
        lasts = FORCE_OFF_DEFAULT_TTL if ttl is None and not enforce else ttl
        expires_at = None if lasts is None else self.clock.time() + lasts
        if enforce:
            self.flag.force_on("ops: force on", ttl=ttl)
        else:
            self.flag.force_off("ops: force off", ttl=ttl)
        self.override = ModelOverride(enforce, expires_at)

    @rule()
    def back_to_automatic(self) -> None:
        self.flag.automatic("ops: automatic")
        self.override = None

    # --- the watcher and the guard --------------------------------------------------------

    @rule(times=st.integers(1, 3))
    def poll(self, times: int) -> None:
        """``times`` polls, each checked against the model."""
        for _ in range(times):
            expected = self.apply_reading("watcher")
            result = self.watcher.poll_once()
            assert result.reading == expected, (result, self.fault, self.global_status)
            assert (result.error is not None) == (expected == "failed")
            if not self.auto_enforce:
                assert result.next_delay <= 10.0, "a poll interval stretched while bypassing"

    @rule()
    def tick(self) -> None:
        self.watcher.tick()
        last = self.last_good
        age = self.clock.monotonic() - last if last is not None else 0.0
        self.stale = last is not None and age > self.stale_after
        if self.stale and age > self.max_stale_bypass and not self.auto_enforce:
            self.auto_enforce, self.auto_source = True, "watcher"
            self.impaired = self.operational = 0
            self.readings.append(("ended", "watcher"))

    @rule(token=tokens, outcome=outcomes, use_async=st.booleans())
    def decide(self, token: str | None, outcome: VerifyOutcome, use_async: bool) -> None:
        enforcing_before = self.model_enforce()
        allow, bypassed, name, code, called = self.expected_decision(token, outcome)
        self.verifier.next = outcome
        calls = self.verifier.calls
        decision: Decision
        if use_async:
            decision = asyncio.run(self.guard.adecide(token, path="/login", client="192.0.2.1"))
        else:
            decision = self.guard.decide(token, path="/login", client="192.0.2.1")
        got = (decision.allow, decision.bypassed, decision.outcome, decision.status_code)
        assert got == (allow, bypassed, name, code), (got, token, outcome, self.flag.state)
        assert (self.verifier.calls == calls + 1) is called
        # The security rules, stated on their own (the model could share a bug with the code).
        if decision.bypassed:
            assert not self.shadow, "shadow mode never bypasses"
            assert not self.flag.state.enforce, "a bypass with the flag on"
            override = self.live_override()
            if override is None:
                assert self.evidence_of_outage(), "a bypass without an outage reading"
            else:
                assert override.enforce is False, "a bypass under force_on"
        if enforcing_before or self.shadow:
            refused = (
                not token or len(token) > MAX_TOKEN or not token.isprintable()
                or outcome not in (VerifyOutcome.VALID, VerifyOutcome.UNAVAILABLE)
            )
            if refused:
                assert not decision.allow, "a refused token admitted while enforcing"
            if outcome is not VerifyOutcome.VALID or refused:
                assert not (decision.allow and not decision.bypassed), "admitted, not verified"

    # --- what must hold after every step --------------------------------------------------

    @invariant()
    def the_flag_matches_the_model(self) -> None:
        state = self.flag.state
        override = self.live_override()
        assert state.enforce is self.model_enforce(), (state, override, self.auto_enforce)
        assert self.flag.automatic_state.enforce is self.auto_enforce
        if override is not None:
            assert state.source == "override", "an unexpired override always wins"
            assert state.enforce is override.enforce
            assert state.expires_at == override.expires_at
            live = self.flag.override
            assert live is not None and live.enforce is override.enforce
        else:
            assert self.flag.override is None, "an expired override has lapsed"
            assert state.source == self.auto_source
            assert state.global_status == self.auto_global
        assert state.stale is self.stale

    @invariant()
    def the_flag_is_off_only_on_evidence(self) -> None:
        if self.flag.state.enforce:
            return
        override = self.live_override()
        if override is not None:
            assert override.enforce is False, "off under force_on"
        else:
            assert self.auto_source in ("watcher", "confirmed")
            assert self.evidence_of_outage(), "off without an outage reading"

    @invariant()
    def an_outage_reading_is_acted_on(self) -> None:
        assert self.flag.automatic_state.enforce is (not self.evidence_of_outage())

    @invariant()
    def the_confirmation_is_rate_limited(self) -> None:
        assert self.confirmer.requests == self.confirm_requests


FailOpenMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestFailOpenStateMachine = FailOpenMachine.TestCase


# --- known-tricky runs, played step by step through the same machine and its invariants ---------
#
# Random runs reach these only now and then (each needs four or more steps in order); played here
# they are checked on every run.

DEFAULT_BYPASS_ON = BYPASS_ON_CHOICES[0]
UNAVAILABLE = VerifyOutcome.UNAVAILABLE


def machine(**options: Any) -> FailOpenMachine:
    built = FailOpenMachine()
    settings_: dict[str, Any] = {
        "open_after": 1, "close_after": 2, "bypass_on": DEFAULT_BYPASS_ON, "stale_after": 30.0,
        "confirm_ttl": 10.0, "shadow": False,
    }
    settings_.update(options)
    built.build(**settings_)
    return built


def play(run: FailOpenMachine, *steps: tuple[Any, ...]) -> None:
    """Call each rule with its arguments, checking every invariant after each, as Hypothesis
    does."""
    for name, *args in steps:
        getattr(run, name)(*args)
        run.the_flag_matches_the_model()
        run.the_flag_is_off_only_on_evidence()
        run.an_outage_reading_is_acted_on()
        run.the_confirmation_is_rate_limited()


def test_failed_polls_between_an_outage_and_its_recovery_count_for_nothing() -> None:
    run = machine(close_after=2)
    try:
        play(
            run,
            ("set_global", "major_outage", 1),
            ("set_fault", "500", 2),  # the page fails while it recovers behind the fault
            ("set_fault", None, 0),
            ("set_global", "operational", 1),
        )
        assert run.flag.state.enforce is False, "a failed poll counted as an operational reading"
        play(run, ("poll", 1))
        assert run.flag.state.enforce is True
    finally:
        run.teardown()


def test_a_status_nobody_defined_counts_towards_ending_a_bypass() -> None:
    # It is no outage reading: the evidence for bypassing ended with the last one.
    run = machine(close_after=3)
    try:
        play(
            run,
            ("set_global", "major_outage", 1),
            ("set_global", "operational", 1),
            ("set_fault", "unknown_status", 1),
        )
        assert run.flag.state.enforce is False, "ended before close_after readings"
        play(run, ("set_fault", None, 1))
        assert run.flag.state.enforce is True, "an unknown status broke the streak"
    finally:
        run.teardown()


def test_a_confirmation_completes_a_streak_but_never_extends_it() -> None:
    run = machine(open_after=2)
    try:
        play(run, ("set_global", "major_outage", 1), ("decide", "tok-123", UNAVAILABLE, False))
        assert run.flag.state.enforce is False, "watcher reading + confirmation = open_after"
    finally:
        run.teardown()
    run = machine(open_after=2)
    try:
        play(
            run,
            ("set_global", "major_outage", 0),
            ("decide", "tok-123", UNAVAILABLE, False),  # one reading: not yet open_after
            ("poll", 1),  # the watcher's first: request traffic must not have counted ahead
        )
        assert run.flag.state.enforce is True
        play(run, ("poll", 1))
        assert run.flag.state.enforce is False
    finally:
        run.teardown()


def test_an_override_lapses_exactly_at_its_expiry_and_the_readings_decide_again() -> None:
    run = machine()
    try:
        play(
            run,
            ("set_global", "major_outage", 1),
            ("place_override", True, 10.0),
            ("time_passes", 5.0),
            ("decide", "tok-123", UNAVAILABLE, False),  # force on: the outage confirms nothing
        )
        assert run.flag.state.source == "override"
        play(run, ("time_passes", 5.0))
        assert run.flag.state.source == "confirmed" and run.flag.state.enforce is False
        play(run, ("place_override", False, None), ("set_global", "operational", 3))
        assert run.flag.state.enforce is False, "force_off needs no outage"
        play(run, ("back_to_automatic",))
        assert run.flag.state.enforce is True
    finally:
        run.teardown()


def test_the_confirmation_is_asked_once_per_ttl() -> None:
    run = machine(confirm_ttl=10.0)
    try:
        play(
            run,
            ("decide", "tok-123", UNAVAILABLE, False),
            ("decide", "tok-123", UNAVAILABLE, True),
            ("time_passes", 9.5),
            ("decide", "tok-123", UNAVAILABLE, False),
        )
        assert run.confirmer.requests == 1
        play(run, ("time_passes", 0.5), ("decide", "tok-123", UNAVAILABLE, False))
        assert run.confirmer.requests == 2
    finally:
        run.teardown()


def test_a_stale_bypass_ends_and_needs_new_readings_to_open_again() -> None:
    run = machine(open_after=2, max_stale_bypass=100.0)
    try:
        play(
            run,
            ("set_global", "major_outage", 3),
            ("set_fault", "reset", 1),
            ("time_passes", 99.0),
            ("tick",),
        )
        assert run.flag.state.enforce is False, "stale, within the limit"
        play(run, ("time_passes", 2.0), ("tick",))
        assert run.flag.state.enforce is True, "past the stale limit"
        play(run, ("set_fault", None, 1))
        assert run.flag.state.enforce is True, "one new reading; open_after is 2"
        play(run, ("poll", 1))
        assert run.flag.state.enforce is False
    finally:
        run.teardown()
