"""reCAPTCHA Enterprise (``FAILOPEN_VENDOR=recaptcha-enterprise``): an assessment per token.

The verify call creates an assessment: ``POST {FAILOPEN_VERIFY_URL}`` (the project's
``https://recaptchaenterprise.googleapis.com/v1/projects/<project>/assessments``) with
``{"event": {"token", "siteKey", "userIpAddress", "expectedAction"}}``, authenticated with an API
key (``FAILOPEN_PRIVATE_KEY``). Google's sample sends the key as ``?key=``; Google's APIs take it
in the ``X-Goog-Api-Key`` header too, which is where failopen sends it: a URL is what httpx logs
at INFO for every request, and a key in it would reach every log. ``FAILOPEN_PUBLIC_KEY`` is the
site key, required.

Its own rules: ``tokenProperties.valid`` false is a refused token whatever its ``invalidReason``
(``MALFORMED``, ``EXPIRED``, ``DUPE``, ``MISSING``, ``UNEXPECTED_ACTION``, values Google adds
later, and ``BROWSER_ERROR``: "could easily be simulated by an attacker", Google says; a token
minted for another site key is refused too, with or without a reason: the attacker's to send); a
400 or 403 (``INVALID_ARGUMENT``, ``PERMISSION_DENIED``: the API key, the project, the API not
enabled) is misconfigured; the score is ``riskAnalysis.score``, checked against
``FAILOPEN_MIN_SCORE``; the action is ``tokenProperties.action``. Tokens live two minutes. No
status page a machine can read: outage evidence is the verify probe
(``FAILOPEN_EVIDENCE=probe``).
"""

from __future__ import annotations

import re
from typing import Any

from failopen.exceptions import ConfigError
from failopen.providers.base import (
    Expectation,
    Provider,
    VerifyCall,
    codes_of,
    decode_object,
    http_failure,
    judge_claims,
)
from failopen.providers.exchange import Fetched
from failopen.providers.verify_answers import VerifyOutcome, VerifyResult

__all__ = ["RecaptchaEnterprise"]

_EVENT = "event"
# Google's documented values: kept as they are in logs (any other only where it is log-safe).
_REASONS = frozenset({"INVALID_REASON_UNSPECIFIED", "UNKNOWN_INVALID_REASON", "MALFORMED",
                      "EXPIRED", "DUPE", "MISSING", "BROWSER_ERROR", "UNEXPECTED_ACTION",
                      "SITE_MISMATCH"})
_ERRORS = frozenset({"INVALID_ARGUMENT", "PERMISSION_DENIED", "UNAUTHENTICATED", "NOT_FOUND",
                     "FAILED_PRECONDITION"})
_ADVICE = {
    "INVALID_ARGUMENT": "check FAILOPEN_PRIVATE_KEY (an API key of the project), "
                        "FAILOPEN_PUBLIC_KEY (the site key) and FAILOPEN_VERIFY_URL "
                        "(.../v1/projects/<project>/assessments)",
    "PERMISSION_DENIED": "the API key may not create assessments in this project: enable the "
                         "reCAPTCHA Enterprise API and allow the key to use it, and check the "
                         "project in FAILOPEN_VERIFY_URL",
    "UNAUTHENTICATED": "FAILOPEN_PRIVATE_KEY is not an API key Google accepts",
    "NOT_FOUND": "FAILOPEN_VERIFY_URL names no project's assessments",
}


class RecaptchaEnterprise(Provider):
    """reCAPTCHA Enterprise's assessments."""

    name = "recaptcha-enterprise"
    title = "reCAPTCHA Enterprise"
    token_field = "g-recaptcha-response"
    script_origin = "https://www.google.com"
    browser_adapter = "recaptcha"
    widgets = ("score", "visible", "invisible")
    token_lifetime = 120.0
    needs_public_key = True
    publishes_status = False
    checks_action = True  # tokenProperties.action
    # An assessment (any reason) is made only for a request whose API key and project passed.
    refusals = _REASONS

    def call(self, token: str, *, secret: str, verify_url: str, public_key: str | None,
             remote_ip: str | None, action: str | None, attempt: str) -> VerifyCall:
        event: dict[str, str] = {"token": token, "siteKey": public_key or ""}
        if remote_ip:
            event["userIpAddress"] = remote_ip
        if action:
            event["expectedAction"] = action
        # Keyed by a name: a literal "event" key reads as a log record's event name to the check
        # that every logged event is documented (tests/test_events.py).
        return VerifyCall(verify_url, json={_EVENT: event}, headers={"X-Goog-Api-Key": secret})

    def classify(self, fetched: Fetched, *, expect: Expectation,
                 secrets: tuple[str, ...]) -> VerifyResult:
        failure = http_failure(fetched, self.title)
        if failure is not None:
            return failure
        status = fetched.status_code
        body = decode_object(fetched)
        if status >= 400:
            # Google's API errors: {"error": {"code", "message", "status"}}; about our key, our
            # project or our request, never the token (a bad token is an assessment).
            codes = codes_of(_get(body, "error", "status"), secrets, _ERRORS) or (f"HTTP {status}",)
            return VerifyResult(VerifyOutcome.MISCONFIGURED,
                                f"{self.title} refused our request: {', '.join(codes)}", status,
                                codes=codes)
        properties = _get(body, "tokenProperties")
        valid = properties.get("valid") if isinstance(properties, dict) else None
        if not isinstance(valid, bool):
            return VerifyResult(VerifyOutcome.UNAVAILABLE,
                                f"{self.title} answered HTTP {status} without "
                                "tokenProperties.valid", status)
        assert isinstance(properties, dict)
        codes = codes_of(properties.get("invalidReason"), secrets, _REASONS)
        if not valid:
            why = ", ".join(codes) or "no reason"
            return VerifyResult(VerifyOutcome.INVALID, f"{self.title} refused the token: {why}",
                                status, codes=codes)
        verdict = VerifyResult(VerifyOutcome.VALID, "token verified", status, codes=codes)
        return judge_claims(verdict, expect, score=_get(body, "riskAnalysis", "score"),
                            action=properties.get("action"))

    def check_verify_url(self, url: str) -> None:
        path, _, query = url.partition("?")
        if re.search(r"(^|&)key=", query):
            raise ConfigError(
                "FAILOPEN_VERIFY_URL: carries key=; give the API key in FAILOPEN_PRIVATE_KEY, "
                "which failopen sends in a header and never logs (a URL is logged by httpx)")
        if not re.search(r"/v1/projects/[^/]+/assessments$", path.rstrip("/")):
            raise ConfigError(
                "FAILOPEN_VERIFY_URL: with FAILOPEN_VENDOR=recaptcha-enterprise, give the "
                "project's assessments URL: https://recaptchaenterprise.googleapis.com/v1/"
                "projects/<project>/assessments")

    def advice(self, code: str) -> str:
        return _ADVICE.get(code) or super().advice(code)


def _get(body: Any, *path: str) -> Any:
    """``body[path[0]][path[1]]...``, or None where a level is missing or not an object."""
    for key in path:
        if not isinstance(body, dict):
            return None
        body = body.get(key)
    return body
