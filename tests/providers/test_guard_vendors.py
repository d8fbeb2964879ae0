"""The guard's decision for the outcomes vendors added: a misconfiguration is a 503 that is never
evidence nor a bypass, a low score a 403, and the client address and the route's action reach
the vendor. Real flag, watcher and confirmer; the vendor is the HTTP verifier over a scripted
transport answering in each vendor's documented shape."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest

from failopen.engine.flag import EnforcementFlag
from failopen.engine.guard import Guard, OutageConfirmer
from failopen.engine.watcher import StatusWatcher
from failopen.providers.registry import PROVIDERS
from failopen.providers.status import StatusReport
from failopen.providers.verify import HttpVerifier
from failopen.web import rejection_payload

# Shares "-secret-" with the codes invalid-input-secret and sitekey-secret-mismatch: a code the
# adapter knows is read as it is, not withheld as if it might carry the secret.
SECRET = "the-site-secret-key-0123456789"


class Page:
    """A status page whose global component reads ``status``; counts its readings."""

    def __init__(self, status: str) -> None:
        self.status = status
        self.reads = 0

    def fetch(self) -> StatusReport:
        self.reads += 1
        return StatusReport(global_status=self.status, global_component=None, regions=(),
                            fetched_at=0.0, source="components")


def guard(vendor: str, handler: Callable[[httpx.Request], httpx.Response], *,
          page: Page | None = None) -> Guard:
    flag = EnforcementFlag()
    page = page or Page("major_outage")
    confirmer = OutageConfirmer(page, StatusWatcher(page, flag), ttl=10.0, wait=1.0)
    provider = PROVIDERS[vendor]
    transport = httpx.MockTransport(handler)
    verifier = HttpVerifier(provider.verify_url or "https://verify.test/v1", SECRET,
                            provider=provider, transport=transport, async_transport=transport)
    return Guard(flag, verifier, confirmer)


def answering(body: object, status: int = 200) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(status, json=body)


@pytest.mark.parametrize(("vendor", "body", "status"), [
    ("turnstile", {"success": False, "error-codes": ["invalid-input-secret"]}, 200),
    ("hcaptcha", {"success": False, "error-codes": ["sitekey-secret-mismatch"]}, 200),
    ("recaptcha", {"success": False, "error-codes": ["invalid-input-secret"]}, 200),
    ("friendly-captcha", {"success": False, "error": {"error_code": "auth_invalid"}}, 401),
])
def test_a_wrong_secret_is_503_cannot_verify_and_never_evidence(vendor: str, body: object,
                                                                status: int) -> None:
    # The page reads an outage: were a misconfiguration evidence, this would bypass.
    page = Page("major_outage")
    g = guard(vendor, answering(body, status), page=page)
    for _ in range(50):
        decision = g.decide("a-real-token", client="203.0.113.9")
        assert (decision.allow, decision.bypassed, decision.status_code) == (False, False, 503)
        assert decision.outcome == "misconfigured"
        assert rejection_payload(decision)["error"]["code"] == "cannot_verify"
    assert page.reads == 0
    assert g.flag.state.enforce
    assert g.counts() == {"misconfigured": 50}


def test_the_vendor_down_still_asks_the_page() -> None:
    page = Page("major_outage")
    g = guard("turnstile", answering({"success": False, "error-codes": ["internal-error"]}),
              page=page)
    decision = g.decide("a-real-token")
    assert decision.allow and decision.bypassed
    assert page.reads == 1


def test_the_vendor_down_with_an_operational_page_is_503() -> None:
    g = guard("recaptcha", lambda request: httpx.Response(502, text="<html>bad gateway"),
              page=Page("operational"))
    decision = g.decide("a-real-token")
    assert (decision.allow, decision.status_code, decision.outcome) == (False, 503,
                                                                         "cannot_verify")
    assert g.flag.state.enforce


@pytest.mark.parametrize("vendor", ["turnstile", "hcaptcha", "recaptcha", "friendly-captcha"])
def test_429_is_never_evidence(vendor: str) -> None:
    page = Page("major_outage")
    g = guard(vendor, answering({"error": "slow down"}, 429), page=page)
    decision = g.decide("a-real-token")
    assert (decision.allow, decision.outcome) == (False, "rate_limited")
    assert page.reads == 0


def test_a_low_score_is_403_low_score_told_as_an_invalid_token() -> None:
    g = guard("recaptcha", answering({"success": True, "score": 0.2, "action": "login"}))
    decision = g.decide("a-real-token")
    assert (decision.allow, decision.status_code, decision.outcome) == (False, 403, "low_score")
    # No oracle for a bot tuning itself: the client is told what any refused token is told.
    assert rejection_payload(decision)["error"]["code"] == "invalid_token"
    assert g.counts() == {"low_score": 1}


def test_the_route_s_action_and_the_client_reach_the_vendor() -> None:
    sent: list[dict[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content)["event"])
        return httpx.Response(200, json={"tokenProperties": {"valid": True, "action": "login"},
                                         "riskAnalysis": {"score": 0.9}})

    g = guard("recaptcha-enterprise", handler)
    g.actions = {"/login/": "login", "/signup/": "signup"}
    assert g.decide("t1", path="/login/", route="/login/", client="203.0.113.9").allow
    refused = g.decide("t2", path="/signup/", route="/signup/", client="203.0.113.9")
    assert (refused.allow, refused.outcome) == (False, "invalid_token")
    assert "expected signup" in refused.reason
    assert sent[0]["expectedAction"] == "login" and sent[0]["userIpAddress"] == "203.0.113.9"
    # An explicit action (Django's @protect(action=...)) wins over the settings'.
    assert g.decide("t3", path="/signup/", route="/signup/", action="login").allow


def test_the_async_guard_decides_alike() -> None:
    g = guard("turnstile", answering({"success": False, "error-codes": ["invalid-input-secret"]}))
    decision = asyncio.run(g.adecide("a-real-token", client="203.0.113.9"))
    assert (decision.status_code, decision.outcome) == (503, "misconfigured")


class PlainVerifier:
    """A Verifier of a user's own, written before vendors took a client address."""

    def verify(self, token: str) -> object:
        from failopen.providers.verify import VerifyOutcome, VerifyResult

        return VerifyResult(VerifyOutcome.VALID, "mine")

    async def averify(self, token: str) -> object:
        return self.verify(token)


def test_a_verifier_of_one_argument_still_works() -> None:
    flag = EnforcementFlag()
    g = Guard(flag, PlainVerifier(), None)  # type: ignore[arg-type]
    g.actions = {"/login/": "login"}
    assert g.decide("t", path="/login/", route="/login/", client="203.0.113.9").allow
