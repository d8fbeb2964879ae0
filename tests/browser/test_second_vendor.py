"""A second vendor as the fallback challenge, in headless Chromium under a real server: Turnstile
is the vendor (its status page's Turnstile component decides), hCaptcha the second vendor
(``FAILOPEN_FALLBACK_VENDOR=hcaptcha``), and ``/signup`` follows ``fallback``.

While Turnstile is out, the sign-up page loads hCaptcha (never Turnstile) and goes through with
one hCaptcha token; by raw HTTP nothing, a Turnstile token or junk is refused, a fresh hCaptcha
token is admitted once. With Turnstile healthy an hCaptcha token is refused, and the page loads
Turnstile. The page's CSP names both vendors' origins (script and frame): both work under it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from _browser_kit import Visit, wait_until

from failopen.testing import (
    FakeCloudflareStatusPage,
    fake_browser_script,
    fake_verify_api,
)
from failopen.testing.browser_scripts import BrowserScriptFake
from failopen.testing.providers import CaptchaVerifyFake

pytestmark = pytest.mark.slow

SUBMIT = "form > button"
CHECKBOX = "[data-fake-captcha]"


@dataclass
class TwoVendorSite:
    url: str
    first: CaptchaVerifyFake
    first_script: BrowserScriptFake
    second: CaptchaVerifyFake
    second_script: BrowserScriptFake
    page: FakeCloudflareStatusPage

    def flag(self, path: str = "/signup", *, confirm: bool = False) -> dict[str, Any]:
        answer = httpx.get(self.url + "/failopen/flag", params={
            "path": path, **({"confirm": "1"} if confirm else {})}, timeout=10)
        return dict(answer.json())

    def sign_up(self, **fields: str) -> httpx.Response:
        return httpx.post(self.url + "/signup", data={"email": "ann@example.com", **fields},
                          headers={"Accept": "application/json"}, timeout=10)


def code(response: httpx.Response) -> str:
    body = response.json()
    return str(body["decision"]["outcome"] if response.status_code == 200
               else body["error"]["code"])


@pytest.fixture(scope="module")
def site(server_process: Callable[[list[str], dict[str, str], str], str]
         ) -> Iterator[TwoVendorSite]:
    first, second = fake_verify_api("turnstile"), fake_verify_api("hcaptcha")
    first_script = fake_browser_script("turnstile", verify_api=first)
    second_script = fake_browser_script("hcaptcha", verify_api=second)
    page = FakeCloudflareStatusPage()
    fakes = (first, second, first_script, second_script, page)
    for fake in fakes:
        fake.serve()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAILOPEN_", "DJANGO_"))}
    env.update({
        "FAILOPEN_VENDOR": "turnstile", "FAILOPEN_VERIFY_URL": first.verify_url,
        "FAILOPEN_PRIVATE_KEY": first.private_key, "FAILOPEN_PUBLIC_KEY": first.public_key,
        "FAILOPEN_VENDOR_URL": first_script.url, "FAILOPEN_STATUS_URL": page.url,
        "FAILOPEN_FALLBACK_VENDOR": "hcaptcha", "FAILOPEN_FALLBACK_VERIFY_URL": second.verify_url,
        "FAILOPEN_FALLBACK_PRIVATE_KEY": second.private_key,
        "FAILOPEN_FALLBACK_PUBLIC_KEY": second.public_key,
        "FAILOPEN_FALLBACK_VENDOR_URL": second_script.url,
        "FAILOPEN_PROTECTED_PATHS": "/login,/signup,/password-reset",
        "FAILOPEN_OUTAGE_POLICY_ROUTES": "/signup=fallback",
        "FAILOPEN_POLL_INTERVAL": "0.2", "FAILOPEN_POLL_JITTER": "0",
        "FAILOPEN_CONFIRM_TTL": "0.05", "FAILOPEN_CLOSE_AFTER": "1",
        "FAILOPEN_OUTAGE_RATE": "none",
        "SNIPPET_READY_TIMEOUT_MS": "3000", "SNIPPET_RETRIES": "1",
        "SNIPPET_RETRY_DELAY_MS": "100",
    })
    url = server_process(
        [sys.executable, "-m", "uvicorn", "--app-dir", "examples", "asgi_app:app", "--host",
         "127.0.0.1", "--port", "{port}", "--log-level", "warning"], env, "/health")
    try:
        yield TwoVendorSite(url, first, first_script, second, second_script, page)
    finally:
        for fake in fakes:
            if fake.server is not None:
                fake.server.stop()


@pytest.fixture
def healthy(site: TwoVendorSite) -> Iterator[TwoVendorSite]:
    for fake in (site.first_script, site.second_script, site.first, site.second):
        fake.reset()
    site.page.set_global("operational")
    wait_until(lambda: site.flag(confirm=True)["enforce"], 20, "enforcement on")
    yield site
    site.page.set_global("operational")
    wait_until(lambda: site.flag(confirm=True)["enforce"], 20, "enforcement back")


def turnstile_out(site: TwoVendorSite) -> None:
    site.page.set_global("major_outage")  # the Turnstile component: the captcha's own outage
    wait_until(lambda: not site.flag(confirm=True)["enforce"], 20, "the outage to be seen")


def test_during_the_outage_the_sign_up_loads_the_second_vendor_and_goes_through(
        healthy: TwoVendorSite, visit: Callable[..., Visit]) -> None:
    site = healthy
    turnstile_out(site)
    flag = site.flag()
    assert flag["fallback"] == {"vendor": "hcaptcha", "public_key": site.second.public_key,
                                "vendor_url": site.second_script.url,
                                "token_field": "h-captcha-response"}
    assert "private" not in str(flag).lower() and site.second.private_key not in str(flag)
    record = visit(site.url, "/signup", go=False)
    record.page.goto(site.url + "/signup")
    record.wait_for_state("ready")
    record.page.click(SUBMIT)  # held until the person ticks hCaptcha's box
    record.page.click(CHECKBOX)
    status, body = record.wait_for_answer()
    assert (status, body["decision"]["outcome"]) == (200, "bypassed_fallback"), body
    posted = record.posts[-1]
    tokens = [c.token for c in site.second_script.challenges if c.outcome == "token"]
    assert len(posted["h-captcha-response"]) == 1 and posted["h-captcha-response"][0] in tokens
    assert "cf-turnstile-response" not in posted
    assert site.first_script.script_requests == 0  # Turnstile: never loaded on this page
    assert site.second_script.script_requests == 1
    assert [r.sitekey for r in site.second_script.renders] == [site.second.public_key]
    # The log-in (open) needs no widget at all.
    login = visit(site.url, go=False)
    login.page.goto(site.url + "/")
    login.wait_for_state("bypassed")
    assert site.second_script.script_requests == 1


def test_by_raw_http_only_a_fresh_second_vendor_token_passes_and_only_once(
        healthy: TwoVendorSite) -> None:
    site = healthy
    turnstile_out(site)
    assert (site.sign_up().status_code, code(site.sign_up())) == (403, "fallback_required")
    turnstile = site.first.issue_token()
    assert site.sign_up(**{"cf-turnstile-response": turnstile}).status_code == 403
    assert site.sign_up(**{"h-captcha-response": "junk-" + "x" * 40}).status_code == 403
    fresh = site.second.issue_token()
    answer = site.sign_up(**{"h-captcha-response": fresh})
    assert (answer.status_code, code(answer)) == (200, "bypassed_fallback")
    replay = site.sign_up(**{"h-captcha-response": fresh})
    assert replay.status_code == 403


def test_with_turnstile_healthy_a_second_vendor_token_is_refused_and_turnstile_loads(
        healthy: TwoVendorSite, visit: Callable[..., Visit]) -> None:
    site = healthy
    assert site.flag()["fallback"] is None
    answer = site.sign_up(**{"h-captcha-response": site.second.issue_token()})
    assert (answer.status_code, code(answer)) == (403, "missing_token")
    record = visit(site.url, "/signup", go=False)
    record.page.goto(site.url + "/signup")
    record.wait_for_state("completed")  # Turnstile's managed widget completes by itself
    assert site.second_script.script_requests == 0 and site.first_script.script_requests == 1
    record.page.click(SUBMIT)
    status, body = record.wait_for_answer()
    assert (status, body["decision"]["outcome"]) == (200, "valid")
