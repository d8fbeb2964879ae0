"""hCaptcha (``FAILOPEN_VENDOR=hcaptcha``).

Its own rules: ``sitekey-secret-mismatch`` and ``invalid-input-secret`` (and the other codes
about what we sent) are misconfigured; ``expired-input-response`` and ``already-seen-response``
refuse the token, and so do ``not-using-dummy-passcode`` (documented: a token from a *testing*
site key, which whoever renders the widget chooses) and the codes hCaptcha answers without
documenting them (``not-using-dummy-secret``, ``invalid-sitekey``,
``invalid-or-already-seen-response``): a code a browser can bring about is never ours to fix.
The site key goes along as ``sitekey`` when ``FAILOPEN_PUBLIC_KEY`` is set, as hCaptcha
recommends (a token from another of the account's sites is then refused). Tokens live about 120
seconds. Its status page is ``www.hcaptchastatus.com``, where the component ``Captcha API``
counts.
"""

from __future__ import annotations

from failopen.providers.base import StatusPreset
from failopen.providers.siteverify import Siteverify

__all__ = ["HCaptcha"]


class HCaptcha(Siteverify):
    """hCaptcha's siteverify."""

    name = "hcaptcha"
    title = "hCaptcha"
    verify_url = "https://api.hcaptcha.com/siteverify"
    token_field = "h-captcha-response"
    script_origin = "https://js.hcaptcha.com"
    browser_adapter = "hcaptcha"
    token_lifetime = 120.0
    public_key_field = "sitekey"
    # hCaptcha's documented test secret: its test token passes.
    test_secrets = frozenset({"0x0000000000000000000000000000000000000000"})
    # No score_field: hCaptcha Enterprise's "score" denotes malicious activity (higher is worse),
    # the opposite of reCAPTCHA's, so FAILOPEN_MIN_SCORE is never applied to it.
    status = StatusPreset(url="https://www.hcaptchastatus.com", component="Captcha API",
                          about="the verify API's component")
    misconfigured = frozenset({
        "missing-input-secret", "invalid-input-secret", "sitekey-secret-mismatch",
        "bad-request", "missing-remoteip", "invalid-remoteip",
    })
    refusals = frozenset({
        "missing-input-response", "invalid-input-response", "expired-input-response",
        "already-seen-response", "not-using-dummy-passcode", "not-using-dummy-secret",
        "invalid-sitekey", "invalid-or-already-seen-response",
    })
    advice_by_code = {
        "missing-input-secret": "set FAILOPEN_PRIVATE_KEY to the account's hCaptcha secret",
        "invalid-input-secret": "FAILOPEN_PRIVATE_KEY is not a valid hCaptcha secret (hCaptcha "
                                "dashboard, Settings)",
        "sitekey-secret-mismatch": "FAILOPEN_PUBLIC_KEY is a site key of another account than "
                                   "FAILOPEN_PRIVATE_KEY's secret",
        "bad-request": "the request failopen sent was malformed: check FAILOPEN_VERIFY_URL",
        "missing-remoteip": "this hCaptcha account requires the client address; check "
                            "FAILOPEN_TRUSTED_PROXIES so failopen can tell it",
        "invalid-remoteip": "the client address sent was not one hCaptcha accepts; check "
                            "FAILOPEN_TRUSTED_PROXIES",
    }
