"""What a protected route does while enforcement is off: its outage policy.

A confirmed outage (or the probe, or an operator's ``override off``) turns the vendor check off;
it does not have to open the route. Each route follows one of three policies
(``FAILOPEN_OUTAGE_POLICY``, ``FAILOPEN_OUTAGE_POLICY_ROUTES``):

- ``open``: admitted unchecked, as before (``bypassed``), within the outage rate limit;
- ``fallback``: admitted only with a solved, unused, unexpired self-hosted proof-of-work challenge
  issued during this outage (not in an earlier one, however short the gap), or
  (``FAILOPEN_FALLBACK_VENDOR``) a token the second vendor's verify
  call vouches for (``bypassed_fallback``), within the outage rate limit; otherwise
  ``fallback_required`` or ``fallback_invalid`` (403), and ``fallback_unavailable`` (503 with
  ``Retry-After``) when the second vendor cannot answer: never an admission, never evidence;
- ``closed``: refused with 503 and ``Retry-After`` (``outage_closed``).

Over the rate limit: 429 ``outage_rate_limited`` with ``Retry-After``. The limit counts the
requests admitted without a vendor check, per client address and route: a cheap check comes
first, so a flood over the limit costs no challenge verification (nor a second vendor's verify
call), and the admission is counted in one step with a last check, so concurrent requests cannot
slip over it together. With a second vendor the count comes before its call and counts every
answer checked, admitted or not: each costs a remote call and a slot of a bounded pool, so one
client's junk stops at its allowance. The steps with I/O are the second vendor's verify call and,
in fleet mode, the rate limit and the used-solution record in the fleet's Redis:
:meth:`OutageGate.refuse` makes them blocking (sync adapters), :meth:`OutageGate.arefuse` awaits
them (the verify call on the loop, the Redis steps on a bounded pool of threads: never a blocking
call on an event loop); both run the same steps.

The gate knows the fallback's pieces (``failopen.fallback``) only by what it asks of them, and
never raises: a piece that fails refuses the request (a bug must not open a route).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from failopen.fallback.handoff import off_loop
from failopen.fallback.second_vendor import ALTCHA
from failopen.fallback.settings import OUTAGE_POLICIES
from failopen.providers.verify_answers import VerifyOutcome, VerifyResult

__all__ = [
    "ChallengeSource", "FallbackVendor", "OutageGate", "OutagePolicy", "RateLimit", "Refusal",
    "SolutionCheck", "SolutionChecker", "UsedSolutions", "strictest",
]

OutagePolicy = Literal["open", "fallback", "closed"]
# From the most to the least permissive, as OUTAGE_POLICIES lists them.
_STRICTNESS: dict[str, int] = {policy: rank for rank, policy in enumerate(OUTAGE_POLICIES)}


def strictest(policies: tuple[str, ...] | list[str] | set[str]) -> OutagePolicy:
    """The strictest of ``policies`` (``closed`` over ``fallback`` over ``open``): where two
    routes could claim one request, it gets the stricter; ``open`` when there is none."""
    best = "open"
    for policy in policies:
        if policy in _STRICTNESS and _STRICTNESS[policy] > _STRICTNESS[best]:
            best = policy
    return best  # type: ignore[return-value]  # one of OUTAGE_POLICIES


class SolutionCheck(Protocol):
    """One checked solution: ``failopen.fallback.SolutionCheck``."""

    @property
    def ok(self) -> bool: ...

    @property
    def reason(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def expires_at(self) -> float: ...

    @property
    def issued_at(self) -> float: ...


class ChallengeSource(Protocol):
    """Issues fallback challenges (``GET <prefix>/challenge``): ``FallbackChallenges``."""

    def issue(self, *, off_since: float | None = None) -> dict[str, Any]: ...


class SolutionChecker(Protocol):
    """Checks a fallback solution's signature, answer and age: ``FallbackChallenges``."""

    def check(self, payload: str, *, issued_after: float,
              began_after: float | None = None) -> SolutionCheck: ...


class UsedSolutions(Protocol):
    """Remembers used solutions until they expire (this process, or the fleet's Redis)."""

    def claim(self, key: str, expires_at: float, *, issued_at: float | None = None) -> bool: ...


class RateLimit(Protocol):
    """The outage rate limit (``FAILOPEN_OUTAGE_RATE``), per client address and route."""

    def test(self, client: str, route: str) -> int | None: ...

    def hit(self, client: str, route: str) -> int | None: ...


class FallbackVendor(Protocol):
    """The second vendor's verify call: ``failopen.fallback.SecondVendor``."""

    @property
    def name(self) -> str: ...

    def verify(self, token: str, *, client: str, action: str | None) -> VerifyResult: ...

    async def averify(self, token: str, *, client: str, action: str | None) -> VerifyResult: ...


@dataclass(frozen=True)
class Refusal:
    """A refusal the gate decided: the Guard turns it into a Decision."""

    status_code: int
    outcome: Literal["outage_closed", "outage_rate_limited", "fallback_required",
                     "fallback_invalid", "fallback_unavailable"]
    reason: str
    retry_after: int | None = None


class OutageGate:
    """Applies a route's outage policy to one request made while enforcement is off."""

    def __init__(
        self,
        *,
        rate: RateLimit | None = None,
        challenges: SolutionChecker | None = None,
        used: UsedSolutions | None = None,
        retry_after: int = 5,
        issue_skew: float = 0.0,
        vendor: FallbackVendor | None = None,
    ) -> None:
        self.rate = rate
        #: The second vendor (FAILOPEN_FALLBACK_VENDOR): a fallback route's challenge instead of
        #: ALTCHA's; Config never configures both.
        self.vendor = vendor
        #: Seconds a challenge may predate this process's outage: another process of the fleet
        #: may have seen the outage (and issued challenges) up to a poll interval earlier.
        self.issue_skew = issue_skew
        self.challenges = challenges
        self.used = used
        self.retry_after = retry_after
        # Refusals that do not depend on the request are built once.
        self._closed = Refusal(503, "outage_closed", "enforcement off; this route is closed "
                               "during an outage", retry_after)
        self._required = Refusal(403, "fallback_required", "enforcement off; this route needs "
                                 "a solved fallback challenge and none was sent")

    def __repr__(self) -> str:
        fallback = self.challenge if self.challenges is not None or self.vendor else "off"
        return f"OutageGate(rate={self.rate!r}, fallback={fallback})"

    @property
    def challenge(self) -> str:
        """What a fallback route asks for: ``altcha`` or the second vendor's name."""
        vendor = self.vendor
        return vendor.name if vendor is not None else ALTCHA

    @property
    def verifies_remotely(self) -> bool:
        """True when a fallback answer is checked by a network call (a second vendor): the
        async adapters must then use :meth:`arefuse`."""
        return self.vendor is not None

    def refuse(self, policy: str, *, route: str, client: str, solution: str | None,
               off_since: float, action: str | None = None,
               resumed_at: float | None = None) -> Refusal | None:
        """None when the request may pass unchecked (``open``, or ``fallback`` with a good
        answer, within the rate limit; the admission is counted), else the refusal.

        ``off_since``: when enforcement last turned off; a challenge issued before it (less
        :attr:`issue_skew`) was issued while enforcing and is refused. ``resumed_at``: when
        enforcement last resumed before that (None: not since this process started); a challenge
        issued in an outage that began before it belongs to an earlier outage and is refused,
        however close to ``off_since`` it was issued: :attr:`issue_skew` never reaches back
        into a time this process enforced after an outage. ``action``: the one the route's
        tokens must carry, for a second vendor that checks actions.
        """
        refused = self.before_check(policy, route=route, client=client, solution=solution)
        if refused is not None:
            return refused
        if policy == "fallback":
            vendor = self.vendor
            if vendor is not None:
                # Spent before the call: each answer costs a remote call, so the attempt is
                # what one client's allowance bounds, not only the admission.
                return self.admit(client, route) or _vendor_refusal(vendor.verify(
                    solution or "", client=client, action=action), self.retry_after)
            refused = self._check(solution or "", off_since - self.issue_skew, resumed_at)
            if refused is not None:
                return refused
        return self.admit(client, route)

    async def arefuse(self, policy: str, *, route: str, client: str, solution: str | None,
                      off_since: float, action: str | None = None,
                      resumed_at: float | None = None) -> Refusal | None:
        """The async twin of :meth:`refuse`, which never blocks the event loop: the second
        vendor's verify call is awaited, and the steps that go to the fleet's Redis (the rate
        limit's test and count, the used-solution claim) run on the hand-off pool
        (:mod:`failopen.fallback.handoff`), all of them in one job."""
        vendor = self.vendor
        if policy == "fallback" and vendor is not None:
            steps = functools.partial(self._allowance, policy, route, client, solution)
            refused = await off_loop(steps) if self.blocks(policy) else steps()
            # Spent before the call, as in refuse().
            return refused or _vendor_refusal(await vendor.averify(
                solution or "", client=client, action=action), self.retry_after)
        check = functools.partial(self.refuse, policy, route=route, client=client,
                                  solution=solution, off_since=off_since,
                                  resumed_at=resumed_at)
        return await off_loop(check) if self.blocks(policy) else check()

    def blocks(self, policy: str) -> bool:
        """True when a request under ``policy`` may wait on the fleet's Redis here (the rate
        limit, or for ``fallback`` the used-solution record): an event loop must not make
        those calls itself. (The second vendor's call is :attr:`verifies_remotely`.)"""
        if policy == "open":
            return getattr(self.rate, "blocking", False) is True
        if policy == "fallback":
            return getattr(self.rate, "blocking", False) is True \
                or getattr(self.used, "blocking", False) is True
        return False  # closed, and an unknown policy: refused before any call

    def _allowance(self, policy: str, route: str, client: str,
                   solution: str | None) -> Refusal | None:
        """The second vendor's route: the checks before its call, and the attempt counted."""
        return self.before_check(policy, route=route, client=client, solution=solution) \
            or self.admit(client, route)

    def before_check(self, policy: str, *, route: str, client: str,
                     solution: str | None) -> Refusal | None:
        """The refusal decided before any answer is checked: closed (and unknown) policies, a
        fallback route without an answer, and on a fallback route the cheap rate-limit test (a
        flood over the limit costs no verification)."""
        if policy != "fallback":
            # An open route has nothing to check: admit()'s hit alone checks and counts, and the
            # test would only repeat it (a Redis round trip in a fleet).
            return None if policy == "open" else self._closed  # closed, unknown: never open
        if not solution:
            return self._required
        rate = self.rate
        if rate is not None:
            wait = rate.test(client, route)
            if wait is not None:
                return Refusal(429, "outage_rate_limited",
                               f"over the outage rate limit ({route})", wait)
        return None

    def admit(self, client: str, route: str) -> Refusal | None:
        """Count the admission; the refusal when it is over the limit after all."""
        rate = self.rate
        if rate is not None:
            # Counted and checked in one step: a burst of concurrent requests that all passed
            # the test above still cannot go over the limit together.
            wait = rate.hit(client, route)
            if wait is not None:
                return Refusal(429, "outage_rate_limited",
                               f"over the outage rate limit ({route})", wait)
        return None

    def _check(self, solution: str, issued_after: float,
               began_after: float | None) -> Refusal | None:
        challenges, used = self.challenges, self.used
        if challenges is None or used is None:  # the settings checks make this unreachable
            return Refusal(403, "fallback_invalid", "no fallback challenge is configured")
        checked = challenges.check(solution, issued_after=issued_after, began_after=began_after)
        if not checked.ok:
            return Refusal(403, "fallback_invalid", f"fallback solution refused: {checked.reason}")
        if not used.claim(checked.key, checked.expires_at, issued_at=checked.issued_at):
            return Refusal(403, "fallback_invalid", "fallback solution refused: already used")
        return None


def _vendor_refusal(result: VerifyResult, retry_after: int) -> Refusal | None:
    """The second vendor's verdict as the gate's: valid passes; a refused token (bad, junk,
    replayed: the vendor's single use, low score, wrong action) is 403; anything else (its
    verify unavailable, rate-limited, misconfigured, our queue full) is 503, never a bypass and
    never outage evidence: nothing here reaches the flag."""
    outcome = result.outcome
    if outcome is VerifyOutcome.VALID:
        return None
    if outcome is VerifyOutcome.INVALID:
        return Refusal(403, "fallback_invalid", f"fallback token refused: {result.reason}")
    wait = result.retry_after if outcome is VerifyOutcome.RATE_LIMITED else None
    return Refusal(503, "fallback_unavailable",
                   f"the fallback challenge cannot be verified now: {result.reason}",
                   max(int(wait), retry_after) if wait else retry_after)
