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
    expected = {
        "turnstile": FakeTurnstileVerify,
        "hcaptcha": FakeHCaptchaVerify,
        "recaptcha": FakeRecaptchaVerify,
        "recaptcha-enterprise": FakeRecaptchaEnterpriseVerify,
        "friendly-captcha": FakeFriendlyCaptchaVerify,
    }
    assert expected == FAKES
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


# -- faults --------------------------------------------------------------------------------------

HTML = "<html><body><h1>Service temporarily unavailable</h1></body></html>"
# The vendors with their own body for a 500, 429 or 503; the others' front ends send HTML.
STYLED = {
    "recaptcha-enterprise": {
        500: google_error(500, "INTERNAL", "Internal error encountered.")[1],
        429: google_error(429, "RESOURCE_EXHAUSTED")[1],
        503: google_error(503, "UNAVAILABLE", "The service is currently unavailable.")[1],
    },
}


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_status_faults_in_each_vendors_style(
    vendor: Vendor, client: httpx.Client, fake: CaptchaVerifyFake, status: int
) -> None:
    token = fake.issue_token()
    fake.set_fault(str(status), retry_after=2.5)
    response = vendor.send(client, fake, token, fake.private_key)
    assert response.status_code == status
    styled = STYLED.get(vendor.name, {}).get(status)
    if styled is not None:
        assert response.json() == styled
    else:
        assert response.headers["content-type"] == "text/html"
        assert response.text == HTML
    assert response.headers.get("retry-after") == ("3" if status in (429, 503) else None)
    fake.set_fault(None)
    assert ask(vendor, client, fake, token) == vendor.success(token)  # the fault used nothing


@pytest.mark.parametrize(("fault", "error"), [
    ("timeout", httpx.ReadTimeout), ("slow_drip", httpx.ReadTimeout),
    ("reset", httpx.ReadError), ("truncated", httpx.RemoteProtocolError),
])
def test_network_faults_in_process(vendor: Vendor, client: httpx.Client,
                                   fake: CaptchaVerifyFake, fault: str,
                                   error: type[Exception]) -> None:
    fake.set_fault(fault)
    with pytest.raises(error):
        vendor.send(client, fake, fake.issue_token(), fake.private_key)


@pytest.mark.parametrize(("fault", "content_type", "body"), [
    ("not_json", "text/html", HTML.encode()),
    ("empty", "application/json", b""),
    ("wrong_shape", "application/json", b'{"status": "ok", "result": {}}'),
])
def test_body_faults(vendor: Vendor, client: httpx.Client, fake: CaptchaVerifyFake, fault: str,
                     content_type: str, body: bytes) -> None:
    fake.set_fault(fault)
    response = vendor.send(client, fake, fake.GOOD, fake.private_key)
    assert (response.status_code, response.headers["content-type"], response.content) == (
        200, content_type, body)


def test_unknown_fault_is_refused(fake: CaptchaVerifyFake) -> None:
    with pytest.raises(ValueError, match="unknown fault 'melt'"):
        fake.set_fault("melt")
    assert ("internal_error" in fake.FAULTS) == (fake.vendor == "turnstile")


def test_other_paths_and_methods(fake: CaptchaVerifyFake, client: httpx.Client) -> None:
    assert client.post("/elsewhere").status_code == 404
    response = client.get(fake.path)
    assert (response.status_code, response.headers["allow"]) == (405, "POST")


def test_reset_clears_faults_counters_and_replay_memory(
    vendor: Vendor, client: httpx.Client, fake: CaptchaVerifyFake, clock: FakeClock
) -> None:
    assert ask(vendor, client, fake, fake.GOOD) == vendor.success(fake.GOOD)
    fake.set_fault("503")
    clock.advance(fake.token_lifetime or 0)
    fake.reset()
    assert (fake.fault, fake.requests, fake.tokens_seen) == (None, 0, [])
    status, body = ask(vendor, client, fake, fake.GOOD)  # solved anew, at the reset
    assert (status, body) == (200, ANY) and body != vendor.replay(fake.GOOD)[1]


# -- on a real socket ----------------------------------------------------------------------------


def test_served_on_a_socket(vendor: Vendor, fake: CaptchaVerifyFake) -> None:
    with pytest.raises(RuntimeError, match="serve"):
        _ = fake.url
    with fake.serve(), httpx.Client(base_url=fake.url, timeout=5) as client:
        assert fake.verify_url == fake.url + fake.path
        token = fake.issue_token()
        assert ask(vendor, client, fake, token) == vendor.success(token)
        assert ask(vendor, client, fake, token) == vendor.replay(token)
        fake.set_fault("reset")
        with pytest.raises(httpx.TransportError):
            vendor.send(client, fake, fake.GOOD, fake.private_key)


@pytest.mark.parametrize(("fault", "error"), [
    ("timeout", httpx.ReadTimeout), ("slow_drip", httpx.ReadTimeout),
    ("truncated", httpx.RemoteProtocolError),
])
def test_network_faults_on_a_socket(fault: str, error: type[Exception]) -> None:
    fake = FakeTurnstileVerify()
    fake.set_fault(fault)
    # The drip sends a byte every 50 ms: a read time-out shorter than that sees it stall.
    timeout = httpx.Timeout(5.0, read=0.03)
    with (fake.serve(), httpx.Client(base_url=fake.url, timeout=timeout) as client,
          pytest.raises(error)):
        post_siteverify(client, fake, fake.GOOD, fake.private_key)


def test_served_with_control(fake: CaptchaVerifyFake) -> None:
    with fake.serve(control=True):
        state = send_control(fake.url, {"fault": "503"})
        assert state == {"fake": "verify", "fault": "503", "requests": 0}
        assert fake.fault == "503"


# -- tokens minted in another process ------------------------------------------------------------


def test_minted_tokens_are_accepted_once_by_a_fake_with_the_key(
    vendor: Vendor, clock: FakeClock
) -> None:
    served = fake_verify_api(vendor.name, clock=clock, private_key="shared-test-key")
    token = mint_token(vendor.name, "shared-test-key")
    forged = mint_token(vendor.name, "another-key")
    other_vendor = mint_token("turnstile" if vendor.name != "turnstile" else "hcaptcha",
                              "shared-test-key")
    with served.serve(), httpx.Client(base_url=served.url, timeout=5) as client:
        assert ask(vendor, client, served, token) == vendor.success(token)
        assert ask(vendor, client, served, token) == vendor.replay(token)
        assert ask(vendor, client, served, forged) == vendor.junk(forged)
        assert ask(vendor, client, served, other_vendor) == vendor.junk(other_vendor)


def test_minted_claims_ride_in_the_token() -> None:
    fake = FakeRecaptchaVerify(clock=FakeClock())
    token = mint_token("recaptcha", fake.private_key, score=0.2, action="signup",
                       hostname="shop.example")
    with httpx.Client(transport=fake.transport(), base_url=BASE) as client:
        body = post_siteverify(client, fake, token, fake.private_key).json()
    assert body == {"success": True, "challenge_ts": START + "Z", "hostname": "shop.example",
                    "score": 0.2, "action": "signup"}
    with pytest.raises(TypeError, match="hcaptcha tokens carry no 'action'"):
        mint_token("hcaptcha", "k", action="login")
    with pytest.raises(ValueError, match="no fake for vendor"):
        mint_token("recaptcha-v4", "k")


def test_token_options_are_checked() -> None:
    with pytest.raises(TypeError, match="friendly-captcha tokens carry no 'score'"):
        FakeFriendlyCaptchaVerify().issue_token(score=0.5)
    with pytest.raises(ValueError, match="score runs from 0.0 to 1.0"):
        FakeRecaptchaVerify().issue_token(score=1.5)
    with pytest.raises(TypeError, match="score must be int or float"):
        FakeRecaptchaVerify().issue_token(score="high")  # type: ignore[arg-type]


# -- Turnstile -----------------------------------------------------------------------------------


def turnstile_client(fake: FakeTurnstileVerify) -> httpx.Client:
    return httpx.Client(transport=fake.transport(), base_url=BASE)


TURNSTILE_SUCCESS = BY_NAME["turnstile"].success("")[1]


def test_turnstile_idempotent_retry_gets_the_same_answer() -> None:
    fake = FakeTurnstileVerify(clock=FakeClock())
    token = fake.issue_token(action="login", cdata="session-7", hostname="shop.example")
    first = {"secret": fake.private_key, "response": token, "idempotency_key": "k-1"}
    success = TURNSTILE_SUCCESS | {"action": "login", "cdata": "session-7",
                                   "hostname": "shop.example"}
    with turnstile_client(fake) as client:
        assert client.post(fake.path, data=first).json() == success
        assert client.post(fake.path, json=first).json() == success  # the retry, as JSON
        assert client.post(fake.path, data=first | {"idempotency_key": "k-2"}).json() == {
            "success": False, "error-codes": ["timeout-or-duplicate"]}
        assert client.post(fake.path, data={"secret": fake.private_key,
                                            "response": token}).json() == {
            "success": False, "error-codes": ["timeout-or-duplicate"]}
        fake.reset()  # forgets the remembered answers too
        assert client.post(fake.path, data=first).json()["success"] is True


def test_turnstile_request_errors() -> None:
    fake = FakeTurnstileVerify()
    with turnstile_client(fake) as client:
        def codes(**kwargs: Any) -> Json:
            return client.post(fake.path, **kwargs).json()["error-codes"]

        assert codes(data={"response": fake.GOOD}) == ["missing-input-secret"]
        assert codes(content=b"{not json", headers={"Content-Type": "application/json"}) == [
            "bad-request"]
        assert codes(data={"secret": fake.private_key, "response": "x" * 2049}) == [
            "invalid-input-response"]
        fake.set_fault("internal_error")
        response = client.post(fake.path, data={"secret": fake.private_key, "response": "t"})
        assert (response.status_code, response.json()) == (
            200, {"success": False, "error-codes": ["internal-error"]})


@pytest.mark.parametrize(("secret", "dummy", "real"), [
    (FakeTurnstileVerify.ALWAYS_PASS_SECRET, "pass", "invalid-input-response"),
    (FakeTurnstileVerify.ALWAYS_FAIL_SECRET, "invalid-input-response", "invalid-input-response"),
    (FakeTurnstileVerify.ALREADY_SPENT_SECRET, "timeout-or-duplicate", "timeout-or-duplicate"),
])
def test_turnstile_test_secrets(secret: str, dummy: str, real: str) -> None:
    fake = FakeTurnstileVerify(private_key=secret, clock=FakeClock())
    with turnstile_client(fake) as client:
        for _ in range(2):  # test keys do not use tokens up
            body = client.post(fake.path, data={"secret": secret,
                                                "response": fake.DUMMY_TOKEN}).json()
            assert body == (TURNSTILE_SUCCESS | {"action": "test", "cdata": "test-data"}
                            if dummy == "pass" else {"success": False, "error-codes": [dummy]})
        assert client.post(fake.path, data={"secret": secret, "response": fake.GOOD}).json() == {
            "success": False, "error-codes": [real]}
    production = FakeTurnstileVerify()
    with turnstile_client(production) as client:
        assert client.post(production.path, data={"secret": production.private_key,
                                                  "response": fake.DUMMY_TOKEN}).json() == {
            "success": False, "error-codes": ["invalid-input-response"]}


# -- hCaptcha ------------------------------------------------------------------------------------


def hcaptcha_answer(fake: FakeHCaptchaVerify, **fields: str) -> tuple[int, Json]:
    with httpx.Client(transport=fake.transport(), base_url=BASE) as client:
        return answer(client.post(fake.path, data={"secret": fake.private_key, **fields}))


def test_hcaptcha_sitekey_checks() -> None:
    fake = FakeHCaptchaVerify()
    assert hcaptcha_answer(fake, response=fake.GOOD, sitekey="someone-elses") == error_codes(
        "sitekey-secret-mismatch")
    assert hcaptcha_answer(fake, response=fake.GOOD, sitekey=fake.TEST_SITE_KEY) == error_codes(
        "not-using-dummy-passcode")
    assert hcaptcha_answer(fake, response=fake.GOOD, sitekey=fake.public_key)[1]["success"]


def test_hcaptcha_remoteip_and_secret_checks() -> None:
    fake = FakeHCaptchaVerify(require_remoteip=True)
    assert hcaptcha_answer(fake, response=fake.GOOD) == error_codes("missing-remoteip")
    assert hcaptcha_answer(fake, response=fake.GOOD, remoteip="300.1.1.1") == error_codes(
        "invalid-remoteip")
    assert hcaptcha_answer(fake, secret="", response=fake.GOOD) == error_codes(
        "missing-input-secret")
    assert hcaptcha_answer(fake, response=fake.GOOD, remoteip="2001:db8::1")[1]["success"]


def test_hcaptcha_enterprise_scores_each_token() -> None:
    fake = FakeHCaptchaVerify(enterprise=True, clock=FakeClock())
    risky = fake.issue_token(score=0.8)
    assert hcaptcha_answer(fake, response=risky) == (200, {
        "success": True, "challenge_ts": START + "Z", "hostname": "localhost", "credit": False,
        "score": 0.8, "score_reason": []})
    assert hcaptcha_answer(fake, response=fake.GOOD)[1]["score"] == 0.0


def test_hcaptcha_test_keys() -> None:
    fake = FakeHCaptchaVerify(private_key=FakeHCaptchaVerify.TEST_SECRET, clock=FakeClock())
    assert fake.public_key == fake.TEST_SITE_KEY
    for _ in range(2):
        assert hcaptcha_answer(fake, response=fake.TEST_TOKEN, sitekey=fake.TEST_SITE_KEY) == (
            200, {"success": True, "challenge_ts": START + "Z", "hostname": "dummy-key-pass",
                  "credit": False})
    assert hcaptcha_answer(fake, response=fake.GOOD) == error_codes("invalid-input-response")


# -- reCAPTCHA -----------------------------------------------------------------------------------


def test_recaptcha_v3_score_and_action() -> None:
    fake = FakeRecaptchaVerify(clock=FakeClock())
    bot, human = fake.issue_token(score=0.1, action="login"), fake.issue_token(action="signup")
    with httpx.Client(transport=fake.transport(), base_url=BASE) as client:
        assert answer(post_siteverify(client, fake, bot, fake.private_key)) == (200, {
            "success": True, "challenge_ts": START + "Z", "hostname": "localhost",
            "score": 0.1, "action": "login"})
        assert post_siteverify(client, fake, human, fake.private_key).json()["score"] == 0.9
        # Google reads the query string too, and names both missing fields at once.
        query = client.post(fake.path, params={"secret": fake.private_key,
                                               "response": fake.GOOD})
        assert query.json()["success"] is True
        assert client.post(fake.path, json={"secret": fake.private_key}).json() == {
            "success": False, "error-codes": ["missing-input-response", "missing-input-secret"]}


def test_recaptcha_test_keys_pass_everything() -> None:
    fake = FakeRecaptchaVerify(private_key=FakeRecaptchaVerify.TEST_SECRET, clock=FakeClock())
    assert fake.public_key == fake.TEST_SITE_KEY
    with httpx.Client(transport=fake.transport(), base_url=BASE) as client:
        for token in ("anything", "anything"):
            assert post_siteverify(client, fake, token, fake.private_key).json() == {
                "success": True, "challenge_ts": START + "Z", "hostname": "testkey.google.com"}


# -- reCAPTCHA Enterprise ------------------------------------------------------------------------


@pytest.fixture
def enterprise() -> FakeRecaptchaEnterpriseVerify:
    return FakeRecaptchaEnterpriseVerify(clock=FakeClock())


def assess(fake: FakeRecaptchaEnterpriseVerify, event: Json, *, key: str | None = None,
           path: str | None = None, **kwargs: Any) -> tuple[int, Json]:
    params = {"key": fake.private_key if key is None else key}
    with httpx.Client(transport=fake.transport(), base_url=BASE) as client:
        return answer(client.post(path or fake.path, params=params, json=event, **kwargs))


def test_enterprise_invalid_reasons(enterprise: FakeRecaptchaEnterpriseVerify) -> None:
    site = enterprise.public_key
    other_site = enterprise.issue_token(site_key="6LotherSiteKey")
    broken = enterprise.issue_token(browser_error=True)
    scored = enterprise.issue_token(score=0.3, action="login", hostname="shop.example")

    def reason(token: str) -> str:
        status, body = assess(enterprise, {"event": {"token": token, "siteKey": site}})
        assert status == 200
        return str(body["tokenProperties"]["invalidReason"])

    assert reason(other_site) == "SITE_MISMATCH"
    assert reason(broken) == "BROWSER_ERROR"
    status, body = assess(enterprise, {"event": {"token": scored, "siteKey": site,
                                                 "expectedAction": "login"}})
    assert body["riskAnalysis"] == {"score": 0.3, "reasons": []}
    assert body["tokenProperties"] == {
        "valid": True, "invalidReason": "INVALID_REASON_UNSPECIFIED", "hostname": "shop.example",
        "action": "login", "createTime": START + ".000Z"}
    assert body["event"]["expectedAction"] == "login"
    assert body["name"].startswith("projects/123456789012/assessments/")
    assert reason(scored) == "DUPE"


def test_enterprise_request_errors(enterprise: FakeRecaptchaEnterpriseVerify) -> None:
    event = {"event": {"token": enterprise.GOOD, "siteKey": enterprise.public_key}}
    assert assess(enterprise, event, key="wrong") == API_KEY_INVALID
    assert assess(enterprise, event, key="") == google_error(
        403, "PERMISSION_DENIED", "The request is missing a valid API key.")
    assert assess(enterprise, event, path="/v1/projects/not-mine/assessments") == google_error(
        403, "PERMISSION_DENIED")
    assert assess(enterprise, {"token": enterprise.GOOD}) == google_error(400, "INVALID_ARGUMENT")
    assert assess(enterprise, None, content=b"token=x") == google_error(400, "INVALID_ARGUMENT")
    # None of those used the token up.
    assert assess(enterprise, event)[1]["tokenProperties"]["valid"] is True


def test_enterprise_key_in_header_and_project() -> None:
    fake = FakeRecaptchaEnterpriseVerify(project="shop-prod", private_key="api-key-1")
    assert fake.path == "/v1/projects/shop-prod/assessments"
    with httpx.Client(transport=fake.transport(), base_url=BASE) as client:
        response = client.post(fake.path, headers={"X-Goog-Api-Key": "api-key-1"},
                               json={"event": {"token": fake.GOOD, "siteKey": fake.public_key}})
    assert response.json()["tokenProperties"]["valid"] is True


# -- Friendly Captcha ----------------------------------------------------------------------------


def friendly(fake: FakeFriendlyCaptchaVerify, headers: dict[str, str] | None = None,
             **kwargs: Any) -> tuple[int, Json]:
    sent = {"X-API-Key": fake.private_key} if headers is None else headers
    with httpx.Client(transport=fake.transport(), base_url=BASE) as client:
        return answer(client.post(fake.path, headers=sent, **kwargs))


def test_friendly_captcha_request_errors() -> None:
    fake = FakeFriendlyCaptchaVerify()
    good = {"response": fake.GOOD}
    assert friendly(fake, headers={}, json=good) == friendly_error("auth_required", 401)
    assert friendly(fake, headers={"X-API-Key": "nope"}, json=good) == friendly_error(
        "auth_invalid", 401)
    assert friendly(fake, json=good | {"sitekey": "FCMOTHER"}) == friendly_error(
        "sitekey_invalid", 400)
    assert friendly(fake, json={"sitekey": fake.public_key}) == friendly_error(
        "response_missing", 400)
    assert friendly(fake, content=b"{oops", headers={"X-API-Key": fake.private_key,
                                                     "Content-Type": "application/json"}) == (
        friendly_error("bad_request", 400))
    assert friendly(fake) == friendly_error("bad_request", 400)  # an empty body


def test_friendly_captcha_success_and_form_bodies() -> None:
    fake = FakeFriendlyCaptchaVerify(clock=FakeClock())
    token = fake.issue_token(hostname="shop.example")
    status, body = friendly(fake, data={"response": token, "sitekey": fake.public_key})
    assert (status, body) == (200, {"success": True, "data": {
        "event_id": ANY, "challenge": {"timestamp": START + "Z", "origin": "https://shop.example"},
        "risk_intelligence": None}})
    assert body["data"]["event_id"].startswith("ev_")
    assert friendly(fake, json={"response": token})[1]["error"] == {
        "error_code": "response_duplicate", "detail": "The response has already been used."}
