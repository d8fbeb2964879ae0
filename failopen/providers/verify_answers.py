"""What the vendor's verify answer means: five outcomes, and the pure mapping to them.

The rules that decide whether a token or an answer could ever lead to fail-open live here, apart
from the HTTP in :class:`~failopen.verify.HttpVerifier`, so they read and test as plain functions
(no I/O, no logging) of a token, an answer or a fetch error. :mod:`failopen.providers.verify`
re-exports the public names.

The spec defines the body only as far as ``session_details.solved`` /
``session_details.verified`` and an ``error`` key; unknown fields are ignored, except the two by
which the vendor refuses a session: ``previously_verified`` (the token was verified before: a
replay) and ``session_timed_out``.

==========================================================  ============  ========================
Answer                                                      Outcome       Why
==========================================================  ============  ========================
2xx, ``session_details.solved`` true                        VALID         (with ``require_verified``
                                                                          also ``verified`` true)
2xx, ``previously_verified`` or ``session_timed_out`` true  INVALID       "token replayed: verified
                                                                          before" / "session timed
                                                                          out"; checked before
                                                                          ``solved``
2xx, either of those neither boolean, null nor absent       INVALID       cannot be read as "fresh"
(``"false"``, ``0``)
2xx, solved true but verified false, ``require_verified``   INVALID
2xx, solved false                                           INVALID
2xx or 4xx with an ``error`` key whose value is not null    INVALID       even beside solved true
429                                                         RATE_LIMITED  a caller can provoke it
401 / 403                                                   INVALID       our private key is wrong:
                                                                          logged at ERROR, at most
                                                                          every 5 minutes
any other 4xx, JSON or not                                  INVALID       see below
5xx, other unexpected statuses (e.g. a final 3xx)           UNAVAILABLE
2xx that is empty, not JSON, or JSON of another shape       UNAVAILABLE   no session_details and
(no session_details, solved/verified not booleans)                        no error
timeout, connection refused/reset, truncated body,          UNAVAILABLE
body over ``max_bytes``, redirect to another origin
no free slot for the call before the deadline (async:       OVERLOADED    our own process could not
``_MAX_IN_FLIGHT`` calls per event loop in flight; sync:                  get the call out in time:
no free verify worker thread); no request was sent                        never evidence of a vendor
                                                                          outage; the guard answers
                                                                          503 without asking the
                                                                          status page
empty token, longer than 4096 characters, or not            INVALID       decided locally: no
printable ASCII                                                           network call
==========================================================  ============  ========================

Security decisions:

* UNAVAILABLE is the only outcome that can lead to fail-open (and only after the status page
  confirms an outage), so nothing the caller controls may produce it. The token is the only input
  an attacker controls: an odd token is INVALID before any I/O (a lone surrogate would otherwise
  break JSON encoding and look like a transport error), and every 4xx, JSON body or not, is
  INVALID, because a 4xx answers something about *this* request. A 429 is RATE_LIMITED, never
  UNAVAILABLE: anyone can exhaust a rate limit.
* One solved token admits one request: a replayed token (``previously_verified``) or one whose
  session timed out is INVALID, never UNAVAILABLE, so replaying it can neither pass nor count as
  a sign of an outage. Both fields absent or null make no claim (the spec does not define them);
  any other non-boolean value refuses the token, because a replay must not slip through a
  vendor's change of type. There is deliberately no switch to accept replays.
* Request volume is attacker-controlled too, so a call that waited in our own queue past the
  deadline (async in-flight cap, sync worker threads) is OVERLOADED, never UNAVAILABLE.
* ``retry_after`` is a hint from the vendor: it is kept finite and at most an hour.
* A vendor that answered a crafted token with 5xx would be a vendor bug; the guard still needs a
  confirmed outage on the status page before it bypasses.
* An ``error`` key whose value is ``null`` is treated as absent, so a vendor that adds
  ``"error": null`` to successful answers does not lock every user out; any other value is an
  error.
* The private key and the token never appear in logs, reprs, reasons or exceptions. Text taken
  from the vendor's answer or from a transport error is kept only when it is short printable ASCII
  sharing no 8-character run with either secret.
"""

from __future__ import annotations

import enum
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from failopen.exceptions import (
    FetchError,
    FetchOverloaded,
    FetchTimeout,
    RedirectRefused,
    ResponseTooLarge,
)
from failopen.providers.exchange import Fetched, parse_retry_after

__all__ = [
    "MALFORMED_SESSION",
    "MAX_TOKEN_LENGTH",
    "VerifyOutcome",
    "VerifyResult",
    "check_token",
    "classify",
    "safe_text",
]

MAX_TOKEN_LENGTH = 4096

_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]+")
_SHARED_RUN = 8  # a fragment this long shared with a secret withholds the text
_DETAIL_LIMIT = 64
#: How the reason of a token refused for an unreadable replay field starts (logged as a warning:
#: a vendor that changed the field's type would refuse every token).
MALFORMED_SESSION = "malformed session_details."
# Session fields that refuse a token solved before; the first that says so gives the reason.
_SESSION_REFUSALS = (
    ("previously_verified", "token replayed: verified before"),
    ("session_timed_out", "session timed out"),
)
_MAX_RETRY_AFTER = 3600.0  # seconds; a longer (or non-finite) Retry-After hint is cut to this


class VerifyOutcome(str, enum.Enum):
    """What the verify call said about a token."""

    VALID = "valid"
    INVALID = "invalid"
    UNAVAILABLE = "unavailable"
    RATE_LIMITED = "rate_limited"
    OVERLOADED = "overloaded"
    #: The vendor says our own secret, site key, URL or request is wrong (never evidence).
    MISCONFIGURED = "misconfigured"


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of one verify call, with a short log-safe reason."""

    outcome: VerifyOutcome
    reason: str
    status_code: int | None = None
    retry_after: float | None = None
    #: The vendor's own codes for this answer (``error-codes``, ``invalidReason``...), log-safe.
    codes: tuple[str, ...] = ()
    #: The answer's score, where the vendor gives one (reCAPTCHA v3, Enterprise).
    score: float | None = None
    #: True when the token was good but its score below ``FAILOPEN_MIN_SCORE``.
    low_score: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "retry_after", _clamp_retry_after(self.retry_after))

    @property
    def valid(self) -> bool:
        """True only when the vendor said the token is good."""
        return self.outcome is VerifyOutcome.VALID


def _clamp_retry_after(value: object) -> float | None:
    """A usable Retry-After hint: finite, in ``[0, _MAX_RETRY_AFTER]`` seconds, or None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]  # anything float() takes
    except (TypeError, ValueError, OverflowError):
        return None
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER)  # inf becomes the cap


def safe_text(text: str, secrets: tuple[str, ...], limit: int) -> str | None:
    """``text`` cut to printable ASCII and ``limit`` chars, or None if it may carry a secret
    (shares a run of 8 characters with one of ``secrets``)."""
    text = "".join(ch for ch in text if " " <= ch <= "~")[:limit].strip()
    if not text:
        return None
    for secret in secrets:
        if not secret:
            continue
        if len(secret) < _SHARED_RUN:
            if secret in text:
                return None
        elif any(
            text[i : i + _SHARED_RUN] in secret for i in range(len(text) - _SHARED_RUN + 1)
        ):
            return None
    return text


def check_token(token: str, max_length: int = MAX_TOKEN_LENGTH) -> VerifyResult | None:
    """INVALID for a token no vendor would issue (decided without I/O), else None."""
    if not isinstance(token, str) or not token:
        return VerifyResult(VerifyOutcome.INVALID, "no token")
    if len(token) > max_length:
        return VerifyResult(
            VerifyOutcome.INVALID, f"token longer than {max_length} characters"
        )
    if not _PRINTABLE_ASCII.fullmatch(token):
        return VerifyResult(VerifyOutcome.INVALID, "token has characters outside printable ASCII")
    return None


def _decode(content: bytes) -> Any:
    """The body as JSON, or raise ValueError."""
    try:
        return json.loads(content)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _error_detail(body: Any, secrets: tuple[str, ...]) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):  # tolerate {"error": {"code": ..., "message": ...}}
        error = error.get("code") or error.get("message")
    if not isinstance(error, str):
        return ""
    detail = safe_text(error, secrets, _DETAIL_LIMIT)
    return f": {detail}" if detail else ""


def classify(
    fetched: Fetched, *, require_verified: bool, secrets: tuple[str, ...]
) -> VerifyResult:
    """Map a complete HTTP answer to a result (pure: no I/O, no logging)."""
    status = fetched.status_code
    unavailable, invalid = VerifyOutcome.UNAVAILABLE, VerifyOutcome.INVALID

    def result(
        outcome: VerifyOutcome, reason: str, retry_after: float | None = None
    ) -> VerifyResult:
        return VerifyResult(outcome, reason, status, retry_after)

    if status == 429:
        try:
            retry_after = parse_retry_after(fetched.headers.get("retry-after"))
        except Exception:  # a hint only: a bad header must not turn 429 into an exception
            retry_after = None
        return result(VerifyOutcome.RATE_LIMITED, "vendor rate limit (HTTP 429)", retry_after)
    if status in (401, 403):
        return result(invalid, f"vendor rejected our credentials (HTTP {status})")
    if 400 <= status < 500:
        try:
            body = _decode(fetched.content)
        except ValueError:
            return result(invalid, f"vendor refused the request (HTTP {status}, non-JSON body)")
        return result(
            invalid, f"vendor refused the request (HTTP {status}){_error_detail(body, secrets)}"
        )
    if not 200 <= status < 300:
        return result(unavailable, f"vendor answered HTTP {status}")
    if not fetched.content.strip():
        return result(unavailable, f"vendor answered HTTP {status} with an empty body")
    try:
        body = _decode(fetched.content)
    except ValueError:
        return result(unavailable, f"vendor answered HTTP {status} with a non-JSON body")
    if not isinstance(body, dict):
        return result(unavailable, "vendor answer is JSON but not an object")
    if body.get("error") is not None:
        return result(invalid, f"vendor denied the token{_error_detail(body, secrets)}")
    details = body.get("session_details")
    if not isinstance(details, dict):
        return result(unavailable, "vendor answer has neither session_details nor error")
    # Before solved: a replay or a timed-out session is the vendor saying no, whatever else the
    # answer holds or lacks, and must never be read as "unavailable" (a step towards fail-open).
    refused = _session_refused(details)
    if refused is not None:
        return result(invalid, refused)
    solved = details.get("solved")
    if not isinstance(solved, bool):
        return result(unavailable, "vendor answer has no boolean session_details.solved")
    if not solved:
        return result(invalid, "challenge not solved")
    if not require_verified:
        return result(VerifyOutcome.VALID, "solved")
    verified = details.get("verified")
    if not isinstance(verified, bool):
        return result(unavailable, "vendor answer has no boolean session_details.verified")
    if not verified:
        return result(invalid, "solved but not verified")
    return result(VerifyOutcome.VALID, "solved and verified")


def _session_refused(details: dict[str, Any]) -> str | None:
    """Why the vendor refuses this session (replayed, timed out), or None when it does not.

    ``true`` refuses; ``false``, ``null`` or an absent field makes no claim. Any other value
    (``"false"``, ``0``) cannot be read as "fresh", so it refuses too.
    """
    for name, reason in _SESSION_REFUSALS:
        value = details.get(name)
        if value is True:
            return reason
        if value is not None and value is not False:
            return f"{MALFORMED_SESSION}{name} ({type(value).__name__}); refused"
    return None


def _from_fetch_error(exc: FetchError, secrets: tuple[str, ...]) -> VerifyResult:
    outcome = VerifyOutcome.UNAVAILABLE
    if isinstance(exc, FetchOverloaded):  # checked first: it says nothing about the vendor
        kind, outcome = "overloaded", VerifyOutcome.OVERLOADED
    elif isinstance(exc, FetchTimeout):
        kind = "timeout"
    elif isinstance(exc, ResponseTooLarge):
        kind = "answer too large"
    elif isinstance(exc, RedirectRefused):
        kind = "redirect refused"
    else:
        kind = "transport error"
    try:
        text = str(exc)
    except Exception:  # never let a broken exception turn a result into a crash
        text = ""
    detail = safe_text(text, secrets, 160)
    reason = f"{kind}: {detail}" if detail else kind
    return VerifyResult(outcome, reason)
