"""The five captcha vendors' verify fakes answer as each vendor documents, and fail on demand."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest.mock import ANY

import httpx
import pytest

from failopen.testing.clock import FakeClock
from failopen.testing.control import send_control
from failopen.testing.providers import (
    FAKES,
    CaptchaVerifyFake,
    FakeFriendlyCaptchaVerify,
    FakeHCaptchaVerify,
    FakeRecaptchaEnterpriseVerify,
    FakeRecaptchaVerify,
    FakeTurnstileVerify,
    fake_verify_api,
    mint_token,
)

BASE = "https://verify.test"
START = "2027-01-15T08:00:00"  # FakeClock's start, as the vendors write it
Json = Any


# -- one way to ask each vendor, and what each answers -------------------------------------------


def post_siteverify(client: httpx.Client, fake: CaptchaVerifyFake, token: str | None,
                    secret: str | None) -> httpx.Response:
    data = {name: value for name, value in (("secret", secret), ("response", token)) if value}
    return client.post(fake.path, data=data)


def post_assessment(client: httpx.Client, fake: CaptchaVerifyFake, token: str | None,
                    secret: str | None) -> httpx.Response:
    event = {"siteKey": fake.public_key, **({"token": token} if token else {})}
    return client.post(fake.path, params={"key": secret} if secret else {}, json={"event": event})


def post_friendly(client: httpx.Client, fake: CaptchaVerifyFake, token: str | None,
                  secret: str | None) -> httpx.Response:
    headers = {"X-API-Key": secret} if secret else {}
    return client.post(fake.path, headers=headers, json={"response": token} if token else {})


def error_codes(code: str) -> tuple[int, Json]:
    return 200, {"success": False, "error-codes": [code]}


def friendly_error(code: str, status: int = 200) -> tuple[int, Json]:
    return status, {"success": False, "error": {"error_code": code, "detail": ANY}}


def assessment(token: str, reason: str, *, hostname: str = "localhost",
               created: str = START + ".000Z", score: float = 0.0) -> tuple[int, Json]:
    return 200, {
        "name": ANY,
        "event": {"token": token, "siteKey": FakeRecaptchaEnterpriseVerify.DEFAULT_PUBLIC_KEY,
                  "userAgent": "", "userIpAddress": "", "expectedAction": ""},
        "riskAnalysis": {"score": score, "reasons": []},
        "tokenProperties": {"valid": reason == "INVALID_REASON_UNSPECIFIED",
                            "invalidReason": reason, "hostname": hostname, "action": "",
                            "createTime": created},
    }


def google_error(code: int, status: str, message: str = ANY,
                 **extra: Json) -> tuple[int, Json]:
    return code, {"error": {"code": code, "message": message, "status": status, **extra}}


API_KEY_INVALID = google_error(
    400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
    details=[{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
              "domain": "googleapis.com",
              "metadata": {"service": "recaptchaenterprise.googleapis.com"}}],
)


@dataclass(frozen=True)
class Vendor:
    """How a test asks one vendor, and the exact answers its users' code reads."""

    name: str
    send: Callable[[httpx.Client, CaptchaVerifyFake, str | None, str | None], httpx.Response]
    success: Callable[[str], tuple[int, Json]]
    replay: Callable[[str], tuple[int, Json]]
    junk: Callable[[str], tuple[int, Json]]
    missing: tuple[int, Json]
    wrong_secret: tuple[int, Json]
    expired: Callable[[str], tuple[int, Json]]


VENDORS = [
    Vendor(
        "turnstile", post_siteverify,
        success=lambda token: (200, {
            "success": True, "challenge_ts": START + ".000Z", "hostname": "localhost",
            "error-codes": [], "action": "", "cdata": "", "metadata": {}}),
        replay=lambda token: error_codes("timeout-or-duplicate"),
        junk=lambda token: error_codes("invalid-input-response"),
        missing=error_codes("missing-input-response"),
        wrong_secret=error_codes("invalid-input-secret"),
        expired=lambda token: error_codes("timeout-or-duplicate"),
    ),
    Vendor(
        "hcaptcha", post_siteverify,
        success=lambda token: (200, {"success": True, "challenge_ts": START + "Z",
                                     "hostname": "localhost", "credit": False}),
        replay=lambda token: error_codes("already-seen-response"),
        junk=lambda token: error_codes("invalid-input-response"),
        missing=error_codes("missing-input-response"),
        wrong_secret=error_codes("invalid-input-secret"),
        expired=lambda token: error_codes("expired-input-response"),
    ),
    Vendor(
        "recaptcha", post_siteverify,
        success=lambda token: (200, {"success": True, "challenge_ts": START + "Z",
                                     "hostname": "localhost"}),
        replay=lambda token: error_codes("timeout-or-duplicate"),
        junk=lambda token: error_codes("invalid-input-response"),
        missing=error_codes("missing-input-response"),
        wrong_secret=error_codes("invalid-input-secret"),
        expired=lambda token: error_codes("timeout-or-duplicate"),
    ),
    Vendor(
        "recaptcha-enterprise", post_assessment,
        success=lambda token: assessment(token, "INVALID_REASON_UNSPECIFIED", score=0.9),
        replay=lambda token: assessment(token, "DUPE"),
        junk=lambda token: assessment(token, "MALFORMED", hostname="",
                                      created="1970-01-01T00:00:00Z"),
        missing=assessment("", "MISSING", hostname="", created="1970-01-01T00:00:00Z"),
        wrong_secret=API_KEY_INVALID,
        expired=lambda token: assessment(token, "EXPIRED"),
    ),
    Vendor(
        "friendly-captcha", post_friendly,
        success=lambda token: (200, {"success": True, "data": {
            "event_id": ANY, "challenge": {"timestamp": START + "Z", "origin": "https://localhost"},
            "risk_intelligence": None}}),
        replay=lambda token: friendly_error("response_duplicate"),
        junk=lambda token: friendly_error("response_invalid"),
        missing=friendly_error("response_missing", 400),
        wrong_secret=friendly_error("auth_invalid", 401),
        expired=lambda token: friendly_error("response_timeout"),
    ),
]
BY_NAME = {vendor.name: vendor for vendor in VENDORS}


def answer(response: httpx.Response) -> tuple[int, Json]:
    return response.status_code, response.json()


@pytest.fixture(params=VENDORS, ids=lambda vendor: vendor.name)
def vendor(request: pytest.FixtureRequest) -> Vendor:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake(vendor: Vendor, clock: FakeClock) -> CaptchaVerifyFake:
    return fake_verify_api(vendor.name, clock=clock)


@pytest.fixture
def client(fake: CaptchaVerifyFake) -> Iterator[httpx.Client]:
    with httpx.Client(transport=fake.transport(), base_url=BASE) as http:
        yield http


def ask(vendor: Vendor, client: httpx.Client, fake: CaptchaVerifyFake, token: str | None,
        secret: str | None = None) -> tuple[int, Json]:
    return answer(vendor.send(client, fake, token, secret or fake.private_key))


# -- every vendor: single use, junk, missing, keys, lifetimes ------------------------------------


def test_registry_names_each_vendor_once() -> None:
    assert FAKES == {
        "turnstile": FakeTurnstileVerify,
        "hcaptcha": FakeHCaptchaVerify,
        "recaptcha": FakeRecaptchaVerify,
        "recaptcha-enterprise": FakeRecaptchaEnterpriseVerify,
        "friendly-captcha": FakeFriendlyCaptchaVerify,
    }
    assert {name: fake.token_field for name, fake in FAKES.items()} == {
        "turnstile": "cf-turnstile-response",
        "hcaptcha": "h-captcha-response",
        "recaptcha": "g-recaptcha-response",
        "recaptcha-enterprise": "g-recaptcha-response",
        "friendly-captcha": "frc-captcha-response",
    }
    assert all(fake.vendor == name for name, fake in FAKES.items())
    with pytest.raises(ValueError, match="no fake for vendor 'arkose'"):
        fake_verify_api("arkose")


def test_good_token_passes_once_then_is_a_replay(
    vendor: Vendor, client: httpx.Client, fake: CaptchaVerifyFake
) -> None:
    token = fake.issue_token()
    assert ask(vendor, client, fake, token) == vendor.success(token)
    assert ask(vendor, client, fake, token) == vendor.replay(token)
    assert ask(vendor, client, fake, fake.GOOD) == vendor.success(fake.GOOD)
    assert fake.tokens_seen == [token, token, fake.GOOD]
    assert fake.requests == 3


def test_junk_and_missing_tokens(vendor: Vendor, client: httpx.Client,
                                 fake: CaptchaVerifyFake) -> None:
    assert ask(vendor, client, fake, fake.BAD) == vendor.junk(fake.BAD)
    assert ask(vendor, client, fake, "made-up") == vendor.junk("made-up")
    assert ask(vendor, client, fake, None) == vendor.missing


def test_wrong_secret_leaves_the_token_unused(
    vendor: Vendor, client: httpx.Client, fake: CaptchaVerifyFake
) -> None:
    token = fake.issue_token()
    assert ask(vendor, client, fake, token, secret="not-the-key") == vendor.wrong_secret
    assert ask(vendor, client, fake, token) == vendor.success(token)


def test_tokens_expire_after_the_documented_lifetime(
    vendor: Vendor, client: httpx.Client, fake: CaptchaVerifyFake, clock: FakeClock
) -> None:
    documented = {"turnstile": 300, "hcaptcha": 120, "recaptcha": 120,
                  "recaptcha-enterprise": 120, "friendly-captcha": 600}
    assert fake.token_lifetime == documented[vendor.name]
    fresh, stale = fake.issue_token(), fake.issue_token()
    clock.advance(documented[vendor.name] - 1)
    assert ask(vendor, client, fake, fresh) == vendor.success(fresh)
    clock.advance(1)
    assert ask(vendor, client, fake, stale) == vendor.expired(stale)
    assert ask(vendor, client, fake, stale) == vendor.replay(stale)


def test_a_lifetime_of_none_never_expires(vendor: Vendor, clock: FakeClock) -> None:
    fake = fake_verify_api(vendor.name, clock=clock, token_lifetime=None)
    clock.advance(86_400 * 365)
    with httpx.Client(transport=fake.transport(), base_url=BASE) as client:
        assert ask(vendor, client, fake, fake.GOOD) == vendor.success(fake.GOOD)
    with pytest.raises(ValueError, match="token_lifetime"):
        fake_verify_api(vendor.name, token_lifetime=0)
