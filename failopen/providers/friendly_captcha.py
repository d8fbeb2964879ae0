"""Friendly Captcha v2 (``FAILOPEN_VENDOR=friendly-captcha``).

The verify call is ``POST https://global.frcapi.com/api/v2/captcha/siteverify`` with the API key
(``FAILOPEN_PRIVATE_KEY``) in ``X-API-Key`` and ``{"response", "sitekey"}`` as JSON. Its own
rules: ``auth_required``, ``auth_invalid``, ``sitekey_invalid`` and ``bad_request`` (400/401) are
misconfigured; ``response_missing`` refuses the request, although Friendly Captcha's own SDKs
accept it by default (the browser leaves the field out, so an attacker could); ``response_invalid``,
``response_timeout`` and ``response_duplicate`` refuse the token. No status page a machine can
read: outage evidence is the verify probe (``FAILOPEN_EVIDENCE=probe``).
"""

from __future__ import annotations

from typing import Any

from failopen.providers.base import VerifyCall
from failopen.providers.siteverify import Siteverify

__all__ = ["FriendlyCaptcha"]

_MISCONFIGURED = frozenset({"auth_required", "auth_invalid", "sitekey_invalid", "bad_request"})
_REFUSALS = frozenset({"response_missing", "response_invalid", "response_timeout",
                       "response_duplicate"})
_ADVICE = {
    "auth_required": "set FAILOPEN_PRIVATE_KEY to a Friendly Captcha API key",
    "auth_invalid": "FAILOPEN_PRIVATE_KEY is not a valid Friendly Captcha API key (dashboard, "
                    "API keys)",
    "sitekey_invalid": "FAILOPEN_PUBLIC_KEY is not a site key of this account",
    "bad_request": "the request failopen sent was malformed: check FAILOPEN_VERIFY_URL",
}


class FriendlyCaptcha(Siteverify):
    """Friendly Captcha's v2 siteverify."""

    name = "friendly-captcha"
    title = "Friendly Captcha"
    verify_url = "https://global.frcapi.com/api/v2/captcha/siteverify"
    token_field = "frc-captcha-response"
    script_origin = "https://cdn.jsdelivr.net"  # the SDK as its docs load it (jsDelivr)
    browser_adapter = "friendly-captcha"
    # Tokens do expire (response_timeout), after a time the docs do not give.
    token_lifetime = None
    publishes_status = False
    misconfigured = _MISCONFIGURED
    refusals = _REFUSALS
    advice_by_code = _ADVICE

    def call(self, token: str, *, secret: str, verify_url: str, public_key: str | None,
             remote_ip: str | None, action: str | None, attempt: str) -> VerifyCall:
        body = {"response": token}
        if public_key:
            body["sitekey"] = public_key
        return VerifyCall(verify_url, json=body, headers={"X-API-Key": secret})

    def raw_codes(self, body: dict[str, Any]) -> Any:
        error = body.get("error")
        return error.get("error_code") if isinstance(error, dict) else None
