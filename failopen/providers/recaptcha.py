"""Google reCAPTCHA v2 and v3 (``FAILOPEN_VENDOR=recaptcha``): one siteverify for both.

Its own rules: ``invalid-input-secret`` and ``bad-request`` are misconfigured,
``timeout-or-duplicate`` refuses the token. A v3 answer carries a ``score`` (below
``FAILOPEN_MIN_SCORE``, default 0.5, the token is refused as ``low_score``) and an ``action``
(where the route names the action it expects, a token minted for another one is refused). Tokens
live two minutes. Google publishes no status page a machine can read for reCAPTCHA: outage
evidence is the verify probe (``FAILOPEN_EVIDENCE=probe``).
"""

from __future__ import annotations

from failopen.providers.siteverify import Siteverify

__all__ = ["Recaptcha"]


class Recaptcha(Siteverify):
    """reCAPTCHA's siteverify (v2 checkbox and invisible, v3 scores)."""

    name = "recaptcha"
    title = "reCAPTCHA"
    verify_url = "https://www.google.com/recaptcha/api/siteverify"
    token_field = "g-recaptcha-response"
    script_origin = "https://www.google.com"
    browser_adapter = "recaptcha"
    widgets = ("visible", "invisible", "score")
    token_lifetime = 120.0
    score_field = "score"
    publishes_status = False
    checks_action = True  # v3 answers name the action
    # Google's documented test secret (v2): every verification passes.
    test_secrets = frozenset({"6LeIxAcTAAAAAGG-vFI1TnRWxMZNFuojJ4WifJWe"})
    misconfigured = frozenset({"missing-input-secret", "invalid-input-secret", "bad-request"})
    refusals = frozenset({"missing-input-response", "invalid-input-response",
                          "timeout-or-duplicate"})
    advice_by_code = {
        "missing-input-secret": "set FAILOPEN_PRIVATE_KEY to the site's reCAPTCHA secret key",
        "invalid-input-secret": "FAILOPEN_PRIVATE_KEY is not a valid reCAPTCHA secret key "
                                "(reCAPTCHA admin console, the site's settings)",
        "bad-request": "the request failopen sent was malformed: check FAILOPEN_VERIFY_URL",
    }
