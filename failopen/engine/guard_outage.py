"""The guard's decisions while enforcement is off: the route's outage policy, sync and async.

:class:`~failopen.engine.guard.Guard` decides with the vendor's verify call while enforcing; this
base holds what it does once enforcement is off (or an outage is confirmed for one request): ask
the :class:`~failopen.engine.outage.OutageGate`, then count, audit and name the challenge that
admitted a request (``altcha`` or the second vendor's name).

The async twins exist for the gate's network calls, which ``adecide`` must await instead of
blocking its event loop: with a second vendor (``FAILOPEN_FALLBACK_VENDOR``) the check of a
fallback answer is a verify call, and in fleet mode the outage rate limit and the used-solution
record are in the fleet's Redis (:meth:`OutageGate.arefuse` asks it on a bounded pool of
threads). Without either, both take the same sync path. That pool is bounded: a request whose
gate check finds it full is refused (503 ``cannot_verify``, with ``Retry-After``), never admitted.
"""

from __future__ import annotations

from collections.abc import Iterator

from failopen.engine.decision import Decision, Outcome, refusal
from failopen.engine.flag import EnforcementFlag
from failopen.engine.flag_state import FlagState
from failopen.engine.outage import OutageGate, Refusal
from failopen.fallback.handoff import HandoffFull
from failopen.observe.audit import BypassAudit
from failopen.providers.verify_answers import VerifyResult

__all__ = ["OutageDecisions"]


class OutageDecisions:
    """What a protected route's request gets while enforcement is off (the Guard's base)."""

    flag: EnforcementFlag
    gate: OutageGate
    mode: str
    audit: BypassAudit
    retry_after: int
    actions: dict[str, str]
    _bypass_for: tuple[object, Decision] | None
    _fallback_for: tuple[object, Decision] | None
    _bypassed_tally: Iterator[int]  # an itertools.count

    def _finish(self, decision: Decision, path: str, client: str, *, first: bool = True,
                user_agent: str = "", route: str = "", policy: str = "open") -> Decision:
        raise NotImplementedError  # the Guard's: count, audit or log

    def _action(self, action: str | None, route: str, path: str) -> str | None:
        """The action the token must carry: the caller's, else the route's
        (FAILOPEN_EXPECTED_ACTIONS)."""
        if action is not None:
            return action
        actions = self.actions
        return actions.get(route or path) if actions else None

    def _remote(self, policy: str) -> bool:
        """True when this request's gate check is a network call (a fallback route answered by
        the second vendor): the async path must await it."""
        return policy == "fallback" and self.gate.verifies_remotely

    def _bypass_flag_off(self, state: FlagState, path: str, client: str, user_agent: str,
                         policy: str = "open", route: str = "", solution: str | None = None,
                         action: str | None = None, checked: bool = False) -> Decision:
        """The decision for ``state``, which is off, in enforce mode: the route's outage policy
        (``open``, within the outage rate limit, is allowed, bypassed, counted and audited).
        For an open route without a rate limit, what ``_finish`` does without the branches that
        cannot apply: this is the whole cost of such a request during an outage. ``checked``:
        the async path has had the gate admit it already."""
        gate = self.gate
        if policy != "open" or gate.rate is not None:
            if not checked:
                refused = gate.refuse(policy, route=route or path, client=client,
                                      solution=solution, off_since=state.since,
                                      resumed_at=state.resumed_at,
                                      action=self._action(action, route, path)
                                      if self._remote(policy) else None)
                if refused is not None:
                    return self._finish(self._refused(refused), path, client)
            if policy == "fallback":
                return self._bypass_fallback(state, path, client, user_agent, route)
        cached = self._bypass_for
        if cached is not None and cached[0] is state:
            decision, first = cached[1], False
        else:
            decision = Decision(
                allow=True, bypassed=True, outcome="bypassed_flag_off",
                reason=f"enforcement off ({state.source}): {state.reason}",
            )
            self._bypass_for, first = (state, decision), True
        next(self._bypassed_tally)
        # The policy is open here (the gate refused or sent on every other); the audit's
        # default, not passed: one argument less on the busiest path of an outage.
        self.audit.record(path, client, decision.reason, first, user_agent, "bypassed_flag_off",
                          route)
        return decision

    async def _abypass_flag_off(self, state: FlagState, path: str, client: str,
                                user_agent: str, policy: str = "open", route: str = "",
                                solution: str | None = None,
                                action: str | None = None) -> Decision:
        """The async twin of :meth:`_bypass_flag_off`: the second vendor's call is awaited, and
        the fleet's Redis is asked off the event loop (:meth:`OutageGate.arefuse`)."""
        if not self._remote(policy) and not self.gate.blocks(policy):
            return self._bypass_flag_off(state, path, client, user_agent, policy, route,
                                         solution)
        try:
            refused = await self.gate.arefuse(policy, route=route or path, client=client,
                                              solution=solution, off_since=state.since,
                                              resumed_at=state.resumed_at,
                                              action=self._action(action, route, path))
        except HandoffFull:
            return self._finish(self._busy(), path, client)
        if refused is not None:
            return self._finish(self._refused(refused), path, client)
        return self._bypass_flag_off(state, path, client, user_agent, policy, route, solution,
                                     checked=True)

    def _bypass_fallback(self, state: FlagState, path: str, client: str,
                         user_agent: str, route: str) -> Decision:
        cached = self._fallback_for
        first = cached is None or cached[0] is not state
        if cached is not None and not first:
            decision = cached[1]
        else:
            decision = Decision(
                allow=True, bypassed=True, outcome="bypassed_fallback",
                reason=f"enforcement off ({state.source}): {state.reason}; fallback challenge "
                       f"solved{self._named()}",
            )
            self._fallback_for = (state, decision)
        return self._finish(decision, path, client, first=first, user_agent=user_agent,
                            route=route, policy="fallback")

    def _bypass_confirmed(self, result: VerifyResult, path: str, client: str, user_agent: str,
                          policy: str, route: str, solution: str | None,
                          action: str | None = None, refused: Refusal | None = None,
                          checked: bool = False) -> Decision:
        """The verify call is unavailable and the status page confirms an outage: the route's
        outage policy decides, as it does while the flag is off. Shadow mode enforces without
        asking the gate, which would spend a client's rate allowance and use up its solution.
        ``checked``: the async path has asked the gate already (its answer is ``refused``)."""
        state = self.flag.state
        if self.mode != "shadow" and not checked:
            refused = self.gate.refuse(policy, route=route or path, client=client,
                                       solution=solution, off_since=state.since,
                                       resumed_at=state.resumed_at,
                                       action=self._action(action, route, path)
                                       if self._remote(policy) else None)
        if refused is not None:
            return self._finish(self._refused(refused), path, client)
        fallback = policy == "fallback"
        outcome: Outcome = "bypassed_fallback" if fallback else "bypassed_confirmed_outage"
        passed = f"; fallback challenge solved{self._named()}" if fallback and self._named() \
            else ""
        return self._finish(Decision(
            allow=True, bypassed=True, outcome=outcome,
            reason=f"verify unavailable ({result.reason}); outage confirmed: {state.reason}"
                   f"{passed}",
        ), path, client, user_agent=user_agent, route=route, policy=policy)

    async def _abypass_confirmed(self, result: VerifyResult, path: str, client: str,
                                 user_agent: str, policy: str, route: str,
                                 solution: str | None, action: str | None) -> Decision:
        """The async twin of :meth:`_bypass_confirmed`: the gate's network calls awaited."""
        if self.mode == "shadow" or not (self._remote(policy) or self.gate.blocks(policy)):
            return self._bypass_confirmed(result, path, client, user_agent, policy, route,
                                          solution)
        try:
            state = self.flag.state
            refused = await self.gate.arefuse(policy, route=route or path, client=client,
                                              solution=solution, off_since=state.since,
                                              resumed_at=state.resumed_at,
                                              action=self._action(action, route, path))
        except HandoffFull:
            return self._finish(self._busy(), path, client)
        return self._bypass_confirmed(result, path, client, user_agent, policy, route,
                                      solution, refused=refused, checked=True)

    def _named(self) -> str:
        """The second vendor's name for a reason (ALTCHA's reasons read as they always did)."""
        return f" ({self.gate.vendor.name})" if self.gate.vendor is not None else ""

    def _busy(self) -> Decision:
        """The refusal when the gate's Redis steps could not even be queued (the hand-off pool
        is full: Redis slow under a flood). Not logged as a bug: the pool's bound did its job."""
        return refusal(503, "cannot_verify", "the outage checks are busy (the fallback's "
                       "hand-off pool is full); retry shortly", self.retry_after)

    def _refused(self, refused: Refusal) -> Decision:
        return refusal(refused.status_code, refused.outcome, refused.reason,
                       self.retry_after if refused.status_code == 503
                       and refused.retry_after is None else refused.retry_after)
