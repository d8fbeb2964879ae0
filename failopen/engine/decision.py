"""A request's decision: what a protected route answers, and why (``failopen.Decision``).

Every outcome has a name the metrics, the audit file and the flag endpoint's clients read:
the admitted ones (``valid``, and the ``bypassed_*`` ones that skipped the vendor check), and
the refusals (403, 429, or 503 with ``Retry-After``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from failopen.providers.verify_answers import VerifyOutcome, VerifyResult

__all__ = ["Decision", "Outcome", "fail_closed", "public_outcome", "refusal", "verify_decision"]

# Outcomes a client is told as another: a misconfiguration is ours, not the person's (and no
# business of a prober's), and a low score must not become an oracle for tuning a bot.
_PUBLIC_OUTCOMES = {"misconfigured": "cannot_verify", "low_score": "invalid_token"}


def public_outcome(outcome: str) -> str:
    """The outcome as a client may be told it: every refusal body, form error and error code
    (the logs, the metrics and ``request.failopen`` keep the real one)."""
    return _PUBLIC_OUTCOMES.get(outcome, outcome)

Outcome = Literal[
    "valid", "bypassed_flag_off", "bypassed_confirmed_outage", "bypassed_fallback",
    "missing_token", "invalid_token", "rate_limited", "cannot_verify", "internal_error",
    "outage_closed", "outage_rate_limited", "fallback_required", "fallback_invalid",
    "misconfigured", "low_score", "fallback_unavailable",
]


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


def fail_closed(reason: str, *, retry_after: int) -> Decision:
    """The refusal when failopen itself cannot decide (a bug, unusable settings): 503, never a
    bypass. The guard and both adapters answer it alike."""
    return Decision(allow=False, bypassed=False, outcome="internal_error", reason=reason,
                    status_code=503, retry_after=retry_after)


def refusal(status: int, outcome: Outcome, reason: str, retry_after: int | None) -> Decision:
    """A refused request: ``status`` (403, 429, 503) with its outcome, reason and hint."""
    return Decision(allow=False, bypassed=False, outcome=outcome, reason=reason,
                    status_code=status, retry_after=retry_after)


def verify_decision(result: VerifyResult, *, retry_after: int) -> Decision:
    """A verify answer as a decision while enforcement is on; ``retry_after`` is the default
    hint of a 503. A confirmed outage is the guard's to decide (the route's outage policy
    applies there), never this one's."""
    outcome = result.outcome
    if outcome is VerifyOutcome.VALID:
        return Decision(allow=True, bypassed=False, outcome="valid", reason="token verified")
    if outcome is VerifyOutcome.INVALID:
        return refusal(403, "low_score" if result.low_score else "invalid_token",
                       f"token rejected: {result.reason}", None)
    if outcome is VerifyOutcome.RATE_LIMITED:
        hint = result.retry_after
        return refusal(503, "rate_limited", "verify call rate-limited",
                       min(int(hint), 3600) if hint is not None and math.isfinite(hint)
                       and hint > 0 else retry_after)
    if outcome is VerifyOutcome.MISCONFIGURED:
        # Ours to fix, not the person's: a 503 they may retry, never a bypass.
        return refusal(503, "misconfigured",
                       f"cannot verify now ({result.reason}); our verify settings are wrong",
                       retry_after)
    # Unavailable without a confirmed outage, or any outcome not known here (such as our own
    # overload): refuse for now. Only a confirmed outage ever opens the gate.
    return refusal(503, "cannot_verify",
                   f"cannot verify now ({result.reason}); no outage confirmed", retry_after)
