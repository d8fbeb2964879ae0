"""A second vendor as the fallback challenge in Django (issue 29), sync and async test clients:
Turnstile as FAILOPEN_VENDOR, hCaptcha as FALLBACK_VENDOR in the ``FAILOPEN`` dict, the named
``signup`` view a ``fallback`` route; both vendors' fakes served on loopback, the outage an
operator's override."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import override_settings
from django.urls import include, path
from failopen.integrations.django import protect

from failopen.runtime import FailOpen
from failopen.testing.providers import FakeHCaptchaVerify, FakeTurnstileVerify

JSON = {"headers": {"accept": "application/json"}}
FIELD = "h-captcha-response"


@pytest.fixture(autouse=True)
def _urls() -> Any:
    with override_settings(ROOT_URLCONF="django_test_urls_outage"):
        yield


@pytest.fixture
def vendors() -> Iterator[tuple[FakeTurnstileVerify, FakeHCaptchaVerify]]:
    turnstile, hcaptcha = FakeTurnstileVerify(), FakeHCaptchaVerify()
    with turnstile.serve(), hcaptcha.serve():
        yield turnstile, hcaptcha


@pytest.fixture
def site(use_failopen: Callable[..., FailOpen | None],
         vendors: tuple[FakeTurnstileVerify, FakeHCaptchaVerify]) -> FailOpen:
    turnstile, hcaptcha = vendors
    runtime = use_failopen(
        VENDOR="turnstile", VERIFY_URL=turnstile.verify_url, PRIVATE_KEY=turnstile.private_key,
        PROTECTED_PATHS=["/login/"], PROTECTED_VIEWS=["signup"],
        OUTAGE_POLICY_ROUTES={"signup": "fallback", "/login/": "open"},
        FALLBACK_VENDOR="hcaptcha", FALLBACK_PRIVATE_KEY=hcaptcha.private_key,
        FALLBACK_PUBLIC_KEY=hcaptcha.public_key, FALLBACK_VERIFY_URL=hcaptcha.verify_url)
    assert runtime is not None
    return runtime


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


def outcome(response: Any) -> str:
    body = response.json()
    return str(body["failopen"]["outcome"] if "failopen" in body else body["error"]["code"])


def test_the_fallback_view_takes_a_fresh_hcaptcha_token_once_during_the_outage(
        site: FailOpen, client: Any,
        vendors: tuple[FakeTurnstileVerify, FakeHCaptchaVerify]) -> None:
    turnstile, hcaptcha = vendors
    enforcing = client.post("/signup/", {FIELD: hcaptcha.issue_token()}, **JSON)
    assert (enforcing.status_code, outcome(enforcing)) == (403, "missing_token")
    site.flag.force_off("Turnstile outage, confirmed by the vendor")
    for data, expected in (({}, (403, "fallback_required")),
                           ({"cf-turnstile-response": turnstile.issue_token()},
                            (403, "fallback_required")),
                           ({FIELD: "junk"}, (403, "fallback_invalid"))):
        refused = client.post("/signup/", data, **JSON)
        assert (refused.status_code, outcome(refused)) == expected, data
    token = hcaptcha.issue_token()
    admitted = client.post("/signup/", {FIELD: token}, **JSON)
    assert (admitted.status_code, outcome(admitted)) == (200, "bypassed_fallback")
    replayed = client.post("/accounts/signup/", {FIELD: token}, **JSON)
    assert (replayed.status_code, outcome(replayed)) == (403, "fallback_invalid")
    opened = client.post("/login/", {FIELD: hcaptcha.issue_token()}, **JSON)
    assert outcome(opened) == "bypassed_flag_off"


def test_hcaptcha_unavailable_is_503(site: FailOpen, client: Any,
                                     vendors: tuple[FakeTurnstileVerify, FakeHCaptchaVerify]
                                     ) -> None:
    hcaptcha = vendors[1]
    site.flag.force_off("Turnstile outage")
    hcaptcha.set_fault("503")
    refused = client.post("/signup/", {FIELD: hcaptcha.issue_token()}, **JSON)
    assert (refused.status_code, outcome(refused)) == (503, "fallback_unavailable")
    assert refused["Retry-After"]


def test_the_flag_endpoint_names_hcaptcha_for_the_fallback_view(
        site: FailOpen, client: Any,
        vendors: tuple[FakeTurnstileVerify, FakeHCaptchaVerify]) -> None:
    assert client.get("/failopen/flag", {"path": "/signup/"}).json()["fallback"] is None
    site.flag.force_off("Turnstile outage")
    fallback = client.get("/failopen/flag", {"path": "/signup/"}).json()["fallback"]
    assert fallback == {"vendor": "hcaptcha", "public_key": vendors[1].public_key,
                        "vendor_url": "https://js.hcaptcha.com", "token_field": FIELD}
    assert client.get("/failopen/flag", {"path": "/login/"}).json()["fallback"] is None
    assert client.get("/failopen/challenge").status_code == 404


def test_an_answer_in_the_header_is_verified_with_an_awaited_call_under_asgi(
        site: FailOpen, client: Any, client_kind: str,
        vendors: tuple[FakeTurnstileVerify, FakeHCaptchaVerify]) -> None:
    # Review of issue 29: the async middleware asked runtime.bypass (sync) with the header's
    # answer, which made the second vendor's verify call a blocking one on the event loop.
    hcaptcha = vendors[1]
    assert site.second_vendor is not None
    verifier = site.second_vendor.verifier
    blocking: list[str] = []
    real_verify = verifier.verify

    def recording(token: str, **kwargs: Any) -> Any:
        blocking.append(token)
        return real_verify(token, **kwargs)

    setattr(verifier, "verify", recording)  # noqa: B010  # the instance's, not the class's
    site.flag.force_off("Turnstile outage")
    token = hcaptcha.issue_token()
    headers = {"accept": "application/json", "X-Altcha": token}
    admitted = client.post("/signup/", headers=headers)
    assert (admitted.status_code, outcome(admitted)) == (200, "bypassed_fallback")
    replayed = client.post("/signup/", headers=headers)
    assert (replayed.status_code, outcome(replayed)) == (403, "fallback_invalid")
    if client_kind == "async":
        assert blocking == []


# --- @protect(outage="fallback") answered by the second vendor ---------------------------------

@protect(outage="fallback")
def _marked_signup(request: HttpRequest) -> HttpResponse:
    return HttpResponse("signed up")


urlpatterns = [
    path("marked-signup/", _marked_signup),
    path("failopen/", include("failopen.integrations.django.urls")),
]


def test_a_view_marked_fallback_with_a_second_vendor_is_no_system_check_error(
        fo_settings: dict[str, Any]) -> None:
    # Review of issue 29: E006 asked for FALLBACK_SECRET, which Config refuses beside
    # FALLBACK_VENDOR; a site could neither start with the second vendor nor follow the hint,
    # and the way out left is to mark the view open.
    from failopen.integrations.django.checks import check_settings

    hcaptcha = FakeHCaptchaVerify()
    second = {**fo_settings, "FALLBACK_VENDOR": "hcaptcha",
              "FALLBACK_PRIVATE_KEY": hcaptcha.private_key,
              "FALLBACK_PUBLIC_KEY": hcaptcha.public_key}
    with override_settings(ROOT_URLCONF=__name__, FAILOPEN=second):
        assert "failopen.E006" not in {m.id for m in check_settings()}
    with override_settings(ROOT_URLCONF=__name__, FAILOPEN=fo_settings):
        assert "failopen.E006" in {m.id for m in check_settings()}
