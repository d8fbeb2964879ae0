"""A fake of Cloudflare Turnstile's siteverify, for tests of a site that uses Turnstile.

``POST /turnstile/v0/siteverify`` with ``secret``, ``response``, ``remoteip`` and
``idempotency_key``, urlencoded or JSON (``Content-Type: application/json``). Every answer is 200
JSON: ``{"success": true, "challenge_ts": "2027-01-15T08:00:00.000Z", "hostname": ...,
"error-codes": [], "action": ..., "cdata": ..., "metadata": {}}``, or
``{"success": false, "error-codes": [<code>]}``:

==========================  =================================================================
``missing-input-secret``    no ``secret``
``invalid-input-secret``    a ``secret`` that is not :attr:`private_key`
``missing-input-response``  no ``response``
``invalid-input-response``  a token never issued (:attr:`BAD`, junk, another vendor's), or one
                            longer than 2048 characters
``timeout-or-duplicate``    a token verified before, or first verified 300 s or more after it
                            was issued
``bad-request``             a body that is not what its ``Content-Type`` says
``internal-error``          only with the ``"internal_error"`` fault
==========================  =================================================================

Each token is good once, except that the same token sent again with the same
``idempotency_key`` gets the first answer again: what makes a retry after a time-out safe.

Test mode, as Cloudflare documents it: constructed with :attr:`ALWAYS_PASS_SECRET`, the fake
accepts only :attr:`DUMMY_TOKEN` (as often as it is sent) and rejects real tokens with
``invalid-input-response``; with :attr:`ALWAYS_FAIL_SECRET` every token gets
``invalid-input-response``; with :attr:`ALREADY_SPENT_SECRET`, ``timeout-or-duplicate``.

``remoteip`` is read and not checked (Cloudflare: "currently not strictly validated").
Where the docs are silent the fake chooses: the code for an over-long token, the HTTP status of
errors (200 throughout), and that an ``idempotency_key`` need not be a UUID. The ``metadata``
object is empty (Cloudflare fills ``ephemeral_id`` there for Enterprise customers).
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
from failopen.testing.providers._wire import iso_millis, json_or_form_fields

__all__ = ["FakeTurnstileVerify"]

_MAX_TOKEN_LENGTH = 2048


class FakeTurnstileVerify(CaptchaVerifyFake):
    """Cloudflare Turnstile's siteverify: single-use tokens, idempotent retries, test secrets."""

    vendor = "turnstile"
    token_field = "cf-turnstile-response"
    path = "/turnstile/v0/siteverify"
    lifetime = 300.0
    CLAIMS = frozenset({"hostname", "action", "cdata"})
    DEFAULT_PRIVATE_KEY = "0x4AAAAAAAfake-turnstile-secret"
    DEFAULT_PUBLIC_KEY = "0x4AAAAAAAfake-turnstile-sitekey"
    FAULTS = CaptchaVerifyFake.FAULTS | {"internal_error"}

    #: Cloudflare's test secret keys and the token its test site keys produce.
    ALWAYS_PASS_SECRET: ClassVar[str] = "1x0000000000000000000000000000000AA"
    ALWAYS_FAIL_SECRET: ClassVar[str] = "2x0000000000000000000000000000000AA"
    ALREADY_SPENT_SECRET: ClassVar[str] = "3x0000000000000000000000000000000AA"
    DUMMY_TOKEN: ClassVar[str] = "XXXX.DUMMY.TOKEN.XXXX"
    #: Cloudflare's test site keys (visible widget): always passes, always fails.
    ALWAYS_PASS_SITE_KEY: ClassVar[str] = "1x00000000000000000000AA"
    ALWAYS_FAIL_SITE_KEY: ClassVar[str] = "2x00000000000000000000AB"

    def __init__(
        self,
        *,
        private_key: str | None = None,
        public_key: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        token_lifetime: float | None | Lifetime = DOCUMENTED,
    ) -> None:
        # (token, idempotency_key) -> the first answer, replayed to a retry with the same key.
        self._idempotent: dict[tuple[str, str], dict[str, Any]] = {}
        super().__init__(private_key=private_key, public_key=public_key, clock=clock,
                         token_lifetime=token_lifetime)

    def _forget(self) -> None:
        self._idempotent.clear()

    def _read(self, request: FakeRequest) -> dict[str, Any] | None:
        return json_or_form_fields(request)

    def _answer(self, request: FakeRequest, fields: dict[str, Any] | None) -> Reply:
        if fields is None:
            return _failure("bad-request")
        secret, token = fields.get("secret"), fields.get("response")
        if not secret:
            return _failure("missing-input-secret")
        if secret != self.private_key:
            return _failure("invalid-input-secret")
        if not isinstance(token, str) or not token:
            return _failure("missing-input-response")
        key = fields.get("idempotency_key")
        if not isinstance(key, str) or not key:
            return Reply.json(self._verdict(token))
        with self._lock:
            remembered = self._idempotent.get((token, key))
        if remembered is None:
            remembered = self._verdict(token)
            with self._lock:
                remembered = self._idempotent.setdefault((token, key), remembered)
        return Reply.json(remembered)

    def _verdict(self, token: str) -> dict[str, Any]:
        test_mode = _TEST_MODES.get(self.private_key)
        if test_mode is not None:
            if test_mode == "pass" and token == self.DUMMY_TOKEN:
                return _success(Solve(self.clock.time(), hostname="localhost", action="test",
                                      cdata="test-data"))
            return _failure_body("timeout-or-duplicate" if test_mode == "spent"
                                 else "invalid-input-response")
        if len(token) > _MAX_TOKEN_LENGTH:
            return _failure_body("invalid-input-response")
        found, solve = self._redeem(token)
        if found is Redemption.VALID and solve is not None:
            return _success(solve)
        if found is Redemption.UNKNOWN:
            return _failure_body("invalid-input-response")
        return _failure_body("timeout-or-duplicate")

    def _fault_reply(self, fault: str, retry_after: float | None) -> Reply:
        if fault == "internal_error":
            return _failure("internal-error")
        return super()._fault_reply(fault, retry_after)


_TEST_MODES = {
    FakeTurnstileVerify.ALWAYS_PASS_SECRET: "pass",
    FakeTurnstileVerify.ALWAYS_FAIL_SECRET: "fail",
    FakeTurnstileVerify.ALREADY_SPENT_SECRET: "spent",
}


def _success(solve: Solve) -> dict[str, Any]:
    return {
        "success": True,
        "challenge_ts": iso_millis(solve.created_at),
        "hostname": solve.hostname,
        "error-codes": [],
        "action": solve.action or "",
        "cdata": solve.cdata or "",
        "metadata": {},
    }


def _failure_body(code: str) -> dict[str, Any]:
    return {"success": False, "error-codes": [code]}


def _failure(code: str) -> Reply:
    return Reply.json(_failure_body(code))
