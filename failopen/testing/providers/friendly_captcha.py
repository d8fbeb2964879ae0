"""A fake of Friendly Captcha v2's siteverify, for a site that uses Friendly Captcha.

``POST /api/v2/captcha/siteverify`` with the API key (:attr:`private_key`) in ``X-API-Key`` and
``{"response": <token>, "sitekey": <optional>}`` as JSON (``Content-Type: application/json``) or
urlencoded, both of which Friendly Captcha takes. A valid token is 200 ``{"success": true,
"data": {"event_id": "ev_...", "challenge": {"timestamp": ..., "origin": "https://<hostname>"},
"risk_intelligence": null}}``; everything else is ``{"success": false, "error": {"error_code":
<code>, "detail": <text>}}`` with the status the docs give:

======================  ====  =================================================================
``auth_required``       401   no ``X-API-Key``
``auth_invalid``        401   an ``X-API-Key`` that is not :attr:`private_key`
``bad_request``         400   an empty body, or one that is not what its ``Content-Type`` says
``response_missing``    400   no ``response``
``sitekey_invalid``     400   a ``sitekey`` that is not :attr:`public_key`
``response_invalid``    200   a token never issued (:attr:`BAD`, junk)
``response_duplicate``  200   a token verified before
``response_timeout``    200   a token first verified after its lifetime
======================  ====  =================================================================

Friendly Captcha documents no test keys and no token lifetime; the fake's lifetime, 600 s, is a
plausible choice, not the vendor's word (pass ``token_lifetime`` to change it). Nor does it
document bodies for a 500, 429 or 503: those faults answer the HTML page of a front end.
``risk_intelligence`` is null, as for an account without Risk Intelligence.
"""

from __future__ import annotations

import hashlib
from typing import Any

from failopen.testing._server import FakeRequest, Reply
from failopen.testing.providers._base import CaptchaVerifyFake, Redemption
from failopen.testing.providers._wire import iso_seconds, json_or_form_fields

__all__ = ["FakeFriendlyCaptchaVerify"]

_ERRORS = {
    "auth_required": (401, "You forgot to set the X-API-Key header."),
    "auth_invalid": (401, "The API key you provided was invalid."),
    "bad_request": (400, "Something is wrong with your request: the body is empty or malformed."),
    "response_missing": (400, "You forgot to add the response parameter."),
    "sitekey_invalid": (400, "The sitekey in your request is invalid."),
    "response_invalid": (200, "The response you provided was invalid."),
    "response_timeout": (200, "The response has expired."),
    "response_duplicate": (200, "The response has already been used."),
}
_REDEMPTION_ERRORS = {
    Redemption.UNKNOWN: "response_invalid",
    Redemption.DUPLICATE: "response_duplicate",
    Redemption.EXPIRED: "response_timeout",
}


class FakeFriendlyCaptchaVerify(CaptchaVerifyFake):
    """Friendly Captcha v2's siteverify: API-key auth, single-use tokens, its error codes."""

    vendor = "friendly-captcha"
    token_field = "frc-captcha-response"
    path = "/api/v2/captcha/siteverify"
    lifetime = 600.0
    DEFAULT_PRIVATE_KEY = "A1FAKEFRIENDLYCAPTCHAAPIKEY00000"
    DEFAULT_PUBLIC_KEY = "FCMFAKESITEKEY00"

    def _read(self, request: FakeRequest) -> dict[str, Any] | None:
        return json_or_form_fields(request)

    def _answer(self, request: FakeRequest, fields: dict[str, Any] | None) -> Reply:
        api_key = request.headers.get("x-api-key")
        if not api_key:
            return _failure("auth_required")
        if api_key != self.private_key:
            return _failure("auth_invalid")
        if fields is None:
            return _failure("bad_request")
        token, sitekey = fields.get("response"), fields.get("sitekey")
        if not isinstance(token, str) or not token:
            return _failure("response_missing")
        if sitekey and sitekey != self.public_key:
            return _failure("sitekey_invalid")
        found, solve = self._redeem(token)
        if found is not Redemption.VALID or solve is None:
            return _failure(_REDEMPTION_ERRORS[found])
        return Reply.json({
            "success": True,
            "data": {
                "event_id": "ev_" + hashlib.sha256(token.encode()).hexdigest()[:14],
                "challenge": {"timestamp": iso_seconds(solve.created_at),
                              "origin": f"https://{solve.hostname}"},
                "risk_intelligence": None,
            },
        })


def _failure(code: str) -> Reply:
    status, detail = _ERRORS[code]
    return Reply.json({"success": False, "error": {"error_code": code, "detail": detail}},
                      status=status)
