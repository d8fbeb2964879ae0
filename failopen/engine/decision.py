"""A request's decision: what a protected route answers, and why (``failopen.Decision``).

Every outcome has a name the metrics, the audit file and the flag endpoint's clients read:
the admitted ones (``valid``, and the ``bypassed_*`` ones that skipped the vendor check), and
the refusals (403, 429, or 503 with ``Retry-After``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Decision", "Outcome", "fail_closed"]

Outcome = Literal[
    "valid", "bypassed_flag_off", "bypassed_confirmed_outage", "bypassed_fallback",
    "missing_token", "invalid_token", "rate_limited", "cannot_verify", "internal_error",
    "outage_closed", "outage_rate_limited", "fallback_required", "fallback_invalid",
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
