"""Each vendor under a real server: ``uvicorn`` serving examples/asgi_app.py with
``FAILOPEN_VENDOR`` set, the token in the vendor's own form field, the vendor's fake verify API and
(Turnstile, hCaptcha) the fake of its real status page on loopback.

For each of the five vendors: a valid token is admitted once (a replay, a junk and a missing token
are 403); the vendor down with an operational page is 503 and never turns enforcement off; a
wrong secret is 503 and never evidence, however many requests; a 429 is never evidence;
reCAPTCHA scores below 0.5 are refused; the captcha's component in an outage bypasses and
recovery restores enforcement (Turnstile: a data centre, a regional group and the page's overall
indicator in an outage change nothing); without a status page (reCAPTCHA, Enterprise, Friendly
Captcha: ``FAILOPEN_EVIDENCE=probe``) junk never opens, the vendor down for everyone opens within
the probe's streak and recovery closes; ``failopen check`` passes with the right secret, fails
with a wrong one and names the component.

"Never evidence" is seen on the status page: the watcher polls it once an hour here, so the only
other reads are confirmations, which a request makes only when its verify call was unavailable.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from failopen.testing import (
    FakeCloudflareStatusPage,
    FakeHCaptchaStatusPage,
    FakeStatusPage,
    fake_verify_api,
    free_port,
)
from failopen.testing.providers import CaptchaVerifyFake

ROOT = Path(__file__).resolve().parents[2]
FAILOPEN = Path(sys.executable).with_name("failopen")
VENDORS = ["turnstile", "hcaptcha", "recaptcha", "recaptcha-enterprise", "friendly-captcha"]
PAGES: dict[str, Callable[[], FakeStatusPage]] = {
    "turnstile": FakeCloudflareStatusPage, "hcaptcha": FakeHCaptchaStatusPage}
SCORED = {"recaptcha", "recaptcha-enterprise"}

pytestmark = pytest.mark.slow


@dataclass
class Site:
    vendor: str
    url: str
    api: CaptchaVerifyFake
    page: FakeStatusPage | None
    env: dict[str, str]
    log: Path

    @property
    def field(self) -> str:
        return self.api.token_field

    def token(self, **claims: Any) -> str:
        if self.vendor in SCORED:
            claims = {"score": 0.9, "action": "login", **claims}
        return self.api.issue_token(**claims)

    def login(self, token: str | None) -> httpx.Response:
        data = {"username": "ann"} if token is None else {"username": "ann", self.field: token}
        return httpx.post(self.url + "/login", data=data, timeout=10,
                          headers={"Accept": "application/json"})

    def flag(self, *, confirm: bool = False) -> dict[str, Any]:
        answer = httpx.get(self.url + "/failopen/flag" + ("?confirm=1" if confirm else ""),
                           timeout=10)
        return dict(answer.json())

    def page_reads(self) -> int:
        return 0 if self.page is None else self.page.requests


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def code(response: httpx.Response) -> str:
    body = response.json()
    return str(body["decision"]["outcome"] if response.status_code == 200
               else body["error"]["code"])


@pytest.fixture(scope="module", params=VENDORS)
def site(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    vendor: str = request.param
    api = fake_verify_api(vendor)
    page = PAGES[vendor]() if vendor in PAGES else None
    log = tmp_path_factory.mktemp(f"uvicorn-{vendor}") / "server.log"
    api.serve()
    if page is not None:
        page.serve()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    env.update({
        "FAILOPEN_VENDOR": vendor, "FAILOPEN_VERIFY_URL": api.verify_url,
        "FAILOPEN_PRIVATE_KEY": api.private_key, "FAILOPEN_PUBLIC_KEY": api.public_key,
        # Polled once an hour: any other read of the page is a request's confirmation.
        "FAILOPEN_POLL_INTERVAL": "1h", "FAILOPEN_POLL_JITTER": "0",
        "FAILOPEN_CONFIRM_TTL": "0.1", "FAILOPEN_CLOSE_AFTER": "1",
        "FAILOPEN_VERIFY_TIMEOUT": "0.5", "FAILOPEN_STORE_REFRESH": "0.2",
        # Many requests from one client: the outage rate limit has tests of its own.
        "FAILOPEN_OUTAGE_RATE": "none",
        "FAILOPEN_PROTECTED_PATHS": "/login,/signup,/password-reset",  # the example's forms
        "FAILOPEN_EXPECTED_ACTIONS": "/login=login" if vendor in SCORED else "",
    })
    if page is None:
        env.update({"FAILOPEN_EVIDENCE": "probe", "FAILOPEN_PROBE_INTERVAL": "0.2",
                    "FAILOPEN_OUTAGE_POLICY": "open"})
    else:
        env["FAILOPEN_STATUS_URL"] = page.url  # the vendor's page, on loopback; its component
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", "examples", "asgi_app:app",
             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    built = Site(vendor, url, api, page, env, log)
    try:
        def ready() -> bool:
            assert process.poll() is None, log.read_text()
            try:
                return httpx.get(url + "/health", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, 30, "uvicorn to answer")
        built.login(None)  # starts the watcher: its first reading comes in
        if page is not None:
            wait_until(lambda: built.flag()["global_status"] == "operational", 10,
                       "the first status reading")
        yield built
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if api.server is not None:
            api.server.stop()
        if page is not None and page.server is not None:
            page.server.stop()


@pytest.fixture(autouse=True)
def healthy(site: Site) -> Iterator[None]:
    """Each test starts and ends with the vendor and its page healthy, enforcement on."""
    yield
    site.api.set_fault(None)
    site.api.private_key = site.env["FAILOPEN_PRIVATE_KEY"]
    if site.page is not None:
        site.page.set_fault(None)
        site.page.set_global("operational")
        site.flag(confirm=True)
    wait_until(lambda: site.flag()["enforce"], 15, "enforcement back after the test")


def test_a_valid_token_is_admitted_once_in_the_vendor_s_field(site: Site) -> None:
    token = site.token()
    first = site.login(token)
    assert (first.status_code, code(first)) == (200, "valid"), site.log.read_text()
    replay = site.login(token)
    assert (replay.status_code, code(replay)) == (403, "invalid_token")
    for junk in ("junk-" + token[5:], "x" * 40):
        answer = site.login(junk)
        assert (answer.status_code, code(answer)) == (403, "invalid_token")
    missing = site.login(None)
    assert (missing.status_code, code(missing)) == (403, "missing_token")
    assert site.flag()["vendor"] == site.vendor


@pytest.mark.parametrize("site", sorted(SCORED), indirect=True)
def test_scores_below_the_minimum_and_other_actions_are_refused(site: Site) -> None:
    low = site.login(site.token(score=0.3))
    assert (low.status_code, code(low)) == (403, "invalid_token")  # low_score, told as invalid
    other = site.login(site.token(action="signup"))
    assert (other.status_code, code(other)) == (403, "invalid_token")
    assert site.login(site.token(score=0.5)).status_code == 200


def _down_faults(vendor: str) -> list[str]:
    return ["503", "timeout", "not_json", *(["internal_error"] if vendor == "turnstile" else [])]


def test_the_vendor_down_with_an_operational_page_is_503_and_never_a_bypass(site: Site) -> None:
    for fault in _down_faults(site.vendor):
        site.api.set_fault(fault)
        answer = site.login(site.token())
        assert (answer.status_code, code(answer)) == (503, "cannot_verify"), fault
        assert answer.headers["retry-after"]
        if site.page is not None:
            assert site.flag()["enforce"] is True, fault
        site.api.set_fault(None)


def test_a_wrong_secret_is_503_and_never_evidence(site: Site) -> None:
    site.api.private_key = "the-vendor-rotated-the-key-0123456789"
    reads = site.page_reads()
    if site.page is not None:
        site.page.set_global("major_outage")  # were it evidence, the confirmation would bypass
    for _ in range(30):
        answer = site.login(site.token())
        assert (answer.status_code, code(answer)) == (503, "cannot_verify")
    assert site.page_reads() == reads  # not one confirmation
    time.sleep(1.5)  # probe vendors: several probes meet the wrong key too
    assert site.flag()["enforce"] is True


def test_a_429_is_never_evidence(site: Site) -> None:
    site.api.set_fault("429")
    reads = site.page_reads()
    if site.page is not None:
        site.page.set_global("major_outage")
    for _ in range(20):
        answer = site.login(site.token())
        assert (answer.status_code, code(answer)) == (503, "rate_limited")
    assert site.page_reads() == reads
    assert site.flag()["enforce"] is True


@pytest.mark.parametrize("site", sorted(PAGES), indirect=True)
def test_the_captcha_component_in_an_outage_bypasses_and_recovery_restores(site: Site) -> None:
    page = site.page
    assert page is not None
    site.api.set_fault("503")
    if isinstance(page, FakeCloudflareStatusPage):
        # Everything on Cloudflare's page but Turnstile: no bypass.
        page.set_pop("AMS", "major_outage")
        page.set_region_group("Europe", "major_outage")
        page.set_component("Cloudflare APIs", "major_outage")
        page.set_indicator("major")
        answer = site.login(site.token())
        assert (answer.status_code, code(answer)) == (503, "cannot_verify")
        assert site.flag(confirm=True)["enforce"] is True
    page.set_global("major_outage")
    time.sleep(0.2)  # past FAILOPEN_CONFIRM_TTL: the last confirmation's reading is not reused
    answer = site.login(site.token())
    assert (answer.status_code, code(answer)) == (200, "bypassed_confirmed_outage")
    flag = site.flag()
    assert flag["enforce"] is False and flag["component"]["id"] == page.global_id
    page.set_global("operational")
    site.api.set_fault(None)
    time.sleep(0.2)
    assert site.flag(confirm=True)["enforce"] is True
    assert code(site.login(site.token())) == "valid"


@pytest.mark.parametrize("site", [v for v in VENDORS if v not in PAGES], indirect=True)
def test_without_a_page_junk_never_opens_and_the_vendor_down_opens_and_recovers(
        site: Site) -> None:
    until = time.monotonic() + 3
    while time.monotonic() < until:  # junk for longer than the probe's streak
        assert site.login("junk-token-" + "x" * 30).status_code == 403
    assert site.flag()["enforce"] is True
    site.api.set_fault("503")  # the vendor down for everyone: probes and requests alike
    deadline = time.monotonic() + 15
    while site.flag()["enforce"]:
        assert time.monotonic() < deadline, "the probe never opened"
        site.login(site.token())
        time.sleep(0.1)
    assert site.flag()["source"] == "probe"
    assert code(site.login(site.token())) == "bypassed_flag_off"
    site.api.set_fault(None)
    wait_until(lambda: site.flag()["enforce"], 15, "the probe to see the vendor back")
    assert code(site.login(site.token())) == "valid"


def _check(site: Site, **changes: str) -> subprocess.CompletedProcess[str]:
    env = {**site.env, **changes}
    return subprocess.run([str(FAILOPEN), "check"], capture_output=True, text=True,
                          timeout=60, env=env, cwd=ROOT)


def test_failopen_check_passes_with_the_right_secret_and_fails_with_a_wrong_one(
        site: Site) -> None:
    good = _check(site)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "verify API" in good.stdout and "key accepted" in good.stdout
    if site.page is not None:
        assert f"watches {site.page.global_id}" in good.stdout
    wrong_key = "sk-not-the-site-secret-42424242"
    bad = _check(site, FAILOPEN_PRIVATE_KEY=wrong_key)
    assert bad.returncode == 1, bad.stdout
    assert "key rejected" in bad.stdout
    assert wrong_key not in bad.stdout + bad.stderr
