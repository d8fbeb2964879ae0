"""The contract every captcha vendor's adapter keeps: one verify exchange in, one outcome out.

An adapter (a :class:`Provider`) knows one vendor's differences and nothing else: where its verify
API lives and how a request to it is spelled (:meth:`Provider.call`), what each of its answers
means (:meth:`Provider.classify`, pure: no I/O, no logging), the form field its widget fills,
its status page, how long its tokens live, and whether a verify call may be retried. The HTTP,
the deadline, the pacing of logs and the decision are shared (:mod:`failopen.providers.verify`,
:mod:`failopen.engine.guard`).

Outcomes (:class:`~failopen.providers.verify_answers.VerifyOutcome`):

* ``valid``: the vendor vouches for the token (and its score and action, where it gives them, are
  what the route expects);
* ``invalid``: bad, expired, replayed or missing token, a score below ``FAILOPEN_MIN_SCORE``, an
  action the route does not expect; 403;
* ``unavailable``: transport error, time-out, 5xx, an answer that is not the vendor's JSON, and
  the codes by which the vendor says *it* failed; the only outcome that may lead to a bypass, and
  only once the outage is confirmed elsewhere;
* ``misconfigured``: the vendor says *our* secret, site key, URL or request is wrong; 503, never
  evidence, never a bypass, logged at ERROR with what to change;
* ``rate_limited``: 429; 503, never evidence (anyone can exhaust a rate limit).

A code an adapter does not know is ``invalid``: it refuses the request, and is neither evidence
nor an admission.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from failopen.providers.exchange import Fetched, parse_retry_after
from failopen.providers.verify_answers import (
    MAX_TOKEN_LENGTH,
    VerifyOutcome,
    VerifyResult,
    safe_text,
)

__all__ = [
    "Expectation", "Provider", "StatusPreset", "VerifyCall", "codes_of", "decode_object",
    "http_failure", "judge_claims", "judge_codes", "refused_without_codes",
]

_CODES_KEPT = 8  # raw codes kept per answer: enough for any real answer, bounded for a crafted one
_CODE_LENGTH = 64
#: What stands for a code that could not be kept (it may carry a secret, the token included):
#: still a code, so a refusal with one reads as a refusal, not as an answer without codes.
WITHHELD = "(withheld)"


@dataclass(frozen=True)
class VerifyCall:
    """One verify request as a vendor wants it: where, and what it carries."""

    url: str
    json: Any = None
    data: Mapping[str, str] | None = None
    #: Where a key goes when the vendor takes it beside the body: never in the URL, which
    #: httpx logs at INFO (``HTTP Request: POST <url>``).
    headers: Mapping[str, str] | None = None


@dataclass(frozen=True)
class StatusPreset:
    """A vendor's public status page and the component that stands for its captcha."""

    url: str
    component: str
    #: Why this component: shown where the watched component is named.
    about: str


@dataclass(frozen=True)
class Expectation:
    """What the site expects of a valid token beyond the vendor's yes."""

    min_score: float = 0.5
    action: str | None = None
    require_verified: bool = False


class Provider:
    """One captcha vendor's verify API. Subclasses set the class attributes and two methods."""

    #: The name ``FAILOPEN_VENDOR`` takes.
    name: ClassVar[str]
    #: How people call it, for messages and docs.
    title: ClassVar[str]
    #: The verify endpoint; None where each customer has its own (``FAILOPEN_VERIFY_URL``).
    verify_url: ClassVar[str | None] = None
    #: The form field its widget fills with the token.
    token_field: ClassVar[str]
    #: How long a token stays verifiable, in seconds, as the vendor documents it (None: it
    #: documents none).
    token_lifetime: ClassVar[float | None]
    #: The origin its browser script loads from (the ``FAILOPEN_VENDOR_URL`` and
    #: ``FAILOPEN_FALLBACK_VENDOR_URL`` preset; the snippet appends the vendor's own path). None
    #: where each customer has its own (the spec's vendor: ``FAILOPEN_VENDOR_URL``). Its adapter,
    #: ``failopen-<name>.js``, adds the vendor's path.
    script_origin: ClassVar[str | None] = None
    #: The vendor's status page, where it has one a machine can read.
    status: ClassVar[StatusPreset | None] = None
    #: The longest token the vendor issues; a longer one is refused without a call.
    max_token_length: ClassVar[int] = MAX_TOKEN_LENGTH
    #: True only where a retried verify cannot burn a good token (an idempotency key).
    retries: ClassVar[bool] = False
    #: True where the verify call needs the site key (``FAILOPEN_PUBLIC_KEY``).
    needs_public_key: ClassVar[bool] = False
    #: False where the vendor publishes no status page a machine can read.
    publishes_status: ClassVar[bool] = True
    #: The vendor's documented codes for a refused token (bad, expired, replayed, missing):
    #: answered only once our key has passed, so one of them confirms the key.
    refusals: ClassVar[frozenset[str]] = frozenset()
    #: True where the vendor's widget adds its own hidden input to the form (``cf-turnstile-
    #: response``...): failopen's form fields then render none, since an empty input of the same
    #: name posted first would hide the token (the server reads a name's first value only).
    widget_posts_field: ClassVar[bool] = True
    #: True where an answer names the action the token was minted for (FAILOPEN_EXPECTED_ACTIONS
    #: and ``@protect(action=...)`` can only be checked there).
    checks_action: ClassVar[bool] = False
    #: Statuses by which the vendor refuses our private key while it reads as a refused token
    #: (the spec's vendor's 401/403): logged at ERROR, paced, as a wrong key.
    credentials_statuses: ClassVar[frozenset[int]] = frozenset()
    #: Its browser adapter beside ``failopen.js``, ``failopen-<this>.js`` (the snippet names the
    #: file after the vendor, Enterprise's after reCAPTCHA's, which drives both); None: the
    #: spec's vendor, whose own script the snippet drives.
    browser_adapter: ClassVar[str | None] = None
    #: The widget modes its browser adapter renders (``FAILOPEN_WIDGET``), the default first:
    #: ``visible`` (the widget in the form), ``invisible`` (run on submit), ``score`` (a token
    #: for the route's action on submit, no widget). Empty: the spec's vendor, which has none.
    widgets: ClassVar[tuple[str, ...]] = ("visible", "invisible")
    #: The vendor's documented test secrets, with which every (or a dummy) token passes: never
    #: for a site in production (``failopen check`` says so).
    test_secrets: ClassVar[frozenset[str]] = frozenset()

    def call(self, token: str, *, secret: str, verify_url: str, public_key: str | None,
             remote_ip: str | None, action: str | None, attempt: str) -> VerifyCall:
        """The request that verifies ``token``; ``attempt`` is the same for a retry of it."""
        raise NotImplementedError

    def classify(self, fetched: Fetched, *, expect: Expectation,
                 secrets: tuple[str, ...]) -> VerifyResult:
        """What a complete answer means (pure: no I/O, no logging)."""
        raise NotImplementedError

    def confirms_key(self, result: VerifyResult) -> bool:
        """True when ``result``, the answer to a made-up token, could only come from a vendor
        that accepted our key (``failopen check``): a refusal of the token by its own codes."""
        return result.outcome is VerifyOutcome.INVALID and bool(result.codes) \
            and all(code in self.refusals for code in result.codes)

    def check_verify_url(self, url: str) -> None:
        """ConfigError when ``url`` cannot be this vendor's verify endpoint (a checked URL)."""

    def advice(self, code: str) -> str:
        """What to change when the vendor answered ``code`` about our configuration."""
        return "check FAILOPEN_PRIVATE_KEY, FAILOPEN_PUBLIC_KEY and FAILOPEN_VERIFY_URL"

    def __repr__(self) -> str:
        return f"<provider {self.name}>"


def decode_object(fetched: Fetched) -> dict[str, Any] | None:
    """The answer as a JSON object, or None (empty, not JSON, too deep, another type)."""
    if not fetched.content.strip():
        return None
    try:
        body = json.loads(fetched.content)
    except (ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def http_failure(fetched: Fetched, title: str) -> VerifyResult | None:
    """The outcome every vendor shares for an answer its body cannot change: 429 is
    rate-limited; 5xx and statuses no vendor answers a verify call with (a final 1xx/3xx) are
    unavailable; None for the rest, which the adapter reads."""
    status = fetched.status_code
    if status == 429:
        try:
            retry_after = parse_retry_after(fetched.headers.get("retry-after"))
        except Exception:  # a hint only: a bad header must not turn 429 into an exception
            retry_after = None
        return VerifyResult(VerifyOutcome.RATE_LIMITED, f"{title} rate limit (HTTP 429)", status,
                            retry_after)
    if status >= 500 or status < 200 or 300 <= status < 400:
        return VerifyResult(VerifyOutcome.UNAVAILABLE, f"{title} answered HTTP {status}", status)
    return None


def codes_of(value: Any, secrets: tuple[str, ...], known: frozenset[str]) -> tuple[str, ...]:
    """The vendor's codes as kept: strings only, at most a few. A code the adapter knows is kept
    as it is (a constant of ours, whatever it shares with a secret: ``sitekey-secret-mismatch``
    and a secret holding ``-secret-``); any other is kept where it is log-safe, else as
    :data:`WITHHELD`, so what was sent decides the outcome, not what can be shown of it (a token
    that shares a few characters with a code must not turn a refusal into another outcome)."""
    items = value if isinstance(value, list) else [value]
    kept = []
    for item in items[:_CODES_KEPT]:
        if isinstance(item, str) and item.strip():
            text = item if item in known else safe_text(item, secrets, _CODE_LENGTH)
            kept.append(text or WITHHELD)
    return tuple(kept)


def judge_claims(result: VerifyResult, expect: Expectation, *, score: Any = None,
                 action: Any = None) -> VerifyResult:
    """A valid result checked against what the route expects: its score (where the answer
    carries one) at least ``min_score``, its action the route's (where the route names one)."""
    if not result.valid:
        return result
    status, codes = result.status_code, result.codes
    if score is not None:
        try:  # an integer of 400 digits is JSON, and no float: OverflowError
            readable = not isinstance(score, bool) and isinstance(score, (int, float)) \
                and math.isfinite(score)
        except OverflowError:
            readable = False
        if not readable:
            return VerifyResult(VerifyOutcome.INVALID, "score unreadable", status, codes=codes)
        if score < expect.min_score:
            return VerifyResult(VerifyOutcome.INVALID,
                                f"low score: {score:g} < {expect.min_score:g}", status,
                                codes=codes, score=float(score), low_score=True)
    if expect.action is not None and action != expect.action:
        shown = safe_text(action, (), _CODE_LENGTH) if isinstance(action, str) else None
        return VerifyResult(VerifyOutcome.INVALID,
                            f"action {shown or 'missing'!s}, expected {expect.action}", status,
                            codes=codes, score=None if score is None else float(score))
    if score is None:
        return result
    return VerifyResult(result.outcome, result.reason, status, codes=codes, score=float(score))


def judge_codes(codes: tuple[str, ...], status: int, *, title: str,
                misconfigured: frozenset[str], unavailable: frozenset[str]) -> VerifyResult:
    """A refusal read from the vendor's codes: one about our configuration wins (every token
    would fail alike), then one that says the vendor failed; any other code, known or not, and
    no code at all, is a refused token."""
    shown = ", ".join(codes) or "no code"
    if any(code in misconfigured for code in codes):
        return VerifyResult(VerifyOutcome.MISCONFIGURED,
                            f"{title} refused our configuration: {shown}", status, codes=codes)
    if any(code in unavailable for code in codes):
        return VerifyResult(VerifyOutcome.UNAVAILABLE, f"{title} failed: {shown}", status,
                            codes=codes)
    return VerifyResult(VerifyOutcome.INVALID, f"{title} refused the token: {shown}", status,
                        codes=codes)


#: Statuses by which an endpoint refuses *us*, whatever the token: the key, the URL, the method.
_REFUSES_US = frozenset({401, 403, 404, 405})


def refused_without_codes(status: int, title: str) -> VerifyResult:
    """A 4xx whose body names no code: about our credentials or URL (401, 403, 404, 405), or
    else about this request, which is the token's (invalid, as every 4xx is without a reason)."""
    if status in _REFUSES_US:
        return VerifyResult(VerifyOutcome.MISCONFIGURED,
                            f"{title} refused our request (HTTP {status})", status,
                            codes=(f"HTTP {status}",))
    return VerifyResult(VerifyOutcome.INVALID, f"{title} refused the request (HTTP {status})",
                        status)
