"""What each vendor's verify call sends, the one retry Turnstile allows, and what is logged.

The request shapes are the vendors' documented ones: a form POST of ``secret``/``response``/
``remoteip`` for the siteverify vendors (``sitekey`` for hCaptcha, ``idempotency_key`` for
Turnstile), a JSON assessment with ``?key=`` for reCAPTCHA Enterprise, JSON with ``X-API-Key``
for Friendly Captcha.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from urllib.parse import parse_qs

import httpx
import pytest

from failopen.providers.registry import PROVIDERS
from failopen.providers.verify import HttpVerifier, VerifyOutcome

SECRET = "0x4AAAAAAA-the-site-secret-key"
TOKEN = "token-from-the-widget-0123456789"
ENTERPRISE_URL = "https://recaptchaenterprise.googleapis.com/v1/projects/my-proj/assessments"


def verifier(vendor: str, handler: Callable[[httpx.Request], httpx.Response], *,
             public_key: str | None = "site-key-1", timeout: float = 3.0) -> HttpVerifier:
    provider = PROVIDERS[vendor]
    url = provider.verify_url or ENTERPRISE_URL
    transport = httpx.MockTransport(handler)
    return HttpVerifier(url, SECRET, provider=provider, public_key=public_key, timeout=timeout,
                        transport=transport, async_transport=transport)


class Recorder:
    """Answers each request with the next of ``answers`` and keeps what was sent."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def form(self, index: int = 0) -> dict[str, str]:
        parsed = parse_qs(self.requests[index].content.decode(), keep_blank_values=True)
        return {key: values[0] for key, values in parsed.items()}


def ok(body: object) -> httpx.Response:
    return httpx.Response(200, json=body)


@pytest.mark.parametrize(("vendor", "extra"), [
    ("turnstile", {"idempotency_key"}), ("hcaptcha", {"sitekey"}), ("recaptcha", set()),
])
def test_siteverify_vendors_get_a_form_post(vendor: str, extra: set[str]) -> None:
    recorder = Recorder(ok({"success": True}))
    result = verifier(vendor, recorder).verify(TOKEN, remote_ip="203.0.113.9")
    assert result.valid
    request = recorder.requests[0]
    assert request.method == "POST"
    assert request.url == PROVIDERS[vendor].verify_url
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    form = recorder.form()
    assert set(form) == {"secret", "response", "remoteip"} | extra
    assert (form["secret"], form["response"], form["remoteip"]) == (SECRET, TOKEN, "203.0.113.9")
    if vendor == "hcaptcha":
        assert form["sitekey"] == "site-key-1"


def test_no_remoteip_is_sent_when_the_client_is_unknown() -> None:
    recorder = Recorder(ok({"success": True}))
    verifier("recaptcha", recorder).verify(TOKEN)
    assert "remoteip" not in recorder.form()


def test_enterprise_creates_an_assessment_with_the_key_in_a_header() -> None:
    recorder = Recorder(ok({"tokenProperties": {"valid": True, "action": "login"},
                            "riskAnalysis": {"score": 0.9}}))
    result = verifier("recaptcha-enterprise", recorder).verify(
        TOKEN, remote_ip="2001:db8::1", action="login")
    assert result.valid
    request = recorder.requests[0]
    # Never in the URL: httpx logs every request's URL at INFO.
    assert request.headers["x-goog-api-key"] == SECRET
    assert str(request.url) == ENTERPRISE_URL
    assert json.loads(request.content) == {"event": {
        "token": TOKEN, "siteKey": "site-key-1", "userIpAddress": "2001:db8::1",
        "expectedAction": "login"}}


def test_friendly_captcha_sends_its_api_key_in_a_header() -> None:
    recorder = Recorder(ok({"success": True, "data": {}}))
    assert verifier("friendly-captcha", recorder).verify(TOKEN).valid
    request = recorder.requests[0]
    assert request.headers["x-api-key"] == SECRET
    assert json.loads(request.content) == {"response": TOKEN, "sitekey": "site-key-1"}


# -- Turnstile alone may retry -----------------------------------------------------------------


def test_turnstile_retries_a_failed_call_once_with_the_same_idempotency_key() -> None:
    recorder = Recorder(ok({"success": False, "error-codes": ["internal-error"]}),
                        ok({"success": True}))
    assert verifier("turnstile", recorder).verify(TOKEN).valid
    assert len(recorder.requests) == 2
    first, second = recorder.form(0), recorder.form(1)
    assert first["idempotency_key"] == second["idempotency_key"]
    assert len(first["idempotency_key"]) == 36  # a UUID


def test_turnstile_retries_a_lost_answer() -> None:
    recorder = Recorder(httpx.Response(502), ok({"success": True}))
    assert verifier("turnstile", recorder).verify(TOKEN).valid
    assert len(recorder.requests) == 2


def test_each_token_gets_its_own_idempotency_key() -> None:
    recorder = Recorder(ok({"success": True}))
    turnstile = verifier("turnstile", recorder)
    turnstile.verify(TOKEN)
    turnstile.verify(TOKEN + "-2")
    assert recorder.form(0)["idempotency_key"] != recorder.form(1)["idempotency_key"]


def test_turnstile_retries_once_only() -> None:
    recorder = Recorder(httpx.Response(503))
    result = verifier("turnstile", recorder).verify(TOKEN)
    assert result.outcome is VerifyOutcome.UNAVAILABLE
    assert len(recorder.requests) == 2


@pytest.mark.parametrize("answer", [ok({"success": False, "error-codes": ["timeout-or-duplicate"]}),
                                    ok({"success": False, "error-codes": ["invalid-input-secret"]}),
                                    httpx.Response(429)])
def test_turnstile_never_retries_an_answer_that_is_final(answer: httpx.Response) -> None:
    recorder = Recorder(answer)
    verifier("turnstile", recorder).verify(TOKEN)
    assert len(recorder.requests) == 1


@pytest.mark.parametrize("vendor", ["hcaptcha", "recaptcha", "recaptcha-enterprise",
                                    "friendly-captcha", "enforcement"])
def test_no_other_vendor_is_ever_retried(vendor: str) -> None:
    # A retry there could burn a good token: the first call may have reached the vendor.
    recorder = Recorder(httpx.Response(503))
    assert verifier(vendor, recorder).verify(TOKEN).outcome is VerifyOutcome.UNAVAILABLE
    assert len(recorder.requests) == 1


def test_the_async_twin_retries_turnstile_too() -> None:
    recorder = Recorder(httpx.Response(502), ok({"success": True}))

    async def main() -> bool:
        turnstile = verifier("turnstile", recorder)
        try:
            return (await turnstile.averify(TOKEN, remote_ip="203.0.113.9")).valid
        finally:
            await turnstile.aclose()

    assert asyncio.run(main())
    assert len(recorder.requests) == 2
    assert recorder.form(1)["remoteip"] == "203.0.113.9"


def test_a_turnstile_token_too_long_is_refused_without_a_call() -> None:
    recorder = Recorder(ok({"success": True}))
    result = verifier("turnstile", recorder).verify("x" * 2049)
    assert result.outcome is VerifyOutcome.INVALID
    assert recorder.requests == []


# -- what a misconfiguration logs --------------------------------------------------------------


def test_a_misconfiguration_logs_one_paced_error_naming_the_code_and_the_fix(
        caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder(ok({"success": False, "error-codes": ["invalid-input-secret"]}))
    turnstile = verifier("turnstile", recorder)
    with caplog.at_level(logging.ERROR, logger="failopen.verify"):
        for _ in range(5):
            assert turnstile.verify(TOKEN).outcome is VerifyOutcome.MISCONFIGURED
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    message = errors[0].getMessage()
    assert "invalid-input-secret" in message and "FAILOPEN_PRIVATE_KEY" in message
    assert errors[0].event == "failopen.verify_misconfigured"  # type: ignore[attr-defined]
    assert SECRET not in caplog.text and SECRET[:10] not in caplog.text
    assert TOKEN not in caplog.text


def test_the_enterprise_key_never_reaches_a_log_or_a_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"failed to connect to {request.url}")

    enterprise = verifier("recaptcha-enterprise", refuse)
    with caplog.at_level(logging.DEBUG):
        result = enterprise.verify(TOKEN)
    assert result.outcome is VerifyOutcome.UNAVAILABLE
    assert SECRET not in result.reason and SECRET not in caplog.text
    assert SECRET not in repr(enterprise)
