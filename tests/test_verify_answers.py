"""The pure mapping of a verify answer to an outcome, and the redaction of the text it keeps.

These pin the edges the HTTP tests in test_verify.py pass over: a status just outside 2xx, a 4xx
whose JSON is not an object, and a secret that sits where a scan of the text is easiest to get
wrong (at its very end, or spelt with "~", the last printable ASCII character).
"""

from __future__ import annotations

import httpx
import pytest

from failopen.exceptions import (
    FetchError,
    FetchOverloaded,
    FetchTimeout,
    RedirectRefused,
    ResponseTooLarge,
)
from failopen.providers.exchange import Fetched
from failopen.providers.verify_answers import (
    VerifyOutcome,
    VerifyResult,
    _from_fetch_error,
    check_token,
    classify,
)

KEY = "pk-live-7Q2xV9mB4kR8sT1w-secret"
TILDE_KEY = "sk~live~Zq81~Wt5~Ab"  # "~" may be in a key: it must still be recognised
SECRETS = (KEY, TILDE_KEY)
VALID_BODY = b'{"session_details": {"solved": true, "verified": true}}'


def answer(status: int, content: bytes, *, require_verified: bool = True,
           headers: dict[str, str] | None = None,
           secrets: tuple[str, ...] = SECRETS) -> VerifyResult:
    fetched = Fetched(status, httpx.Headers(headers or {}), content,
                      httpx.URL("https://verify.test/"), 0.0)
    return classify(fetched, require_verified=require_verified, secrets=secrets)


@pytest.mark.parametrize("status", [100, 199, 300, 301, 304, 399])
def test_a_status_outside_2xx_is_never_valid_whatever_the_body(status: int) -> None:
    # A final 3xx (a redirect not followed) carrying a "solved" body is not the vendor's answer.
    result = answer(status, VALID_BODY)
    assert result.outcome is VerifyOutcome.UNAVAILABLE
    assert not result.valid


@pytest.mark.parametrize("status", [200, 299])
def test_both_ends_of_2xx_read_the_body(status: int) -> None:
    assert answer(status, VALID_BODY).outcome is VerifyOutcome.VALID


@pytest.mark.parametrize("body", [b"[1, 2]", b'"denied"', b"null", b"5", b"true", b"[]"])
@pytest.mark.parametrize("status", [400, 404, 422, 499])
def test_a_4xx_whose_json_is_not_an_object_is_invalid(status: int, body: bytes) -> None:
    # A 4xx answers something about this request: never a step towards fail-open, and never an
    # exception (which the verifier would report as the vendor being unavailable).
    result = answer(status, body)
    assert result.outcome is VerifyOutcome.INVALID
    assert result.reason == f"vendor refused the request (HTTP {status})"


def test_a_4xx_error_text_is_kept_when_it_shares_nothing_with_a_secret() -> None:
    # The counterpart of the withheld cases below: without it, withholding everything would pass.
    result = answer(400, b'{"error": "invalid-input-response"}')
    assert result.reason == "vendor refused the request (HTTP 400): invalid-input-response"


@pytest.mark.parametrize("secret", SECRETS)
def test_a_secret_run_at_the_very_end_of_the_text_is_withheld(secret: str) -> None:
    # Only the last eight characters are a run of the secret: the scan must reach the end.
    text = "no: " + secret[:8]
    assert all(text[i : i + 8] not in secret for i in range(len(text) - 8))
    result = answer(400, b'{"error": "%s"}' % text.encode())
    assert result.reason == "vendor refused the request (HTTP 400)"
    transport = _from_fetch_error(FetchError(f"connect failed: {text}"), SECRETS)
    assert transport.reason == "transport error"


def test_a_secret_spelt_with_tilde_is_withheld_whole_or_in_part() -> None:
    for text in (TILDE_KEY, f"bad key {TILDE_KEY}", TILDE_KEY[4:14]):
        result = answer(400, b'{"error": "%s"}' % text.encode())
        assert "~" not in result.reason and "Zq81" not in result.reason, text
        transport = _from_fetch_error(FetchError(text), SECRETS)
        assert transport.reason == "transport error", text


def test_text_with_tilde_but_no_secret_keeps_its_tilde() -> None:
    result = answer(400, b'{"error": "see ~docs"}')
    assert result.reason == "vendor refused the request (HTTP 400): see ~docs"


# -- the reason of each answer: what the reject log and the decision tell an operator ---------

V = VerifyOutcome
SOLVED = b'{"session_details": {"solved": true}}'


@pytest.mark.parametrize(("status", "body", "require_verified", "outcome", "reason"), [
    (200, SOLVED, False, V.VALID, "solved"),
    (200, VALID_BODY, True, V.VALID, "solved and verified"),
    (200, SOLVED, True, V.UNAVAILABLE, "vendor answer has no boolean session_details.verified"),
    (200, b'{"session_details": {"solved": true, "verified": false}}', True, V.INVALID,
     "solved but not verified"),
    (200, b'{"session_details": {"solved": false}}', False, V.INVALID, "challenge not solved"),
    (200, b'{"session_details": {"solved": "yes"}}', False, V.UNAVAILABLE,
     "vendor answer has no boolean session_details.solved"),
    (200, b'{"other": 1}', False, V.UNAVAILABLE,
     "vendor answer has neither session_details nor error"),
    (200, b"[1]", False, V.UNAVAILABLE, "vendor answer is JSON but not an object"),
    (200, b"  ", False, V.UNAVAILABLE, "vendor answered HTTP 200 with an empty body"),
    (200, b"<html>", False, V.UNAVAILABLE, "vendor answered HTTP 200 with a non-JSON body"),
    (200, b"[" * 100_000, False, V.UNAVAILABLE, "vendor answered HTTP 200 with a non-JSON body"),
    (200, b'{"error": "expired"}', False, V.INVALID, "vendor denied the token: expired"),
    (503, b"", False, V.UNAVAILABLE, "vendor answered HTTP 503"),
    (403, b"", False, V.INVALID, "vendor rejected our credentials (HTTP 403)"),
    (400, b"<html>", False, V.INVALID, "vendor refused the request (HTTP 400, non-JSON body)"),
    (400, b'{"error": {"code": "bad-token"}}', False, V.INVALID,
     "vendor refused the request (HTTP 400): bad-token"),
    (400, b'{"error": {"message": "token malformed"}}', False, V.INVALID,
     "vendor refused the request (HTTP 400): token malformed"),
    (429, b"", False, V.RATE_LIMITED, "vendor rate limit (HTTP 429)"),
])
def test_each_answer_has_its_outcome_and_reason(
    status: int, body: bytes, require_verified: bool, outcome: VerifyOutcome, reason: str,
) -> None:
    result = answer(status, body, require_verified=require_verified)
    assert (result.outcome, result.reason, result.status_code) == (outcome, reason, status)


def test_a_429_keeps_the_vendors_retry_after_and_survives_a_bad_one() -> None:
    assert answer(429, b"", headers={"Retry-After": "7"}).retry_after == 7.0
    assert answer(429, b"", headers={"Retry-After": "soon"}).retry_after is None


@pytest.mark.parametrize("hint", [True, False, "7", float("nan"), [7]])
def test_a_retry_after_hint_is_kept_only_as_a_number(hint: object) -> None:
    # A bool is an int to float(): True must not become a one-second hint.
    result = VerifyResult(VerifyOutcome.RATE_LIMITED, "r", 429, hint)  # type: ignore[arg-type]
    assert result.retry_after == (7.0 if hint == "7" else None)


def test_an_unprintable_token_is_refused_saying_why() -> None:
    refused = check_token("tok\u00e9n")
    assert refused is not None
    assert (refused.outcome, refused.reason) == (
        VerifyOutcome.INVALID, "token has characters outside printable ASCII")


@pytest.mark.parametrize(("exc", "reason"), [
    (FetchOverloaded("queue full"), "overloaded: queue full"),
    (FetchTimeout("no answer in 2.0s"), "timeout: no answer in 2.0s"),
    (ResponseTooLarge("over 65536 bytes"), "answer too large: over 65536 bytes"),
    (RedirectRefused("to another host"), "redirect refused: to another host"),
    (FetchError("connection refused"), "transport error: connection refused"),
])
def test_a_fetch_error_says_what_kind_it_was(exc: FetchError, reason: str) -> None:
    assert _from_fetch_error(exc, SECRETS).reason == reason


def test_a_fetch_error_whose_text_cannot_be_read_is_still_a_result() -> None:
    class Broken(FetchError):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    result = _from_fetch_error(Broken(), SECRETS)
    assert (result.outcome, result.reason) == (VerifyOutcome.UNAVAILABLE, "transport error")


def test_a_fetch_errors_text_is_kept_to_160_characters() -> None:
    result = _from_fetch_error(FetchError("x" * 400), SECRETS)
    assert result.reason == "transport error: " + "x" * 160


def test_an_empty_secret_does_not_stop_the_check_of_the_others() -> None:
    # The verifier passes (key, token); an empty one must be skipped, not end the scan.
    result = answer(400, b'{"error": "key %s"}' % KEY.encode(), secrets=("", KEY))
    assert result.reason == "vendor refused the request (HTTP 400)"


def test_a_fragment_shorter_than_the_shared_run_is_kept() -> None:
    # The rule is 8 characters: a vendor's hint naming the key's kind ("pk-live", 7 characters
    # of the key) is kept, as is any text whose only overlap with a secret is that short.
    result = answer(400, b'{"error": "expected pk-live"}')
    assert result.reason == "vendor refused the request (HTTP 400): expected pk-live"
