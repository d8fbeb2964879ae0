"""What Turnstile, hCaptcha, reCAPTCHA and Friendly Captcha share: a ``siteverify`` answer.

Turnstile, hCaptcha and reCAPTCHA take ``secret`` and ``response`` (and ``remoteip``)
form-encoded and answer ``{"success": bool, "error-codes": [...], ...}``, with ``score`` and
``action`` where the vendor gives them; Friendly Captcha spells its request and where its code
sits (``error.error_code``) its own way and reads the same. A vendor module holds its URL, its
field, its token lifetime and which of its codes mean *our* configuration is wrong or *it*
failed; every other code refuses the token.

=====================================================  ==============  ========================
Answer                                                 Outcome         Why
=====================================================  ==============  ========================
2xx, ``success`` true                                  VALID           then the score (if any)
                                                                       and the route's action
2xx or 4xx, ``success`` false, a code of ours          MISCONFIGURED   every token would fail
2xx or 4xx, ``success`` false, a failure code          UNAVAILABLE     the vendor said it failed
2xx or 4xx, ``success`` false, any other code or none  INVALID         the token is refused
2xx that is not a JSON object with a boolean success   UNAVAILABLE     not the vendor's answer
401, 403, 404, 405 without codes                       MISCONFIGURED   our key or URL
other 4xx without codes                                INVALID
429                                                    RATE_LIMITED
5xx, 1xx, a final 3xx                                  UNAVAILABLE
=====================================================  ==============  ========================
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar

from failopen.providers.base import (
    Expectation,
    Provider,
    VerifyCall,
    codes_of,
    decode_object,
    http_failure,
    judge_claims,
    judge_codes,
    refused_without_codes,
)
from failopen.providers.exchange import Fetched
from failopen.providers.verify_answers import VerifyOutcome, VerifyResult

__all__ = ["Siteverify"]


class Siteverify(Provider):
    """A vendor whose verify call is a ``siteverify`` POST answered with success and codes."""

    #: Codes by which the vendor says our secret, site key or request is wrong.
    misconfigured: ClassVar[frozenset[str]]
    #: Codes by which the vendor says it failed itself.
    unavailable: ClassVar[frozenset[str]] = frozenset()
    #: What to change for each code of ours.
    advice_by_code: ClassVar[Mapping[str, str]] = {}
    #: The form field that carries the site key, where the vendor takes one.
    public_key_field: ClassVar[str | None] = None
    #: The answer's field that carries a score, where the vendor gives one.
    score_field: ClassVar[str | None] = None

    def call(self, token: str, *, secret: str, verify_url: str, public_key: str | None,
             remote_ip: str | None, action: str | None, attempt: str) -> VerifyCall:
        data = {"secret": secret, "response": token}
        if remote_ip:
            data["remoteip"] = remote_ip
        if public_key and self.public_key_field:
            data[self.public_key_field] = public_key
        return VerifyCall(verify_url, data=data)

    def classify(self, fetched: Fetched, *, expect: Expectation,
                 secrets: tuple[str, ...]) -> VerifyResult:
        failure = http_failure(fetched, self.title)
        if failure is not None:
            return failure
        status = fetched.status_code
        body = decode_object(fetched)
        success = body.get("success") if body is not None else None
        codes = codes_of(self.raw_codes(body), secrets, self._known) if body is not None else ()
        if status >= 400 and (success is not False or not codes):
            return refused_without_codes(status, self.title)
        if success is True:
            valid = VerifyResult(VerifyOutcome.VALID, "token verified", status, codes=codes)
            score = body.get(self.score_field) if body and self.score_field else None
            return judge_claims(valid, expect, score=score,
                                action=body.get("action") if body else None)
        if success is False:
            return judge_codes(codes, status, title=self.title,
                               misconfigured=self.misconfigured, unavailable=self.unavailable)
        what = "not a JSON object" if body is None else "without a boolean success"
        return VerifyResult(VerifyOutcome.UNAVAILABLE,
                            f"{self.title} answered HTTP {status} {what}", status)

    def raw_codes(self, body: dict[str, Any]) -> Any:
        """Where the answer keeps its codes (a list, or one code)."""
        return body.get("error-codes")

    @functools.cached_property
    def _known(self) -> frozenset[str]:
        """Every documented code: kept as it is in reasons and logs."""
        return self.misconfigured | self.unavailable | self.refusals

    def advice(self, code: str) -> str:
        return self.advice_by_code.get(code) or super().advice(code)
