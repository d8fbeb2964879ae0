"""Findings of the security review of the vendors' adapters: each test failed on the code before
its fix."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from failopen.integrations import _forms

from failopen import Config, ConfigError
from failopen.engine.decision import verify_decision
from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard import Guard
from failopen.providers.registry import PROVIDERS
from failopen.providers.status import StatusReport
from failopen.providers.status_documents import Component
from failopen.providers.verify import HttpVerifier, VerifyOutcome, VerifyResult
from failopen.web import flag_payload

ENTERPRISE = "https://recaptchaenterprise.googleapis.com/v1/projects/p/assessments"
TURNSTILE = "https://challenges.cloudflare.com/turnstile/v0/siteverify"
RECAPTCHA = "https://www.google.com/recaptcha/api/siteverify"


def verifier(vendor: str, url: str, status: int, body: Any,
             key: str = "0x4AAAAAAAsecretsecretsecret") -> HttpVerifier:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    transport = httpx.MockTransport(lambda request: httpx.Response(status, content=raw))
    return HttpVerifier(url, key, provider=PROVIDERS[vendor], public_key="site",
                        transport=transport, async_transport=transport)


def test_f1_the_enterprise_api_key_reaches_no_log_at_any_level(
        caplog: pytest.LogCaptureFixture) -> None:
    # httpx logs each request's URL at INFO: a key sent as ?key= was in every line.
    key = "AIzaSyD-REAL-SECRET-KEY-0123456789"
    enterprise = verifier("recaptcha-enterprise", ENTERPRISE, 200,
                          {"tokenProperties": {"valid": False}}, key=key)
    with caplog.at_level(logging.DEBUG):
        enterprise.verify("a-token-of-the-browser")
    assert caplog.records  # httpx did log the request
    assert not [r for r in caplog.records if key in r.getMessage() or key[:12] in r.getMessage()]


def test_f2_a_low_score_reads_in_a_form_as_any_refused_token() -> None:
    low = verify_decision(VerifyResult(VerifyOutcome.INVALID, "low", 200, low_score=True),
                          retry_after=5)
    bad = verify_decision(VerifyResult(VerifyOutcome.INVALID, "bad", 200), retry_after=5)
    wrong = verify_decision(VerifyResult(VerifyOutcome.MISCONFIGURED, "key", 200), retry_after=5)
    down = verify_decision(VerifyResult(VerifyOutcome.UNAVAILABLE, "down", 503), retry_after=5)
    assert _forms.message(low) == _forms.message(bad)
    assert _forms.message(wrong) == _forms.message(down)


@pytest.mark.parametrize("token", ["-", "0.xxclient-blockedxx", "0.plainjunk"])
def test_f3_the_token_cannot_turn_a_refusal_into_a_misconfiguration(token: str) -> None:
    # An unknown code withheld for sharing characters with the token was "no code", and a 403
    # without codes is misconfigured: the attacker chose between 403 and 503 with an ERROR.
    turnstile = verifier("turnstile", TURNSTILE, 403,
                         {"success": False, "error-codes": ["client-blocked"]})
    assert turnstile.verify(token).outcome is VerifyOutcome.INVALID


def test_f3_another_vendor_s_401_is_not_logged_as_the_spec_vendor_s_wrong_key(
        caplog: pytest.LogCaptureFixture) -> None:
    turnstile = verifier("turnstile", TURNSTILE, 401,
                         {"success": False, "error-codes": ["client-blocked"]})
    with caplog.at_level(logging.ERROR, logger="failopen.verify"):
        assert turnstile.verify("junk-token").outcome is VerifyOutcome.INVALID
    assert not [r for r in caplog.records if "rejected our credentials" in r.getMessage()]


@pytest.mark.parametrize("vendor", ["friendly-captcha", "hcaptcha", "enforcement"])
def test_f4_expected_actions_stop_start_up_for_a_vendor_without_actions(vendor: str) -> None:
    with pytest.raises(ConfigError, match="name no action"):
        Config(vendor=vendor, private_key="k" * 20, verify_url="https://verify.test/v",
               protected_paths=("/login",), expected_actions="/login=login",
               evidence=frozenset({"status"}), status_url="https://status.test",
               global_component="g")


def test_f4_an_action_asked_of_hcaptcha_is_said_not_refused(
        caplog: pytest.LogCaptureFixture) -> None:
    hcaptcha = verifier("hcaptcha", "https://api.hcaptcha.com/siteverify", 200,
                        {"success": True})
    with caplog.at_level(logging.WARNING, logger="failopen.verify"):
        assert hcaptcha.verify("tok", action="login").valid
        assert hcaptcha.verify("tok2", action="login").valid
    said = [r for r in caplog.records if getattr(r, "event", "") == "failopen.action_unchecked"]
    assert len(said) == 1


def test_f5_a_score_no_float_holds_is_a_refusal_not_an_error(
        caplog: pytest.LogCaptureFixture) -> None:
    huge = b'{"success": true, "score": 1' + b"0" * 400 + b"}"
    recaptcha = verifier("recaptcha", RECAPTCHA, 200, huge)
    result = recaptcha.verify("tok")
    assert result.outcome is VerifyOutcome.INVALID and "score unreadable" in result.reason
    guard = Guard(EnforcementFlag(), recaptcha, None)
    with caplog.at_level(logging.ERROR):
        decisions = [guard.decide("tok", path="/login") for _ in range(20)]
    assert {d.outcome for d in decisions} == {"invalid_token"}
    assert not [r for r in caplog.records if r.exc_info]


def test_f5_an_answer_an_adapter_cannot_read_is_a_result() -> None:
    class Broken(type(PROVIDERS["turnstile"])):  # type: ignore[misc]
        def classify(self, fetched: Any, **kwargs: Any) -> VerifyResult:
            raise KeyError("a bug")

    broken = HttpVerifier(TURNSTILE, "k" * 20, provider=Broken(), transport=httpx.MockTransport(
        lambda request: httpx.Response(200, json={"success": True})))
    result = broken.verify("tok")
    assert result.outcome is VerifyOutcome.UNAVAILABLE and "KeyError" in result.reason


def test_f6_the_flag_endpoint_shows_a_component_s_name_cut_short() -> None:
    from failopen.engine.watcher import StatusWatcher

    class Page:
        def fetch(self) -> StatusReport:
            glob = Component(id="x" * 5000, name="n" * 500_000, status="operational",
                             description=None)
            return StatusReport(global_status="operational", global_component=glob, regions=(),
                                fetched_at=0.0, source="components")

    flag = EnforcementFlag()
    watcher = StatusWatcher(Page(), flag)
    watcher.poll_once()
    payload = json.dumps(flag_payload(flag.state, poll=watcher))
    assert len(payload) < 2_000


@pytest.mark.parametrize(("vendor", "secret"), [
    ("turnstile", "1x0000000000000000000000000000000AA"),
    ("recaptcha", "6LeIxAcTAAAAAGG-vFI1TnRWxMZNFuojJ4WifJWe"),
    ("hcaptcha", "0x0000000000000000000000000000000000000000"),
])
def test_a_vendor_s_test_secret_fails_the_preflight_and_warns_at_start(
        vendor: str, secret: str, caplog: pytest.LogCaptureFixture) -> None:
    import functools

    from failopen.cli.check import run_checks
    from failopen.cli.preflight import Wiring

    factory = functools.partial(Config.from_mapping, {
        "VENDOR": vendor, "PRIVATE_KEY": secret, "PROTECTED_PATHS": ["/login"],
        "EVIDENCE": "probe"}, environ={})
    found = {c.name: c for c in run_checks(factory, wiring=Wiring(), environ={})}
    verify = found["verify_api"]
    assert (verify.status, verify.facts["answer"]) == ("problem", "test_secret")
    with caplog.at_level(logging.WARNING, logger="failopen.verify"):
        HttpVerifier(RECAPTCHA, secret, provider=PROVIDERS[vendor])
    assert [r for r in caplog.records if getattr(r, "event", "") == "failopen.verify_test_secret"]
