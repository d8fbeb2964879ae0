"""Each vendor adapter's rules, as pure functions of one answer: valid, invalid, unavailable,
misconfigured, rate-limited, with the vendor's own codes kept.

The answers are the vendors' documented shapes (docs/vendors/*.md lists the sources); every
documented code is here, with the outcome it must have. A code a browser or an attacker can
bring about is never ``misconfigured`` (an ERROR that sends operators after a key that is fine)
and never ``unavailable`` (a step towards a bypass).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from failopen.providers.base import Expectation, Provider
from failopen.providers.exchange import Fetched
from failopen.providers.registry import PROVIDERS
from failopen.providers.verify_answers import VerifyOutcome, VerifyResult

VALID, INVALID = VerifyOutcome.VALID, VerifyOutcome.INVALID
UNAVAILABLE, MISCONFIGURED = VerifyOutcome.UNAVAILABLE, VerifyOutcome.MISCONFIGURED
RATE_LIMITED = VerifyOutcome.RATE_LIMITED
SECRET = "0x4AAAAAAAsecret-key-of-the-site"
TOKEN = "a-token-the-browser-sent-0123456789"
SITEVERIFY = ("turnstile", "hcaptcha", "recaptcha")
EVERY = tuple(PROVIDERS)


def answer(vendor: str, status: int, body: Any, *, expect: Expectation | None = None,
           headers: dict[str, str] | None = None) -> VerifyResult:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    fetched = Fetched(status, httpx.Headers(headers or {}), content,
                      httpx.URL("https://verify.test/"), 0.0)
    return PROVIDERS[vendor].classify(fetched, expect=expect or Expectation(),
                                      secrets=(TOKEN, SECRET))


def siteverify(success: bool, *codes: str, **more: Any) -> dict[str, Any]:
    return {"success": success, "error-codes": list(codes), **more}


# -- the documented codes, vendor by vendor ----------------------------------------------------

TURNSTILE = {
    "missing-input-secret": MISCONFIGURED, "invalid-input-secret": MISCONFIGURED,
    "bad-request": MISCONFIGURED, "internal-error": UNAVAILABLE,
    "missing-input-response": INVALID, "invalid-input-response": INVALID,
    "timeout-or-duplicate": INVALID,
}
HCAPTCHA = {
    "missing-input-secret": MISCONFIGURED, "invalid-input-secret": MISCONFIGURED,
    "sitekey-secret-mismatch": MISCONFIGURED, "bad-request": MISCONFIGURED,
    "missing-remoteip": MISCONFIGURED, "invalid-remoteip": MISCONFIGURED,
    "missing-input-response": INVALID, "invalid-input-response": INVALID,
    "expired-input-response": INVALID, "already-seen-response": INVALID,
    # A token made with one of hCaptcha's testing site keys: whoever renders the widget picks it.
    "not-using-dummy-passcode": INVALID,
    # Answered by hCaptcha though undocumented; a browser's token brings them about.
    "not-using-dummy-secret": INVALID, "invalid-sitekey": INVALID,
    "invalid-or-already-seen-response": INVALID,
}
RECAPTCHA = {
    "missing-input-secret": MISCONFIGURED, "invalid-input-secret": MISCONFIGURED,
    "bad-request": MISCONFIGURED, "missing-input-response": INVALID,
    "invalid-input-response": INVALID, "timeout-or-duplicate": INVALID,
}
CODES = {"turnstile": TURNSTILE, "hcaptcha": HCAPTCHA, "recaptcha": RECAPTCHA}


@pytest.mark.parametrize(("vendor", "code", "outcome"), [
    (vendor, code, outcome) for vendor, table in CODES.items() for code, outcome in table.items()
])
def test_each_documented_siteverify_code_has_its_outcome(vendor: str, code: str,
                                                         outcome: VerifyOutcome) -> None:
    result = answer(vendor, 200, siteverify(False, code))
    assert result.outcome is outcome
    assert result.codes == (code,)
    assert code in result.reason


@pytest.mark.parametrize("vendor", SITEVERIFY)
def test_a_code_of_ours_wins_over_the_token_s_code(vendor: str) -> None:
    # With a wrong secret every token fails: say so, rather than blame this one token.
    result = answer(vendor, 200, siteverify(False, "invalid-input-response",
                                            "invalid-input-secret"))
    assert result.outcome is MISCONFIGURED
    assert result.codes == ("invalid-input-response", "invalid-input-secret")


@pytest.mark.parametrize("vendor", SITEVERIFY)
@pytest.mark.parametrize("codes", [(), ("browser-error",), ("no-such-code",), ("",)])
def test_an_unknown_or_missing_code_refuses_the_token_and_is_nothing_more(
        vendor: str, codes: tuple[str, ...]) -> None:
    result = answer(vendor, 200, siteverify(False, *codes))
    assert result.outcome is INVALID


@pytest.mark.parametrize("vendor", SITEVERIFY)
def test_success_true_is_valid(vendor: str) -> None:
    result = answer(vendor, 200, siteverify(True, challenge_ts="2026-11-28T05:00:00Z",
                                            hostname="example.com"))
    assert result.outcome is VALID


@pytest.mark.parametrize("vendor", SITEVERIFY)
@pytest.mark.parametrize("body", [b"", b"<html>busy</html>", b"[]", b'"ok"', b"null",
                                  b'{"success": "true"}', b'{"success": 1}', b"{}",
                                  b"[" * 100_000])
def test_an_answer_that_is_not_the_vendor_s_json_is_unavailable(vendor: str, body: bytes) -> None:
    assert answer(vendor, 200, body).outcome is UNAVAILABLE


@pytest.mark.parametrize("vendor", EVERY)
@pytest.mark.parametrize("status", [500, 502, 503, 504, 599, 304, 101])
def test_5xx_and_non_final_statuses_are_unavailable(vendor: str, status: int) -> None:
    assert answer(vendor, status, siteverify(True)).outcome is UNAVAILABLE


@pytest.mark.parametrize("vendor", EVERY)
def test_429_is_rate_limited_with_its_hint(vendor: str) -> None:
    result = answer(vendor, 429, {"error": "slow down"}, headers={"Retry-After": "7"})
    assert result.outcome is RATE_LIMITED
    assert result.retry_after == 7.0


@pytest.mark.parametrize("vendor", [v for v in EVERY if v != "enforcement"])
@pytest.mark.parametrize("status", [401, 403, 404, 405])
def test_an_endpoint_refusing_us_without_a_code_is_misconfigured(vendor: str, status: int) -> None:
    # A wrong URL (404/405) or key (401/403): every request would fail alike.
    assert answer(vendor, status, b"<html>no</html>").outcome is MISCONFIGURED


@pytest.mark.parametrize("vendor", SITEVERIFY + ("friendly-captcha",))
@pytest.mark.parametrize("status", [400, 409, 413, 422])
def test_another_4xx_without_a_code_refuses_the_request(vendor: str, status: int) -> None:
    assert answer(vendor, status, b"bad").outcome is INVALID


# -- scores and actions ------------------------------------------------------------------------


@pytest.mark.parametrize(("score", "outcome"), [(0.9, VALID), (0.5, VALID), (0.49, INVALID),
                                                (0.0, INVALID)])
def test_recaptcha_v3_scores_below_the_minimum_are_refused_as_low_score(
        score: float, outcome: VerifyOutcome) -> None:
    result = answer("recaptcha", 200, siteverify(True, score=score, action="login"))
    assert result.outcome is outcome
    assert result.low_score is (outcome is INVALID)
    assert result.score == score


@pytest.mark.parametrize("score", ["0.9", None, True, float("nan"), [0.9]])
def test_a_score_that_is_not_a_number_refuses_the_token(score: Any) -> None:
    body = siteverify(True, action="login")
    body["score"] = score
    result = answer("recaptcha", 200, body)
    # null reads as "no score" (a v2 answer); anything else odd must not pass for a good score.
    assert result.outcome is (VALID if score is None else INVALID)


def test_the_minimum_score_is_the_site_s() -> None:
    strict = Expectation(min_score=0.95)
    assert answer("recaptcha", 200, siteverify(True, score=0.9), expect=strict).low_score


def test_a_v2_answer_without_a_score_is_valid() -> None:
    assert answer("recaptcha", 200, siteverify(True, hostname="example.com")).valid


@pytest.mark.parametrize("vendor", ["recaptcha", "turnstile"])
def test_a_token_minted_for_another_action_is_refused(vendor: str) -> None:
    login = Expectation(action="login")
    assert answer(vendor, 200, siteverify(True, score=0.9, action="login"), expect=login).valid
    other = answer(vendor, 200, siteverify(True, score=0.9, action="signup"), expect=login)
    assert other.outcome is INVALID and "expected login" in other.reason
    missing = answer(vendor, 200, siteverify(True, score=0.9), expect=login)
    assert missing.outcome is INVALID


def test_without_an_expected_action_any_action_is_accepted() -> None:
    assert answer("recaptcha", 200, siteverify(True, score=0.9, action="anything")).valid


# -- reCAPTCHA Enterprise ----------------------------------------------------------------------


def assessment(valid: bool, reason: str = "INVALID_REASON_UNSPECIFIED", *, score: Any = 0.9,
               action: str = "login") -> dict[str, Any]:
    return {
        "name": "projects/123/assessments/abc",
        "event": {"token": "t", "siteKey": "6Lsite"},
        "riskAnalysis": {"score": score, "reasons": []},
        "tokenProperties": {"valid": valid, "invalidReason": reason, "hostname": "example.com",
                            "action": action, "createTime": "2026-11-28T05:00:00Z"},
    }


@pytest.mark.parametrize("reason", ["MALFORMED", "EXPIRED", "DUPE", "MISSING", "BROWSER_ERROR",
                                    "UNEXPECTED_ACTION", "SITE_MISMATCH", "UNKNOWN_INVALID_REASON",
                                    "INVALID_REASON_UNSPECIFIED", "SOMETHING_NEW"])
def test_enterprise_every_invalid_reason_refuses_the_token(reason: str) -> None:
    # BROWSER_ERROR above all: "could easily be simulated by an attacker" (Google).
    result = answer("recaptcha-enterprise", 200, assessment(False, reason))
    assert result.outcome is INVALID
    assert result.codes == (reason,)


def test_enterprise_valid_with_its_score_and_action() -> None:
    login = Expectation(action="login")
    result = answer("recaptcha-enterprise", 200, assessment(True), expect=login)
    assert result.valid and result.score == 0.9
    low = answer("recaptcha-enterprise", 200, assessment(True, score=0.1))
    assert low.outcome is INVALID and low.low_score
    other = answer("recaptcha-enterprise", 200, assessment(True, action="signup"), expect=login)
    assert other.outcome is INVALID and not other.low_score


@pytest.mark.parametrize(("status", "code"), [(400, "INVALID_ARGUMENT"),
                                              (403, "PERMISSION_DENIED"),
                                              (401, "UNAUTHENTICATED"), (404, "NOT_FOUND")])
def test_enterprise_api_errors_about_our_request_are_misconfigured(status: int, code: str) -> None:
    body = {"error": {"code": status, "message": "API key not valid.", "status": code}}
    result = answer("recaptcha-enterprise", status, body)
    assert result.outcome is MISCONFIGURED
    assert result.codes == (code,)


@pytest.mark.parametrize(("status", "outcome"), [(429, RATE_LIMITED), (500, UNAVAILABLE),
                                                 (503, UNAVAILABLE)])
def test_enterprise_quota_and_server_errors(status: int, outcome: VerifyOutcome) -> None:
    body = {"error": {"code": status, "message": "x", "status": "RESOURCE_EXHAUSTED"}}
    assert answer("recaptcha-enterprise", status, body).outcome is outcome


@pytest.mark.parametrize("body", [{}, {"tokenProperties": {}}, {"tokenProperties": {"valid": 1}},
                                  {"tokenProperties": "yes"}, [], {"riskAnalysis": {"score": 1}}])
def test_enterprise_an_answer_without_a_verdict_is_unavailable(body: Any) -> None:
    assert answer("recaptcha-enterprise", 200, body).outcome is UNAVAILABLE


# -- Friendly Captcha --------------------------------------------------------------------------


def frc(status: int, code: str) -> VerifyResult:
    return answer("friendly-captcha", status, {
        "success": False, "error": {"error_code": code, "detail": "..."}})


@pytest.mark.parametrize(("status", "code", "outcome"), [
    (401, "auth_required", MISCONFIGURED), (401, "auth_invalid", MISCONFIGURED),
    (400, "sitekey_invalid", MISCONFIGURED), (400, "bad_request", MISCONFIGURED),
    # Friendly Captcha's SDKs accept this one by default; the browser can simply leave it out.
    (400, "response_missing", INVALID),
    (200, "response_invalid", INVALID), (200, "response_timeout", INVALID),
    (200, "response_duplicate", INVALID), (200, "something_new", INVALID),
])
def test_friendly_captcha_each_documented_code(status: int, code: str,
                                               outcome: VerifyOutcome) -> None:
    result = frc(status, code)
    assert result.outcome is outcome
    assert result.codes == (code,)


def test_friendly_captcha_success() -> None:
    body = {"success": True, "data": {"event_id": "ev_1", "challenge": {
        "timestamp": "2026-11-28T05:00:00Z", "origin": "https://example.com"}}}
    assert answer("friendly-captcha", 200, body).valid


# -- what every adapter keeps safe -------------------------------------------------------------


@pytest.mark.parametrize("vendor", [v for v in EVERY if v != "enforcement"])
def test_a_secret_echoed_in_a_code_is_never_kept(vendor: str) -> None:
    echoed = f"bad secret {SECRET}"
    bodies = {
        "recaptcha-enterprise": {"error": {"code": 400, "status": echoed}},
        "friendly-captcha": {"success": False, "error": {"error_code": echoed}},
    }
    status = 400 if vendor in bodies else 200
    result = answer(vendor, status, bodies.get(vendor, siteverify(False, echoed)))
    assert SECRET not in repr(result) and SECRET[:12] not in repr(result)
    assert TOKEN not in repr(result)


@pytest.mark.parametrize("vendor", SITEVERIFY)
def test_a_huge_list_of_codes_keeps_a_few(vendor: str) -> None:
    result = answer(vendor, 200, siteverify(False, *(["x" * 500] * 10_000)))
    assert result.outcome is INVALID
    assert len(result.codes) <= 8 and all(len(c) <= 64 for c in result.codes)


def test_the_registry_names_the_issue_s_vendors_and_each_adapter_its_field() -> None:
    fields = {name: p.token_field for name, p in PROVIDERS.items()}
    assert fields == {
        "enforcement": "enforcement-token", "turnstile": "cf-turnstile-response",
        "hcaptcha": "h-captcha-response", "recaptcha": "g-recaptcha-response",
        "recaptcha-enterprise": "g-recaptcha-response", "friendly-captcha": "frc-captcha-response",
    }
    assert all(isinstance(p, Provider) for p in PROVIDERS.values())
    assert [name for name, p in PROVIDERS.items() if p.retries] == ["turnstile"]
