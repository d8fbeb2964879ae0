"""``failopen check`` per vendor: the right secret passes, a wrong one fails naming the vendor's
code and what to change (never the secret), and a vendor with no status page says how to see an
outage. The vendors are the test kit's fakes, in process."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

from failopen import Config
from failopen.cli.check import run_checks, summary
from failopen.cli.preflight import Check, Wiring
from failopen.testing import fake_verify_api
from failopen.testing.providers import CaptchaVerifyFake

VENDORS = ["turnstile", "hcaptcha", "recaptcha", "recaptcha-enterprise", "friendly-captcha"]
WRONG = "sk-wrong-but-plausible-9f8e7d6c5b4a"


def checks(fake: CaptchaVerifyFake, **settings: Any) -> dict[str, Check]:
    given: dict[str, Any] = {
        "VENDOR": fake.vendor, "VERIFY_URL": "https://verify.test" + fake.path,
        "PRIVATE_KEY": fake.private_key, "PUBLIC_KEY": fake.public_key,
        "PROTECTED_PATHS": ["/login/"], "EVIDENCE": "probe", **settings}
    factory = functools.partial(Config.from_mapping, given, environ={})
    wiring = Wiring(verify_transport=fake.transport())
    return {c.name: c for c in run_checks(factory, wiring=wiring, environ={})}


def fake(vendor: str) -> CaptchaVerifyFake:
    return fake_verify_api(vendor)


@pytest.mark.parametrize("vendor", VENDORS)
def test_the_right_secret_passes(vendor: str) -> None:
    api = fake(vendor)
    found = checks(api)["verify_api"]
    assert (found.status, found.facts["answer"]) == ("ok", "key_accepted"), found.detail
    assert found.facts["vendor"] == vendor
    assert api.tokens_seen and api.tokens_seen[0].startswith("failopen-check-")


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_wrong_secret_fails_with_the_vendor_s_code_and_never_the_secret(vendor: str) -> None:
    api = fake(vendor)
    found = checks(api, PRIVATE_KEY=WRONG)
    verify = found["verify_api"]
    assert (verify.status, verify.facts["answer"]) == ("problem", "key_rejected"), verify.detail
    assert verify.facts["codes"], verify.detail
    assert verify.facts["codes"][0] in verify.detail
    assert "FAILOPEN_PRIVATE_KEY" in verify.detail or "API key" in verify.detail
    shown = json.dumps(summary(list(found.values()), strict=False))
    assert WRONG not in shown and WRONG[:12] not in shown


def test_hcaptcha_a_site_key_of_another_account() -> None:
    api = fake("hcaptcha")
    verify = checks(api, PUBLIC_KEY="20000000-ffff-ffff-ffff-000000000002")["verify_api"]
    assert verify.status == "problem"
    assert verify.facts["codes"] == ["sitekey-secret-mismatch"]
    assert "FAILOPEN_PUBLIC_KEY" in verify.detail


@pytest.mark.parametrize("vendor", ["recaptcha", "recaptcha-enterprise", "friendly-captcha"])
def test_a_vendor_without_a_status_page_says_how_to_see_an_outage(vendor: str) -> None:
    api = fake(vendor)
    with_probe = checks(api)["status_page"]
    assert with_probe.status == "ok" and "the verify probe is the evidence" in with_probe.detail
    without = checks(api, EVIDENCE="status")["status_page"]
    assert without.status == "problem"
    assert "publishes no status page" in without.detail
    assert "FAILOPEN_EVIDENCE=probe" in without.detail


def test_the_enterprise_line_says_the_site_key_is_not_confirmed() -> None:
    verify = checks(fake("recaptcha-enterprise"))["verify_api"]
    assert verify.status == "ok"
    assert "site key is not confirmed" in verify.detail
