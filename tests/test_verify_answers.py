"""The pure mapping of a verify answer to an outcome, and the redaction of the text it keeps.

These pin the edges the HTTP tests in test_verify.py pass over: a status just outside 2xx, a 4xx
whose JSON is not an object, and a secret that sits where a scan of the text is easiest to get
wrong (at its very end, or spelt with "~", the last printable ASCII character).
"""

from __future__ import annotations

import httpx
import pytest

from failopen.exceptions import FetchError
from failopen.vendor.exchange import Fetched
from failopen.vendor.verify_answers import VerifyOutcome, VerifyResult, _from_fetch_error, classify

KEY = "pk-live-7Q2xV9mB4kR8sT1w-secret"
TILDE_KEY = "sk~live~Zq81~Wt5~Ab"  # "~" may be in a key: it must still be recognised
SECRETS = (KEY, TILDE_KEY)
VALID_BODY = b'{"session_details": {"solved": true, "verified": true}}'


def answer(status: int, content: bytes) -> VerifyResult:
    fetched = Fetched(status, httpx.Headers(), content, httpx.URL("https://verify.test/"), 0.0)
    return classify(fetched, require_verified=True, secrets=SECRETS)


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
