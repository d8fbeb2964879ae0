"""The decision every adapter asks for: enforce, bypass, or reject.

    flag off (confirmed outage or override) ................... allow, bypassed
    no reading yet, would refuse ............................... wait for the first one (bounded;
                                                                 one thread per process waits,
                                                                 the others decide at once)
    flag on:  no token ......................................... reject 403
              verify says valid ................................ allow
              verify says invalid .............................. reject 403 (low_score: 403 too)
              verify rate-limited (a caller can provoke 429) ... reject 503, never bypass
              verify misconfigured (our key, URL, request) ..... reject 503, never bypass
              verify unavailable -> confirm an outage now:
                  the status page shows one .................... allow, bypassed, flag flips
                  it does not, or cannot be read ............... reject 503 "cannot verify now"

The confirmation (:mod:`failopen.engine.confirm`) is single-flight and cached for ``confirm_ttl``: a
flood of failing verifies makes at most one status request per TTL, and nothing an attacker sends
can flip the flag by itself.

In ``shadow`` mode the guard decides as above and logs what it would have done, but always enforces
(:mod:`failopen.engine.shadow`).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING, Literal, cast, get_args

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.engine.confirm import CONFIRM_WAIT, OutageConfirmer
from failopen.engine.decision import Decision, Outcome, fail_closed, refusal, verify_decision
from failopen.engine.first_reading import FirstReading
from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard_outage import OutageDecisions
from failopen.engine.outage import OutageGate
from failopen.engine.shadow import shadow_decision
from failopen.observe.audit import BypassAudit
from failopen.observe.metrics import NO_METRICS, Metrics
from failopen.providers.verify import (
    Verifier,
    VerifyOutcome,
    VerifyResult,
    averify_in_context,
    verify_in_context,
)

if TYPE_CHECKING:
    from failopen.engine.flag_state import FlagState
    from failopen.engine.outcome_window import OutcomeWindow

__all__ = ["CONFIRM_WAIT", "Decision", "Guard", "OutageConfirmer", "Outcome", "fail_closed"]

logger = logging.getLogger("failopen.guard")

_MAX_TOKEN = 4096


def _tally_value(tally: itertools.count[int]) -> int:
    """How many times ``next()`` has been called on a counter started at 0 (its repr, "count(N)",
    is the only way to read one without moving it)."""
    return int(repr(tally)[6:-1])


def _unusable(token: str | None) -> bool:
    """True for a token no verify call is made for: none, not text, too long, unprintable."""
    return not token or not isinstance(token, str) or len(token) > _MAX_TOKEN \
        or not token.isprintable()


class Guard(OutageDecisions):
    """Turns the flag, the token and the verify call into a Decision. Never raises."""

    #: Set by the runtime (failopen.metrics): counts decisions and times verify calls.
    metrics: Metrics = NO_METRICS

    def __init__(
        self,
        flag: EnforcementFlag,
        verifier: Verifier,
        confirmer: OutageConfirmer | None,
        *,
        mode: Literal["enforce", "shadow"] = "enforce",
        retry_after: int = 5,
        audit: BypassAudit | None = None,
    ) -> None:
        self.flag = flag
        self.audit = audit if audit is not None else BypassAudit()
        # What was counted under one flag state is written before the next one begins.
        flag.add_listener(lambda old, new: self.audit.flush())
        self.verifier = verifier
        self.confirmer = confirmer
        self.mode = mode
        self.retry_after = retry_after
        # One counter per outcome, bumped without a lock: ``next()`` on an itertools.count is a
        # single C call under the GIL, so no increment is lost, and a decision costs no lock (a
        # lock per decision was a tenth of a bypass). The lock only adds an outcome not named in
        # Outcome.
        self._counts_lock = threading.Lock()
        renew_locks_after_fork(self, "_counts_lock")
        self._tallies: dict[str, itertools.count[int]] = {
            outcome: itertools.count() for outcome in get_args(Outcome)}
        self._bypassed_tally = self._tallies["bypassed_flag_off"]
        # Decisions that do not depend on the request are built once: the hot paths (flag off,
        # no token) then cost a comparison instead of a dataclass construction per request.
        self._missing = self._reject(403, "missing_token", "no enforcement token")
        self._malformed = self._reject(403, "invalid_token", "malformed enforcement token")
        self._bypass_for: tuple[object, Decision] | None = None
        self._fallback_for: tuple[object, Decision] | None = None
        #: Set by the runtime: what a route does while enforcement is off (its outage policy,
        #: the outage rate limit, the fallback challenge). The default gate has no rate limit
        #: and no fallback: ``open`` routes open, ``closed`` and ``fallback`` ones refuse.
        self.gate = OutageGate(retry_after=retry_after)
        #: With the verify probe (FAILOPEN_EVIDENCE=status,probe): where requests' verify
        #: outcomes are counted, one of the probe's two conditions.
        self.outcome_window: OutcomeWindow | None = None
        #: Set by the runtime (FAILOPEN_EXPECTED_ACTIONS): the action each route's tokens must
        #: carry.
        self.actions: dict[str, str] = {}
        #: Set by the runtime: the watcher's first turn, which a request that would be refused
        #: before it waits for (a fresh worker during an outage admits as the others do).
        self.first_reading: FirstReading | None = None

    def __repr__(self) -> str:
        return f"Guard(mode={self.mode!r}, flag={self.flag!r})"

    def decide(self, token: str | None, *, path: str = "", client: str = "",
               user_agent: str = "", policy: str = "open", route: str = "",
               solution: str | None = None, action: str | None = None) -> Decision:
        """Decide for one request to a protected route (``user_agent`` goes to the audit file).

        ``policy`` is the route's outage policy, ``route`` the protected route it counts under
        (the outage rate limit's key; the path when empty) and ``solution`` the fallback
        challenge solution the request carries: they matter only while enforcement is off.
        ``action`` is the one a token must have been minted for (reCAPTCHA v3, Enterprise,
        Turnstile); None: the route's in ``actions``, if any. ``client`` goes to the vendor as
        the client's address where it takes one.
        """
        try:
            # Enforcement off: the decision needs neither the token nor the first reading (a
            # state that is off never comes from "default", so nothing would be waited for).
            state = self.flag.state
            if not state.enforce and self.mode == "enforce":
                return self._bypass_flag_off(state, path, client, user_agent, policy, route,
                                             solution, action)
            first = self._awaited_first_reading(state)
            if first is not None and _unusable(token):
                first.await_sync()
            state = self.flag.state  # again: it may have turned while the first reading came
            if self.mode == "enforce" and not state.enforce:
                return self._bypass_flag_off(state, path, client, user_agent, policy, route,
                                             solution, action)
            early = self._token_refusal(token, path, client, policy)
            if early is not None:
                return early
            started = time.perf_counter()
            result = verify_in_context(  # _before_verify refused every token but a str
                self.verifier, cast(str, token), remote_ip=client or None,
                action=self._action(action, route, path))
            self._timed(started)
            self._observe_outcome(result)
            confirmer = self.confirmer if result.outcome is VerifyOutcome.UNAVAILABLE else None
            # Refused now, but perhaps not once the first reading is in (the confirmer waits
            # for it itself, as for any check under way).
            first = self._awaited_first_reading(self.flag.state) if confirmer is None \
                and result.outcome is not VerifyOutcome.VALID else None
            if first is not None:
                first.await_sync()
                state = self.flag.state
                if self.mode == "enforce" and not state.enforce:
                    return self._bypass_flag_off(state, path, client, user_agent, policy, route,
                                                 solution, action)
            confirmed = confirmer.confirm() if confirmer is not None else False
            if confirmed and result.outcome is VerifyOutcome.UNAVAILABLE:
                return self._bypass_confirmed(result, path, client, user_agent, policy, route,
                                              solution, action)
            return self._finish(verify_decision(result, retry_after=self.retry_after), path, client,
                                user_agent=user_agent, policy=policy)
        except Exception:
            return self._internal_error()

    async def adecide(self, token: str | None, *, path: str = "", client: str = "",
                      user_agent: str = "", policy: str = "open", route: str = "",
                      solution: str | None = None, action: str | None = None) -> Decision:
        """Async twin of :meth:`decide`."""
        try:
            state = self.flag.state
            if not state.enforce and self.mode == "enforce":
                return await self._abypass_flag_off(state, path, client, user_agent, policy,
                                                    route, solution, action)
            first = self._awaited_first_reading(state)
            if first is not None and _unusable(token):
                await first.await_async()
            state = self.flag.state
            if self.mode == "enforce" and not state.enforce:
                return await self._abypass_flag_off(state, path, client, user_agent, policy,
                                                    route, solution, action)
            early = self._token_refusal(token, path, client, policy)
            if early is not None:
                return early
            started = time.perf_counter()
            result = await averify_in_context(
                self.verifier, cast(str, token), remote_ip=client or None,
                action=self._action(action, route, path))
            self._timed(started)
            self._observe_outcome(result)
            confirmer = self.confirmer if result.outcome is VerifyOutcome.UNAVAILABLE else None
            # Refused now, but perhaps not once the first reading is in (the confirmer waits
            # for it itself, as for any check under way).
            first = self._awaited_first_reading(self.flag.state) if confirmer is None \
                and result.outcome is not VerifyOutcome.VALID else None
            if first is not None:
                await first.await_async()
                state = self.flag.state
                if self.mode == "enforce" and not state.enforce:
                    return await self._abypass_flag_off(state, path, client, user_agent, policy,
                                                        route, solution, action)
            confirmed = await confirmer.aconfirm() if confirmer is not None else False
            if confirmed and result.outcome is VerifyOutcome.UNAVAILABLE:
                return await self._abypass_confirmed(result, path, client, user_agent, policy,
                                                     route, solution, action)
            return self._finish(verify_decision(result, retry_after=self.retry_after), path, client,
                                user_agent=user_agent, policy=policy)
        except Exception:
            return self._internal_error()

    def bypass(self, *, path: str = "", client: str = "", user_agent: str = "",
               policy: str = "open", route: str = "", solution: str | None = None
               ) -> Decision | None:
        """The decision if it needs no token right now (flag off, enforce mode), else None.

        Lets an adapter skip reading a request body for a token nobody would look at. None means
        "call :meth:`decide` with the token": that call checks the flag again, so a flag that
        turns back on in between is enforced. A ``fallback`` route without a ``solution`` (none
        in a header) is None too: its solution may be in the body. So is one whose answer the
        second vendor checks (FAILOPEN_FALLBACK_VENDOR): that is a verify call over the network,
        which :meth:`adecide` awaits (this is sync, and async adapters call it on their event
        loop), made with the caller's action. Never raises.
        """
        try:
            state = self.flag.state
            if not state.enforce and self.mode == "enforce" \
                    and (solution is not None or policy != "fallback") \
                    and not self._remote(policy):
                return self._bypass_flag_off(state, path, client, user_agent, policy, route,
                                             solution)
        except Exception:
            logger.exception("failopen bypass check failed; deciding with the token instead",
                             extra={"event": "failopen.guard_error"})
        return None

    async def abypass(self, *, path: str = "", client: str = "", user_agent: str = "",
                      policy: str = "open", route: str = "", solution: str | None = None
                      ) -> Decision | None:
        """The async twin of :meth:`bypass`, for adapters on an event loop: where the route's
        outage policy asks the fleet's Redis (the outage rate limit, the used-solution record),
        it is asked off the loop (:meth:`OutageGate.arefuse`). Never raises."""
        try:
            if not self.gate.blocks(policy):
                return self.bypass(path=path, client=client, user_agent=user_agent,
                                   policy=policy, route=route, solution=solution)
            state = self.flag.state
            if not state.enforce and self.mode == "enforce" \
                    and (solution is not None or policy != "fallback") \
                    and not self._remote(policy):
                return await self._abypass_flag_off(state, path, client, user_agent, policy,
                                                    route, solution)
        except Exception:
            logger.exception("failopen bypass check failed; deciding with the token instead",
                             extra={"event": "failopen.guard_error"})
        return None

    def counts(self) -> dict[str, int]:
        """How many decisions of each outcome this process has made."""
        counts = {outcome: _tally_value(tally) for outcome, tally in list(self._tallies.items())}
        return {outcome: n for outcome, n in counts.items() if n}

    # --- internals --------------------------------------------------------------------------

    def _timed(self, started: float) -> None:
        try:
            self.metrics.verify_call(time.perf_counter() - started)
        except Exception:  # counting must never turn a decision into an error
            logger.exception("metrics failed", extra={"event": "failopen.metrics_failed"})

    def _fallback_admitted(self, challenge: str) -> None:
        try:
            self.metrics.fallback_admitted(challenge)
        except Exception:  # counting must never turn a decision into an error
            logger.exception("metrics failed", extra={"event": "failopen.metrics_failed"})

    def _observe_outcome(self, result: VerifyResult) -> None:
        window = self.outcome_window
        if window is not None:
            window.record(result)

    def _count(self, outcome: str) -> None:
        tally = self._tallies.get(outcome)
        if tally is None:
            with self._counts_lock:
                tally = self._tallies.setdefault(outcome, itertools.count())
        next(tally)

    def _token_refusal(self, token: str | None, path: str, client: str,
                       policy: str) -> Decision | None:
        """The refusal when no verify call is needed: no usable token."""
        if not token:
            return self._finish(self._missing, path, client, policy=policy)
        if _unusable(token):
            return self._finish(self._malformed, path, client, policy=policy)
        return None

    def _awaited_first_reading(self, state: FlagState) -> FirstReading | None:
        """The first reading to wait for, if a request refused now might be admitted once it
        has come: no reading (nor override) in ``state`` yet, and one could lift enforcement."""
        first = self.first_reading
        if first is None or not first.pending or not first.worth_waiting:
            return None
        return first if state.source == "default" and first.under_way() else None

    def _reject(
        self, status: int, outcome: Outcome, reason: str, retry_after: int | None = None
    ) -> Decision:
        return refusal(status, outcome, reason,
                       self.retry_after if status == 503 and retry_after is None else retry_after)

    def _finish(
        self, decision: Decision, path: str, client: str, *, first: bool = True,
        user_agent: str = "", route: str = "", policy: str = "open",
    ) -> Decision:
        """Count, audit or log ``decision``. ``route`` and ``policy`` name, for a bypass's audit
        line, the protected route it counted under (the path when empty) and its outage policy."""
        if self.mode == "shadow":
            state = self.flag.state
            decision = shadow_decision(
                decision, enforce=state.enforce, flag_reason=state.reason, path=path,
                client=client, policy=policy, retry_after=self.retry_after,
                challenge=self.gate.challenge if policy == "fallback" else "")
        self._count(decision.outcome)
        if decision.bypassed:
            # Which challenge admitted it (``altcha`` or the second vendor's name), for the
            # audit and the metrics: a reviewer tells a proof of work from a vendor's check.
            challenge = self.gate.challenge if decision.outcome == "bypassed_fallback" else ""
            if challenge:
                self._fallback_admitted(challenge)
            self.audit.record(path, client, decision.reason, first=first,
                              user_agent=user_agent, outcome=decision.outcome, route=route,
                              policy=policy, challenge=challenge)
        elif not decision.allow:
            if logger.isEnabledFor(logging.INFO):
                logger.info("reject path=%r status=%d reason=%s", path, decision.status_code,
                            decision.reason, extra={
                                "event": "failopen.rejected", "path": path,
                                "status_code": decision.status_code,
                                "outcome": decision.outcome, "reason": decision.reason})
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug("allow path=%r reason=%s", path, decision.reason, extra={
                "event": "failopen.allowed", "path": path, "outcome": decision.outcome,
                "reason": decision.reason})
        return decision

    def _internal_error(self) -> Decision:
        # A bug in failopen must not open the gate: fall back to refusing, and say so loudly.
        logger.exception("failopen guard failed; refusing the request",
                         extra={"event": "failopen.guard_error"})
        self._count("internal_error")
        return fail_closed("failopen internal error", retry_after=self.retry_after)
