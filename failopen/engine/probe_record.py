"""One verify probe's result, and its stored form in a fleet's Redis store.

The leader publishes each probe's result under ``<prefix>probe``; the other processes read it with
their sync and count it through their own :class:`~failopen.probe.VerifyProbe`. A stored value is
parsed as strictly as the published status reading (:func:`failopen.fleet.parse_reading`):
anything failopen did not write is a :class:`~failopen.exceptions.StoreError`, never a result.
``verify`` says which verify URL the probe called (:mod:`failopen.engine.fleet_identity`): a result
of another, or one without (an older failopen), is parsed but never counted.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from failopen.engine.fleet_identity import stored_hash
from failopen.exceptions import StoreError
from failopen.providers.verify import VerifyOutcome, VerifyResult

__all__ = ["ProbeResult", "Verdict", "parse_probe", "verdict_of"]

#: What one probe says: the vendor answered (``healthy``), it did not (``failed``: the verify
#: outcomes that count as unavailable), or the probe says nothing (``skipped``: our own process
#: could not send it in time).
Verdict = Literal["healthy", "failed", "skipped"]

_MAX_TEXT = 200
_MAX_STORED = 4 * 1024
_FUTURE_SKEW = 60.0  # a result dated further ahead than this is garbage, not a fresh result


def verdict_of(result: VerifyResult) -> Verdict:
    """The probe's verdict on one verify result (the verifier's own classification, reused).

    Only UNAVAILABLE (timeout, transport error, 5xx, unusable body) is a failure. Any answer the
    vendor gave in time is healthy: an invalid-token answer (what the synthetic token gets), a
    429, even a rejected private key. OVERLOADED (no free worker, no request sent) and any outcome
    this version does not know say nothing about the vendor.
    """
    outcome = result.outcome
    if outcome is VerifyOutcome.UNAVAILABLE:
        return "failed"
    if outcome in (VerifyOutcome.VALID, VerifyOutcome.INVALID, VerifyOutcome.RATE_LIMITED,
                   VerifyOutcome.MISCONFIGURED):
        return "healthy"
    return "skipped"


@dataclass(frozen=True)
class ProbeResult:
    """One probe: its verdict, the verify outcome and its log-safe reason, and when (wall clock)."""

    verdict: Verdict
    outcome: str
    reason: str
    at: float
    #: In fleet mode: ``<process id>:<sequence>`` and the process that sent it; "" otherwise.
    id: str = ""
    by: str = ""
    #: In fleet mode: the hash of the verify URL the probe called (None: unknown).
    verify: str | None = None

    def to_json(self) -> str:
        """The stored form."""
        return json.dumps({
            "id": self.id, "by": self.by, "at": self.at, "verdict": self.verdict,
            "outcome": self.outcome, "reason": self.reason[:_MAX_TEXT], "verify": self.verify,
        }, sort_keys=True)


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or len(value) > _MAX_TEXT or not value.isprintable():
        raise StoreError(f"the published probe result has no usable {key!r}")
    return value


def parse_probe(raw: Any, *, now: float) -> ProbeResult | None:
    """The published probe result (None: none yet); StoreError for anything failopen did not
    write (too large, not JSON, a verdict or outcome it does not know, a time in the future)."""
    if raw is None:
        return None
    if not isinstance(raw, (bytes, str)) or len(raw) > _MAX_STORED:
        raise StoreError("the published probe result is larger than failopen writes")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError, TypeError, UnicodeDecodeError):
        raise StoreError("the published probe result is not JSON") from None
    if not isinstance(data, dict):
        raise StoreError("the published probe result is not an object")
    at = data.get("at")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) \
            or not 0 < at <= now + _FUTURE_SKEW:
        # A result dated in the future would never grow old: refused, never trusted.
        raise StoreError("the published probe result has no usable time")
    verdict = data.get("verdict")
    outcome = data.get("outcome")
    known = {o.value for o in VerifyOutcome}
    if verdict not in ("healthy", "failed") or outcome not in known:
        raise StoreError("the published probe result has no usable verdict")
    # The verdict must be the one this version would give the outcome: a forged "failed" beside
    # an "invalid" outcome is garbage, not evidence.
    if verdict_of(VerifyResult(VerifyOutcome(outcome), "")) != verdict:
        raise StoreError("the published probe result's verdict does not match its outcome")
    return ProbeResult(verdict=verdict, outcome=outcome, reason=_text(data, "reason"),
                       at=float(at), id=_text(data, "id"), by=_text(data, "by"),
                       verify=stored_hash(data.get("verify")))
