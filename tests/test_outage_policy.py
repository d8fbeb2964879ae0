"""A route's outage policy: what a protected request gets while enforcement is off.

These tests drive the Guard with its default gate (no rate limit, no fallback challenge): open
routes open as before, closed routes refuse with 503, fallback routes refuse without a valid
solution. The fallback challenge and the rate limit themselves are tested with their real
implementations in tests/fallback/.
"""

from __future__ import annotations

import asyncio

import pytest

from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard import Guard
from failopen.engine.outage import OutageGate, strictest
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.testing.clock import FakeClock
from failopen.web import RoutePolicies, challenge_answer, flag_payload, rejection_html


class Verifier:
    """The vendor's verify call, scripted (the only fake here)."""

    def __init__(self, outcome: VerifyOutcome) -> None:
        self.result = VerifyResult(outcome, f"scripted {outcome.value}")
        self.calls = 0

    def verify(self, token: str) -> VerifyResult:
        self.calls += 1
        return self.result

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


def off_guard(outcome: VerifyOutcome = VerifyOutcome.VALID, *, mode: str = "enforce") -> Guard:
    flag = EnforcementFlag(clock=FakeClock())
    flag.set_automatic(enforce=False, source="watcher", reason="global major_outage",
                       global_status="major_outage")
    return Guard(flag, Verifier(outcome), None, mode=mode)  # type: ignore[arg-type]


def test_open_is_the_bypass_it_always_was() -> None:
    guard = off_guard()
    decision = guard.decide(None, path="/login", policy="open")
    assert (decision.allow, decision.bypassed, decision.outcome) == (True, True,
                                                                     "bypassed_flag_off")
    assert guard.decide(None, path="/login") == decision  # "open" is the default


def test_closed_refuses_with_503_and_retry_after_whatever_the_request_carries() -> None:
    guard = off_guard()
    for token, solution in ((None, None), ("a-valid-token", None), (None, "a-solution")):
        decision = guard.decide(token, path="/reset", policy="closed", solution=solution)
        assert (decision.allow, decision.bypassed, decision.outcome, decision.status_code,
                decision.retry_after) == (False, False, "outage_closed", 503, 5)
    assert guard.counts() == {"outage_closed": 3}


def test_fallback_without_a_solution_is_403_fallback_required() -> None:
    decision = off_guard().decide(None, path="/signup", policy="fallback")
    assert (decision.allow, decision.outcome, decision.status_code) == (
        False, "fallback_required", 403)


def test_fallback_without_a_configured_challenge_never_admits() -> None:
    decision = off_guard().decide(None, path="/signup", policy="fallback", solution="forged")
    assert (decision.allow, decision.bypassed, decision.outcome) == (
        False, False, "fallback_invalid")


def test_an_unknown_policy_is_closed_never_open() -> None:
    decision = off_guard().decide(None, path="/login", policy="opne")
    assert (decision.allow, decision.outcome) == (False, "outage_closed")


def test_a_confirmed_outage_of_the_verify_call_follows_the_route_policy() -> None:
    flag = EnforcementFlag(clock=FakeClock())

    class Confirmer:
        def confirm(self) -> bool:
            return True

    guard = Guard(flag, Verifier(VerifyOutcome.UNAVAILABLE), Confirmer())  # type: ignore[arg-type]
    assert guard.decide("token", path="/login", policy="open").outcome == \
        "bypassed_confirmed_outage"
    closed = guard.decide("token", path="/reset", policy="closed")
    assert (closed.allow, closed.outcome, closed.status_code) == (False, "outage_closed", 503)
    fallback = guard.decide("token", path="/signup", policy="fallback")
    assert (fallback.allow, fallback.outcome) == (False, "fallback_required")


def test_the_policy_does_nothing_while_enforcing() -> None:
    flag = EnforcementFlag(clock=FakeClock())
    verifier = Verifier(VerifyOutcome.VALID)
    guard = Guard(flag, verifier, None)  # type: ignore[arg-type]
    assert guard.decide("token", path="/reset", policy="closed").outcome == "valid"
    # A fallback solution never stands in for the vendor's token once enforcement is on.
    missing = guard.decide(None, path="/signup", policy="fallback", solution="solved")
    assert (missing.allow, missing.outcome) == (False, "missing_token")
    assert verifier.calls == 1


def test_shadow_mode_still_enforces_on_every_policy() -> None:
    guard = off_guard(mode="shadow")
    for policy in ("open", "fallback", "closed"):
        decision = guard.decide("token", path="/login", policy=policy)
        assert (decision.allow, decision.bypassed, decision.outcome) == (True, False, "valid")


def test_async_decisions_follow_the_policy_too() -> None:
    guard = off_guard()
    closed = asyncio.run(guard.adecide(None, path="/reset", policy="closed"))
    assert closed.outcome == "outage_closed"
    assert asyncio.run(guard.adecide(None, path="/login")).outcome == "bypassed_flag_off"


def test_bypass_leaves_a_fallback_route_without_a_header_solution_to_decide() -> None:
    guard = off_guard()
    assert guard.bypass(path="/signup", policy="fallback") is None  # its body may carry one
    assert guard.bypass(path="/reset", policy="closed").outcome == "outage_closed"  # type: ignore[union-attr]
    assert guard.bypass(path="/login").outcome == "bypassed_flag_off"  # type: ignore[union-attr]
    refused = guard.bypass(path="/signup", policy="fallback", solution="forged")
    assert refused is not None and refused.outcome == "fallback_invalid"


def test_strictest_orders_closed_over_fallback_over_open() -> None:
    assert strictest({"open", "fallback"}) == "fallback"
    assert strictest(["fallback", "closed", "open"]) == "closed"
    assert strictest(()) == "open"
    assert strictest({"unheard-of"}) == "open"  # a route's policy is validated at start-up


# --- which route a path counts under ------------------------------------------------------------

POLICIES = RoutePolicies(("/login", "/signup/", "/password-reset"), default="open",
                         routes={"/signup/": "fallback", "/password-reset": "closed"})


@pytest.mark.parametrize(("path", "expected"), [
    ("/login", ("/login", "open")),
    ("/login/extra", ("/login", "open")),
    ("/signup", ("/signup/", "fallback")),     # "/signup/" protects "/signup" too
    ("/signup/", ("/signup/", "fallback")),
    ("/password-reset", ("/password-reset", "closed")),
    ("/about", None),
])
def test_a_path_counts_under_its_protected_route(path: str,
                                                 expected: tuple[str, str] | None) -> None:
    assert POLICIES.for_path(path) == expected


@pytest.mark.parametrize("path", ["//password-reset", "/login/../password-reset",
                                  "/password%2Dreset", "/password-reset%0A", "/./password-reset"])
def test_every_spelling_of_a_closed_route_is_closed(path: str) -> None:
    found = POLICIES.for_path(path)
    assert found is not None and found[1] == "closed", path


def test_a_path_under_two_routes_gets_the_stricter_policy() -> None:
    policies = RoutePolicies(("/account/", "/account/delete"), default="open",
                             routes={"/account/delete": "closed"})
    assert policies.for_path("/account/delete") == ("/account/delete", "closed")
    assert policies.for_path("/account/settings") == ("/account/", "open")


def test_django_views_take_the_strictest_of_their_names_and_their_mark() -> None:
    policies = RoutePolicies((), default="fallback", routes={"account_login": "open",
                                                              "account_reset": "closed"})
    assert policies.for_views(["account_login"]) == "open"
    assert policies.for_views(["other"]) == "fallback"
    assert policies.for_views(["account_login"], marked="closed") == "closed"
    assert policies.for_views(["account_login", "account_reset"]) == "closed"


# --- what the browser is told ---------------------------------------------------------------------

def test_the_flag_endpoint_names_the_route_policy() -> None:
    state = EnforcementFlag(clock=FakeClock()).state
    assert flag_payload(state)["outage_policy"] is None
    assert flag_payload(state, outage_policy="fallback")["outage_policy"] == "fallback"


class Issuer:
    off_since: float | None = None

    def issue(self, *, off_since: float | None = None) -> dict[str, object]:
        self.off_since = off_since
        return {"algorithm": "SHA-256", "challenge": "c", "maxnumber": 10, "salt": "s",
                "signature": "x"}


def test_the_challenge_endpoint_answers_only_during_an_outage() -> None:
    flag = EnforcementFlag(clock=FakeClock())
    assert challenge_answer(flag.state, Issuer())[0] == 409
    assert challenge_answer(flag.state, None)[0] == 404
    flag.set_automatic(enforce=False, source="watcher", reason="outage", global_status="x")
    issuer = Issuer()
    status, body = challenge_answer(flag.state, issuer)
    assert (status, body["algorithm"]) == (200, "SHA-256")
    assert issuer.off_since == flag.state.since, "bound to this outage (issue 31, item A3)"
    assert challenge_answer(flag.state, Issuer(), mode="shadow")[0] == 409


def test_a_closed_route_tells_a_browser_it_is_briefly_unavailable() -> None:
    decision = off_guard().decide(None, path="/reset", policy="closed")
    page = rejection_html(decision).decode()
    assert "Briefly unavailable" in page and "try again in a few minutes" in page


def test_the_gate_shows_whether_a_fallback_is_configured() -> None:
    assert "fallback=off" in repr(OutageGate())
