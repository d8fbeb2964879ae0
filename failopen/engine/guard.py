"""The decision every adapter asks for: enforce, bypass, or reject.

    flag off (confirmed outage or override) ................... allow, bypassed
    no reading yet, would refuse ............................... wait for the first one (bounded)
    flag on:  no token ......................................... reject 403
              verify says valid ................................ allow
              verify says invalid .............................. reject 403
              verify rate-limited (a caller can provoke 429) ... reject 503, never bypass
              verify unavailable -> confirm an outage now:
                  the status page shows one .................... allow, bypassed, flag flips
                  it does not, or cannot be read ............... reject 503 "cannot verify now"

The confirmation (:mod:`failopen.engine.confirm`) is single-flight and cached for ``confirm_ttl``: a
flood of failing verifies makes at most one status request per TTL, and nothing an attacker sends
can flip the flag by itself.

In ``shadow`` mode the guard decides as above and logs what it would have done, but always enforces.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.engine.confirm import CONFIRM_WAIT, OutageConfirmer
from failopen.engine.first_reading import FirstReading
from failopen.engine.flag import EnforcementFlag
from failopen.observe.audit import BypassAudit
from failopen.observe.metrics import NO_METRICS, Metrics
from failopen.vendor.verify import Verifier, VerifyOutcome, VerifyResult

if TYPE_CHECKING:
    from failopen.engine.flag_state import FlagState
    from failopen.engine.outcome_window import OutcomeWindow

__all__ = ["CONFIRM_WAIT", "Decision", "Guard", "OutageConfirmer", "Outcome", "fail_closed"]

logger = logging.getLogger("failopen.guard")
audit = logging.getLogger("failopen.audit")

Outcome = Literal[
    "valid", "bypassed_flag_off", "bypassed_confirmed_outage", "missing_token", "invalid_token",
    "rate_limited", "cannot_verify", "internal_error",
]

_MAX_TOKEN = 4096

@dataclass(frozen=True)
class Decision:
    """What to do with one request, and why."""

    allow: bool
    bypassed: bool
    outcome: Outcome
    reason: str
    status_code: int = 200
    retry_after: int | None = None
    shadow: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, for ``request.failopen`` and rejection bodies."""
        return {
            "allow": self.allow,
            "bypassed": self.bypassed,
            "outcome": self.outcome,
            "reason": self.reason,
            "shadow": self.shadow,
        }


def _tally_value(tally: itertools.count[int]) -> int:
    """How many times ``next()`` has been called on a counter started at 0 (its repr, "count(N)",
    is the only way to read one without moving it)."""
    return int(repr(tally)[6:-1])


def _unusable(token: str | None) -> bool:
    """True for a token no verify call is made for: none, not text, too long, unprintable."""
    return not token or not isinstance(token, str) or len(token) > _MAX_TOKEN \
        or not token.isprintable()


def fail_closed(reason: str, *, retry_after: int) -> Decision:
    """The refusal when failopen itself cannot decide (a bug, unusable settings): 503, never a
    bypass. The guard and both adapters answer it alike."""
    return Decision(allow=False, bypassed=False, outcome="internal_error", reason=reason,
                    status_code=503, retry_after=retry_after)


class Guard:
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
        #: With the verify probe (FAILOPEN_EVIDENCE=status,probe): where requests' verify
        #: outcomes are counted, one of the probe's two conditions.
        self.outcome_window: OutcomeWindow | None = None
        #: Set by the runtime: the watcher's first turn, which a request that would be refused
        #: before it waits for (a fresh worker during an outage admits as the others do).
        self.first_reading: FirstReading | None = None

    def __repr__(self) -> str:
        return f"Guard(mode={self.mode!r}, flag={self.flag!r})"

    def decide(self, token: str | None, *, path: str = "", client: str = "",
               user_agent: str = "") -> Decision:
        """Decide for one request to a protected route (``user_agent`` goes to the audit file)."""
        try:
            # Enforcement off: the decision needs neither the token nor the first reading (a
            # state that is off never comes from "default", so nothing would be waited for).
            state = self.flag.state
            if not state.enforce and self.mode == "enforce":
                return self._bypass_flag_off(state, path, client, user_agent)
            first = self._awaited_first_reading(state)
            if first is not None and _unusable(token):
                first.await_sync()
            early = self._before_verify(token, path, client, user_agent)
            if early is not None:
                return early
            started = time.perf_counter()
            result = self.verifier.verify(cast(str, token))  # _before_verify refused the rest
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
                    return self._bypass_flag_off(state, path, client, user_agent)
            confirmed = confirmer.confirm() if confirmer is not None else False
            return self._finish(self._from_verify(result, confirmed), path, client,
                                user_agent=user_agent)
        except Exception:
            return self._internal_error()

    async def adecide(self, token: str | None, *, path: str = "", client: str = "",
                      user_agent: str = "") -> Decision:
        """Async twin of :meth:`decide`."""
        try:
            state = self.flag.state
            if not state.enforce and self.mode == "enforce":
                return self._bypass_flag_off(state, path, client, user_agent)
            first = self._awaited_first_reading(state)
            if first is not None and _unusable(token):
                await first.await_async()
            early = self._before_verify(token, path, client, user_agent)
            if early is not None:
                return early
            started = time.perf_counter()
            result = await self.verifier.averify(cast(str, token))
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
                    return self._bypass_flag_off(state, path, client, user_agent)
            confirmed = await confirmer.aconfirm() if confirmer is not None else False
            return self._finish(self._from_verify(result, confirmed), path, client,
                                user_agent=user_agent)
        except Exception:
            return self._internal_error()

    def bypass(self, *, path: str = "", client: str = "", user_agent: str = ""
               ) -> Decision | None:
        """The bypass decision if one needs no token right now (flag off, enforce mode), else None.

        Lets an adapter skip reading a request body for a token nobody would look at. None means
        "call :meth:`decide` with the token": that call checks the flag again, so a flag that
        turns back on in between is enforced. Never raises.
        """
        try:
            state = self.flag.state
            if not state.enforce and self.mode == "enforce":
                return self._bypass_flag_off(state, path, client, user_agent)
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

    def _bypass_flag_off(self, state: FlagState, path: str, client: str,
                         user_agent: str) -> Decision:
        """Allow, bypassed, counted and audited: the decision for ``state``, which is off, in
        enforce mode. What ``_finish`` does for it, without the branches that cannot apply: this
        is the whole cost of a request during an outage."""
        # A per-route outage policy is one lookup here (path -> open / fallback / closed), before
        # the bypass is counted and audited.
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
        self.audit.record(path, client, decision.reason, first, user_agent, "bypassed_flag_off")
        return decision

    def _before_verify(self, token: str | None, path: str, client: str,
                       user_agent: str) -> Decision | None:
        """The decision when no verify call is needed: flag off, or no usable token."""
        state = self.flag.state
        if self.mode == "enforce" and not state.enforce:
            return self._bypass_flag_off(state, path, client, user_agent)
        if not token:
            return self._finish(self._missing, path, client)
        if _unusable(token):
            return self._finish(self._malformed, path, client)
        return None

    def _awaited_first_reading(self, state: FlagState) -> FirstReading | None:
        """The first reading to wait for, if a request refused now might be admitted once it
        has come: no reading (nor override) in ``state`` yet, and one could lift enforcement."""
        first = self.first_reading
        if first is None or not first.pending or not first.worth_waiting:
            return None
        return first if state.source == "default" and first.under_way() else None

    def _from_verify(self, result: VerifyResult, confirmed: bool) -> Decision:
        outcome = result.outcome
        if outcome is VerifyOutcome.VALID:
            return Decision(allow=True, bypassed=False, outcome="valid", reason="token verified")
        if outcome is VerifyOutcome.INVALID:
            return self._reject(403, "invalid_token", f"token rejected: {result.reason}")
        if outcome is VerifyOutcome.RATE_LIMITED:
            return self._reject(503, "rate_limited", "verify call rate-limited",
                                self._retry_after(result.retry_after))
        if outcome is VerifyOutcome.UNAVAILABLE and confirmed:
            state = self.flag.state
            return Decision(
                allow=True, bypassed=True, outcome="bypassed_confirmed_outage",
                reason=f"verify unavailable ({result.reason}); outage confirmed: {state.reason}",
            )
        # Unavailable without a confirmed outage, or any outcome this guard does not know (such as
        # our own overload): refuse for now. Only a confirmed outage ever opens the gate.
        return self._reject(
            503, "cannot_verify", f"cannot verify now ({result.reason}); no outage confirmed"
        )

    def _retry_after(self, hint: float | None) -> int:
        if hint is None or not math.isfinite(hint) or hint <= 0:
            return self.retry_after
        return min(int(hint), 3600)

    def _reject(
        self, status: int, outcome: Outcome, reason: str, retry_after: int | None = None
    ) -> Decision:
        if status == 503 and retry_after is None:
            retry_after = self.retry_after
        return Decision(
            allow=False, bypassed=False, outcome=outcome, reason=reason,
            status_code=status, retry_after=retry_after,
        )

    def _finish(
        self, decision: Decision, path: str, client: str, *, first: bool = True,
        user_agent: str = "",
    ) -> Decision:
        if self.mode == "shadow":
            decision = self._shadow(decision, path, client)
        self._count(decision.outcome)
        if decision.bypassed:
            self.audit.record(path, client, decision.reason, first=first,
                              user_agent=user_agent, outcome=decision.outcome)
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

    def _shadow(self, decision: Decision, path: str, client: str) -> Decision:
        flag_off = not self.flag.state.enforce
        if not decision.bypassed and not flag_off:
            return decision
        why = decision.reason if decision.bypassed else f"enforcement off: {self.flag.state.reason}"
        audit.warning("shadow: would bypass path=%r client=%r reason=%s", path, client, why,
                      extra={"event": "failopen.shadow_bypass", "path": path, "client": client,
                             "reason": why})
        if decision.bypassed:  # enforced instead: the token could not be verified
            return self._reject(503, "cannot_verify", f"shadow mode enforces: {decision.reason}")
        return Decision(
            allow=decision.allow, bypassed=False, outcome=decision.outcome,
            reason=decision.reason, status_code=decision.status_code,
            retry_after=decision.retry_after, shadow=True,
        )

    def _internal_error(self) -> Decision:
        # A bug in failopen must not open the gate: fall back to refusing, and say so loudly.
        logger.exception("failopen guard failed; refusing the request",
                         extra={"event": "failopen.guard_error"})
        self._count("internal_error")
        return fail_closed("failopen internal error", retry_after=self.retry_after)
