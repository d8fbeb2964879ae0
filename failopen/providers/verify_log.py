"""What the verifier logs about each answer, paced so an incident is a few lines, not a flood.

* Unavailable, rate-limited and overloaded answers (and a replay field the vendor sent in a type
  failopen cannot read): a WARNING at most every 10 seconds, with how many were held back.
* Misconfigured answers (another vendor's ``invalid-input-secret``, a 401 from Friendly Captcha):
  an ERROR naming the vendor's codes and what to change, at most every 5 minutes.
* The spec's vendor's 401/403 (its wrong private key; ``credentials_statuses``): an ERROR, at
  most every 5 minutes, on a clock of its own.
* Everything else at DEBUG.

Nothing logged carries a secret: reasons and codes were made log-safe where the answer was read.
"""

from __future__ import annotations

import logging
import threading

from failopen.clock import Clock
from failopen.providers.base import Provider
from failopen.providers.verify_answers import MALFORMED_SESSION, VerifyOutcome, VerifyResult

__all__ = ["CREDENTIALS_LOG_INTERVAL", "VerifyLog"]

logger = logging.getLogger("failopen.verify")

CREDENTIALS_LOG_INTERVAL = 300.0  # seconds between ERROR logs about our configuration
_WARNING_INTERVAL = 10.0  # seconds between "verify unavailable" warnings during an incident
_PACED_WARNINGS = frozenset(
    {VerifyOutcome.UNAVAILABLE, VerifyOutcome.RATE_LIMITED, VerifyOutcome.OVERLOADED}
)


class VerifyLog:
    """Logs one verifier's answers (see the module docstring), paced by ``clock``."""

    def __init__(self, provider: Provider, verify_url: str, clock: Clock) -> None:
        self._provider = provider
        self._verify_url = verify_url
        self._clock = clock
        self._lock = threading.Lock()
        self._credentials_logged_at: float | None = None
        self._misconfigured_logged_at: float | None = None
        self._warned_at: float | None = None
        self._warnings_suppressed = 0
        self._action_warned = False

    def record(self, result: VerifyResult) -> None:
        """Log ``result`` as its outcome deserves."""
        outcome = result.outcome
        # A replay field of a type we cannot read refuses every token until the vendor or we
        # change: worth a (paced) warning, unlike an ordinary refusal.
        if outcome in _PACED_WARNINGS or result.reason.startswith(MALFORMED_SESSION):
            self._warn(result)
        elif outcome is VerifyOutcome.MISCONFIGURED:
            if self._error_due("_misconfigured_logged_at"):
                provider = self._provider
                logger.error(
                    "verify: %s says our configuration is wrong (%s); %s. Every request to a "
                    "protected route is refused with 503 until this is fixed.",
                    provider.title, ", ".join(result.codes) or result.reason,
                    provider.advice(result.codes[0] if result.codes else ""),
                    extra={"event": "failopen.verify_misconfigured", "vendor": provider.name,
                           "codes": list(result.codes), "status_code": result.status_code,
                           "verify_url": self._verify_url},
                )
        elif result.status_code in self._provider.credentials_statuses \
                and self._error_due("_credentials_logged_at"):
            logger.error(
                "verify: the vendor rejected our credentials (HTTP %s) at %s; check "
                "FAILOPEN_PRIVATE_KEY. Every token is rejected until this is fixed.",
                result.status_code, self._verify_url,
                extra={"event": "failopen.verify_credentials_rejected",
                       "status_code": result.status_code, "verify_url": self._verify_url},
            )
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug("verify %s: %s", outcome.value, result.reason, extra={
                "event": "failopen.verify", "outcome": outcome.value, "reason": result.reason})

    def test_secret(self) -> None:
        """The private key is one the vendor documents for tests: every token (or a dummy one)
        passes with it."""
        logger.warning(
            "verify: FAILOPEN_PRIVATE_KEY is %s's documented test secret: every token (or the "
            "vendor's dummy token) passes with it; set the site's own secret in production",
            self._provider.title,
            extra={"event": "failopen.verify_test_secret", "vendor": self._provider.name})

    def action_ignored(self, action: str) -> None:
        """An action was asked of a vendor whose answers name none (``@protect(action=...)``
        with hCaptcha, say): said once, as the setting would be refused at start-up."""
        if self._action_warned:
            return
        self._action_warned = True
        logger.warning(
            "verify: %s's answers name no action, so the action %r asked of this route cannot "
            "be checked; remove it (@protect(action=...))", self._provider.title, action,
            extra={"event": "failopen.action_unchecked", "vendor": self._provider.name})

    def _warn(self, result: VerifyResult) -> None:
        outcome = result.outcome
        suppressed = self._warning_due()
        if suppressed is None:
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("verify %s: %s", outcome.value, result.reason, extra={
                    "event": "failopen.verify_failed", "outcome": outcome.value,
                    "reason": result.reason, "suppressed": None})
            return
        logger.warning("verify %s: %s%s", outcome.value, result.reason,
                       f" ({suppressed} similar since the last warning)" if suppressed else "",
                       extra={"event": "failopen.verify_failed", "outcome": outcome.value,
                              "reason": result.reason, "suppressed": suppressed})

    def _warning_due(self) -> int | None:
        """During an incident every request fails alike: warn once per interval, with a count."""
        now = self._clock.monotonic()
        with self._lock:
            last = self._warned_at
            if last is not None and now - last < _WARNING_INTERVAL:
                self._warnings_suppressed += 1
                return None
            suppressed, self._warnings_suppressed = self._warnings_suppressed, 0
            self._warned_at = now
            return suppressed

    def _error_due(self, timer: str) -> bool:
        """True at most once per interval for each kind of ERROR (``timer`` names its clock):
        one kind cannot use up the other's line."""
        now = self._clock.monotonic()
        with self._lock:
            last = getattr(self, timer)
            if last is not None and now - last < CREDENTIALS_LOG_INTERVAL:
                return False
            setattr(self, timer, now)
            return True
