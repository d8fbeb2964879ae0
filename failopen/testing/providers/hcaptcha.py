"""A fake of hCaptcha's siteverify, for tests of a site that uses hCaptcha.

``POST /siteverify``, urlencoded (a JSON body reads as no fields at all, as hCaptcha's does), with
``secret``, ``response``, ``remoteip`` and ``sitekey``. Every answer is 200 JSON:
``{"success": true, "challenge_ts": "2027-01-15T08:00:00Z", "hostname": ..., "credit": false}``
(plus ``"score"`` and ``"score_reason"`` when constructed with ``enterprise=True``), or
``{"success": false, "error-codes": [<code>]}``:

============================  ===============================================================
``bad-request``               a body that is not text
``missing-input-secret``      no ``secret``
``invalid-input-secret``      a ``secret`` that is not :attr:`private_key`
``not-using-dummy-passcode``  the test ``sitekey`` (:attr:`TEST_SITE_KEY`) with a real secret
``missing-input-response``    no ``response``
``invalid-remoteip``          a ``remoteip`` that is not an IP address
``missing-remoteip``          no ``remoteip``, when constructed with ``require_remoteip=True``
``sitekey-secret-mismatch``   a ``sitekey`` that is not :attr:`public_key`
``invalid-input-response``    a token never issued (:attr:`BAD`, junk)
``already-seen-response``     a token verified before
``expired-input-response``    a token first verified 120 s or more after it was issued
============================  ===============================================================

Test mode, as hCaptcha documents it: constructed with :attr:`TEST_SECRET` (its site key then
defaults to :attr:`TEST_SITE_KEY`), the fake accepts :attr:`TEST_TOKEN` as often as it is sent,
with hostname ``dummy-key-pass``, and rejects other tokens with ``invalid-input-response``.

The docs mark ``error-codes`` optional; like hCaptcha the fake sends it only on failure.
``credit`` is always false (hCaptcha deprecated it). The enterprise score is a risk score: 0.0 is
the least risky; a token's default is 0.0 with no ``score_reason``. Older integrations also see
``invalid-or-already-seen-response``; the fake sends the current ``already-seen-response``.
"""

from __future__ import annotations

import ipaddress
from typing import Any, ClassVar

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.testing._server import FakeRequest, Reply
from failopen.testing.providers._base import (
    DOCUMENTED,
    CaptchaVerifyFake,
    Lifetime,
    Redemption,
    Solve,
)
from failopen.testing.providers._wire import form_fields, iso_seconds

__all__ = ["FakeHCaptchaVerify"]

_FAILURES = {
    Redemption.UNKNOWN: "invalid-input-response",
    Redemption.DUPLICATE: "already-seen-response",
    Redemption.EXPIRED: "expired-input-response",
}


class FakeHCaptchaVerify(CaptchaVerifyFake):
    """hCaptcha's siteverify: single-use tokens, site-key checks, the enterprise score."""

    vendor = "hcaptcha"
    token_field = "h-captcha-response"
    path = "/siteverify"
    lifetime = 120.0
    CLAIMS = frozenset({"hostname", "score"})
    DEFAULT_PRIVATE_KEY = "0xFAKE000000000000000000000000000000HCAPTCHA"
    DEFAULT_PUBLIC_KEY = "fa4e0000-0000-4000-8000-000000000001"

    #: hCaptcha's documented test keys: this secret accepts this token, from this site key.
    TEST_SECRET: ClassVar[str] = "0x0000000000000000000000000000000000000000"
    TEST_SITE_KEY: ClassVar[str] = "10000000-ffff-ffff-ffff-000000000001"
    TEST_TOKEN: ClassVar[str] = "10000000-aaaa-bbbb-cccc-000000000001"

    def __init__(
        self,
        *,
        private_key: str | None = None,
        public_key: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        token_lifetime: float | None | Lifetime = DOCUMENTED,
        enterprise: bool = False,
        require_remoteip: bool = False,
    ) -> None:
        if public_key is None and private_key == self.TEST_SECRET:
            public_key = self.TEST_SITE_KEY
        super().__init__(private_key=private_key, public_key=public_key, clock=clock,
                         token_lifetime=token_lifetime)
        self.enterprise = enterprise
        self.require_remoteip = require_remoteip

    def _read(self, request: FakeRequest) -> dict[str, Any] | None:
        return form_fields(request)

    def _answer(self, request: FakeRequest, fields: dict[str, Any] | None) -> Reply:
        if fields is None:
            return _failure("bad-request")
        refusal = self._refusal(fields)
        if refusal is not None:
            return _failure(refusal)
        token = fields["response"]
        if self.private_key == self.TEST_SECRET:
            if token != self.TEST_TOKEN:
                return _failure("invalid-input-response")
            return self._success(Solve(self.clock.time(), hostname="dummy-key-pass"))
        found, solve = self._redeem(token)
        if found is Redemption.VALID and solve is not None:
            return self._success(solve)
        return _failure(_FAILURES[found])

    def _refusal(self, fields: dict[str, Any]) -> str | None:
        """The error code for a request that cannot be checked, or None."""
        secret, sitekey, remoteip = (fields.get(name) for name in ("secret", "sitekey", "remoteip"))
        if not secret:
            return "missing-input-secret"
        if secret != self.private_key:
            return "invalid-input-secret"
        if sitekey == self.TEST_SITE_KEY and secret != self.TEST_SECRET:
            return "not-using-dummy-passcode"
        if not fields.get("response"):
            return "missing-input-response"
        if remoteip:
            try:
                ipaddress.ip_address(remoteip)
            except ValueError:
                return "invalid-remoteip"
        elif self.require_remoteip:
            return "missing-remoteip"
        if sitekey and sitekey != self.public_key:
            return "sitekey-secret-mismatch"
        return None

    def _success(self, solve: Solve) -> Reply:
        body: dict[str, Any] = {
            "success": True,
            "challenge_ts": iso_seconds(solve.created_at),
            "hostname": solve.hostname,
            "credit": False,
        }
        if self.enterprise:
            body["score"] = solve.score if solve.score is not None else 0.0
            body["score_reason"] = []
        return Reply.json(body)


def _failure(code: str) -> Reply:
    return Reply.json({"success": False, "error-codes": [code]})
