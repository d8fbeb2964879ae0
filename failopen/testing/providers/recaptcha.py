"""A fake of Google reCAPTCHA's siteverify (v2 and v3 share it), for a site that uses reCAPTCHA.

``POST /recaptcha/api/siteverify`` with ``secret``, ``response`` and ``remoteip``, urlencoded in the
body or in the query string (Google reads both; a JSON body reads as no fields). Every answer is
200 JSON: ``{"success": true, "challenge_ts": "2027-01-15T08:00:00Z", "hostname": ...}``, plus
``"score"`` (0.0 bot to 1.0 human) and ``"action"`` for a v3 token, or ``{"success": false,
"error-codes": [...]}``:

============================  ===============================================================
``bad-request``               a body that is not text
``missing-input-response``,   no ``response``, no ``secret`` (both codes when both are
``missing-input-secret``      missing, as Google sends them)
``invalid-input-secret``      a ``secret`` that is not :attr:`private_key`
``invalid-input-response``    a token never issued (:attr:`BAD`, junk)
``timeout-or-duplicate``      a token verified before, or first verified 120 s (two minutes)
                              or more after it was issued
============================  ===============================================================

A token is v3 when it was issued with a ``score`` or an ``action`` (``issue_token(score=0.3,
action="login")``); the other defaults to 0.9, or to the empty action.

Test mode, as Google documents it: constructed with :attr:`TEST_SECRET` (its site key then
defaults to :attr:`TEST_SITE_KEY`), every non-empty token passes, as often as it is sent, with
hostname ``testkey.google.com``. The docs mark ``error-codes`` optional; like Google the fake
sends it only on failure.
"""

from __future__ import annotations

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

__all__ = ["FakeRecaptchaVerify"]

_DEFAULT_V3_SCORE = 0.9


class FakeRecaptchaVerify(CaptchaVerifyFake):
    """reCAPTCHA's siteverify: single-use two-minute tokens, v3 scores and actions."""

    vendor = "recaptcha"
    token_field = "g-recaptcha-response"
    path = "/recaptcha/api/siteverify"
    lifetime = 120.0
    CLAIMS = frozenset({"hostname", "score", "action"})
    DEFAULT_PRIVATE_KEY = "6LfakeAAAAAAAFakeRecaptchaSecretKey000000"
    DEFAULT_PUBLIC_KEY = "6LfakeAAAAAAAFakeRecaptchaSiteKey0000000"

    #: Google's documented test keys: every verification passes.
    TEST_SECRET: ClassVar[str] = "6LeIxAcTAAAAAGG-vFI1TnRWxMZNFuojJ4WifJWe"
    TEST_SITE_KEY: ClassVar[str] = "6LeIxAcTAAAAAJcZVRqyHh71UMIEGNQ_MXjiZKhI"

    def __init__(
        self,
        *,
        private_key: str | None = None,
        public_key: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        token_lifetime: float | None | Lifetime = DOCUMENTED,
    ) -> None:
        if public_key is None and private_key == self.TEST_SECRET:
            public_key = self.TEST_SITE_KEY
        super().__init__(private_key=private_key, public_key=public_key, clock=clock,
                         token_lifetime=token_lifetime)

    def _read(self, request: FakeRequest) -> dict[str, Any] | None:
        fields = form_fields(request)
        if fields is None:
            return None
        for name, values in request.query.items():
            if values:
                fields.setdefault(name, values[0])
        return fields

    def _answer(self, request: FakeRequest, fields: dict[str, Any] | None) -> Reply:
        if fields is None:
            return _failure("bad-request")
        secret, token = fields.get("secret"), fields.get("response")
        missing = [code for code, value in (("missing-input-response", token),
                                            ("missing-input-secret", secret)) if not value]
        if missing:
            return _failure(*missing)
        if secret != self.private_key:
            return _failure("invalid-input-secret")
        if self.private_key == self.TEST_SECRET:
            return _success(Solve(self.clock.time(), hostname="testkey.google.com"))
        found, solve = self._redeem(str(token))
        if found is Redemption.VALID and solve is not None:
            return _success(solve)
        if found is Redemption.UNKNOWN:
            return _failure("invalid-input-response")
        return _failure("timeout-or-duplicate")


def _success(solve: Solve) -> Reply:
    body: dict[str, Any] = {
        "success": True,
        "challenge_ts": iso_seconds(solve.created_at),
        "hostname": solve.hostname,
    }
    if solve.score is not None or solve.action is not None:
        body["score"] = solve.score if solve.score is not None else _DEFAULT_V3_SCORE
        body["action"] = solve.action or ""
    return Reply.json(body)


def _failure(*codes: str) -> Reply:
    return Reply.json({"success": False, "error-codes": list(codes)})
