"""A fake of reCAPTCHA Enterprise's ``projects.assessments.create``, for a site that uses it.

``POST /v1/projects/{project}/assessments?key=<API key>`` (or the key in ``X-Goog-Api-Key``) with
JSON ``{"event": {"token", "siteKey", "expectedAction", "userIpAddress", "userAgent"}}``. The API
key is :attr:`private_key`; the project is ``project`` (default ``"test-project"``). A checked
token is 200: ``{"name": "projects/<number>/assessments/<id>", "event": {...the event...},
"riskAnalysis": {"score", "reasons": []}, "tokenProperties": {"valid", "invalidReason",
"hostname", "action", "createTime"}}``, ``invalidReason`` being

==============================  =============================================================
``INVALID_REASON_UNSPECIFIED``  a valid token
``MISSING``                     an empty or absent ``event.token``
``MALFORMED``                   a token never issued (:attr:`BAD`, junk)
``DUPE``                        a token assessed before
``EXPIRED``                     a token first assessed 120 s (two minutes) or more after it was
                                issued
``BROWSER_ERROR``               a token issued with ``browser_error=True``
``SITE_MISMATCH``               a token issued for another site key than ``event.siteKey``
==============================  =============================================================

(``UNKNOWN_INVALID_REASON`` exists too; nothing here produces it.) An invalid token scores 0.0.
Errors use Google's envelope ``{"error": {"code", "message", "status"}}``: no API key, 403
``PERMISSION_DENIED``; a wrong one, 400 ``INVALID_ARGUMENT`` "API key not valid. Please pass a
valid API key." with its ``API_KEY_INVALID`` detail, as Google answers; another project, 403
``PERMISSION_DENIED``; a body that is not JSON, or without an ``event`` object or its
``siteKey``, 400 ``INVALID_ARGUMENT``. The faults ``"500"``, ``"429"`` and ``"503"`` answer
``INTERNAL``, ``RESOURCE_EXHAUSTED`` and ``UNAVAILABLE`` in the same envelope.

Google's sample answer omits ``invalidReason`` for a valid token (a protobuf default); the fake
always sends it. A v3-style score defaults to 0.9, the action to the empty string.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.testing._server import FakeRequest, Reply
from failopen.testing.providers._base import (
    DOCUMENTED,
    CaptchaVerifyFake,
    Lifetime,
    Redemption,
    Solve,
)
from failopen.testing.providers._wire import iso_millis, json_fields

__all__ = ["FakeRecaptchaEnterpriseVerify"]

_ROUTE = re.compile(r"/v1/projects/([^/]+)/assessments")
_DEFAULT_SCORE = 0.9
_NEVER = "1970-01-01T00:00:00Z"
_API_KEY_INVALID = {
    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
    "reason": "API_KEY_INVALID",
    "domain": "googleapis.com",
    "metadata": {"service": "recaptchaenterprise.googleapis.com"},
}
_STATUS_ERRORS = {
    500: ("INTERNAL", "Internal error encountered."),
    429: ("RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Assessments' of service "
                                "'recaptchaenterprise.googleapis.com'."),
    503: ("UNAVAILABLE", "The service is currently unavailable."),
}
_REASONS = {Redemption.UNKNOWN: "MALFORMED", Redemption.DUPLICATE: "DUPE",
            Redemption.EXPIRED: "EXPIRED"}


def google_error(code: int, status: str, message: str, *,
                 headers: list[tuple[str, str]] | None = None,
                 details: list[dict[str, Any]] | None = None) -> Reply:
    """Google's error envelope."""
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = details
    return Reply.json({"error": error}, status=code, headers=headers or [])


class FakeRecaptchaEnterpriseVerify(CaptchaVerifyFake):
    """reCAPTCHA Enterprise assessments: token properties, risk scores, Google's errors."""

    vendor = "recaptcha-enterprise"
    token_field = "g-recaptcha-response"
    lifetime = 120.0
    CLAIMS = frozenset({"hostname", "score", "action", "site_key", "browser_error"})
    DEFAULT_PRIVATE_KEY = "AIzaSyFAKE-recaptcha-enterprise-api-key0"
    DEFAULT_PUBLIC_KEY = "6LfakeEEEEEEEFakeEnterpriseSiteKey000000"
    #: The number Google names the project by in assessment names.
    PROJECT_NUMBER = "123456789012"

    def __init__(
        self,
        *,
        private_key: str | None = None,
        public_key: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        token_lifetime: float | None | Lifetime = DOCUMENTED,
        project: str = "test-project",
    ) -> None:
        self.project = project
        self.path = f"/v1/projects/{project}/assessments"
        self._assessments = itertools.count(1)
        super().__init__(private_key=private_key, public_key=public_key, clock=clock,
                         token_lifetime=token_lifetime)

    def _serves(self, path: str) -> bool:
        # Every project's route exists; another project's answers 403, as Google's would.
        return _ROUTE.fullmatch(path) is not None

    def _read(self, request: FakeRequest) -> dict[str, Any] | None:
        return json_fields(request)

    def _token_in(self, fields: dict[str, Any] | None) -> Any:
        event = None if fields is None else fields.get("event")
        return event.get("token") if isinstance(event, dict) else None

    def _answer(self, request: FakeRequest, fields: dict[str, Any] | None) -> Reply:
        key = request.query.get("key", [""])[0] or request.headers.get("x-goog-api-key", "")
        if not key:
            return google_error(403, "PERMISSION_DENIED", "The request is missing a valid API key.")
        if key != self.private_key:
            return google_error(400, "INVALID_ARGUMENT",
                                "API key not valid. Please pass a valid API key.",
                                details=[_API_KEY_INVALID])
        match = _ROUTE.fullmatch(request.path)
        project = match.group(1) if match else ""
        if project != self.project:
            return google_error(403, "PERMISSION_DENIED",
                                f"Permission 'recaptchaenterprise.assessments.create' denied on "
                                f"resource 'projects/{project}' (or it may not exist).")
        if fields is None:
            return google_error(400, "INVALID_ARGUMENT",
                                "Invalid JSON payload received. Unexpected token.")
        event = fields.get("event")
        if not isinstance(event, dict) or not isinstance(event.get("siteKey"), str):
            return google_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument.")
        return Reply.json(self._assessment(event))

    def _assessment(self, event: dict[str, Any]) -> dict[str, Any]:
        token = event.get("token")
        solve: Solve | None = None
        if not isinstance(token, str) or not token:
            reason = "MISSING"
        else:
            found, solve = self._redeem(token)
            reason = _REASONS.get(found, "INVALID_REASON_UNSPECIFIED")
            if solve is not None and found is Redemption.VALID:
                if solve.browser_error:
                    reason = "BROWSER_ERROR"
                elif (solve.site_key or self.public_key) != event["siteKey"]:
                    reason = "SITE_MISMATCH"
        valid = reason == "INVALID_REASON_UNSPECIFIED"
        score = (solve.score if solve and solve.score is not None else _DEFAULT_SCORE)
        echo = {name: event.get(name, "") for name in
                ("token", "siteKey", "userAgent", "userIpAddress", "expectedAction")}
        return {
            "name": f"projects/{self.PROJECT_NUMBER}/assessments/{next(self._assessments):016x}",
            "event": echo,
            "riskAnalysis": {"score": score if valid else 0.0, "reasons": []},
            "tokenProperties": {
                "valid": valid,
                "invalidReason": reason,
                "hostname": solve.hostname if solve else "",
                "action": (solve.action or "") if solve else "",
                "createTime": iso_millis(solve.created_at) if solve else _NEVER,
            },
        }

    def _status_reply(self, status: int, headers: list[tuple[str, str]]) -> Reply | None:
        if status not in _STATUS_ERRORS:
            return None  # a 502 comes from Google's front end as an HTML page
        name, message = _STATUS_ERRORS[status]
        return google_error(status, name, message, headers=headers)
