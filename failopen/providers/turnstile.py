"""Cloudflare Turnstile (``FAILOPEN_VENDOR=turnstile``).

Its own rules: ``internal-error`` means Cloudflare failed (unavailable); each verify call carries
an ``idempotency_key`` (one UUID per token), so a call whose answer was lost can be sent again
without burning a good token: the only vendor failopen ever retries. Tokens live 300 seconds
and are at most 2,048 characters. Its status page is Cloudflare's, where only the component
``Turnstile`` counts: the page as a whole, its regions and its hundreds of data-centre (PoP)
components never do.
"""

from __future__ import annotations

from failopen.providers.base import StatusPreset, VerifyCall
from failopen.providers.siteverify import Siteverify

__all__ = ["Turnstile"]

_SECRET = "FAILOPEN_PRIVATE_KEY is not this widget's Turnstile secret key (Cloudflare dashboard, " \
    "Turnstile, the widget's settings)"


class Turnstile(Siteverify):
    """Cloudflare Turnstile's siteverify."""

    name = "turnstile"
    title = "Turnstile"
    verify_url = "https://challenges.cloudflare.com/turnstile/v0/siteverify"
    token_field = "cf-turnstile-response"
    script_origin = "https://challenges.cloudflare.com"
    browser_adapter = "turnstile"
    token_lifetime = 300.0
    max_token_length = 2048
    retries = True
    checks_action = True  # the widget's data-action comes back as "action"
    # Cloudflare's documented test secrets: always pass, always fail, "already spent".
    test_secrets = frozenset({"1x0000000000000000000000000000000AA",
                              "2x0000000000000000000000000000000AA",
                              "3x0000000000000000000000000000000AA"})
    status = StatusPreset(
        url="https://www.cloudflarestatus.com", component="m4jywscr0n0k",
        about="Turnstile, in the group Cloudflare Sites and Services")
    misconfigured = frozenset({"missing-input-secret", "invalid-input-secret", "bad-request"})
    unavailable = frozenset({"internal-error"})
    refusals = frozenset({"missing-input-response", "invalid-input-response",
                          "timeout-or-duplicate"})
    advice_by_code = {
        "missing-input-secret": "set FAILOPEN_PRIVATE_KEY to the widget's Turnstile secret key",
        "invalid-input-secret": _SECRET,
        "bad-request": "the request failopen sent was malformed: check FAILOPEN_VERIFY_URL "
                       "points at Turnstile's siteverify (or a proxy that passes it on whole)",
    }

    def call(self, token: str, *, secret: str, verify_url: str, public_key: str | None,
             remote_ip: str | None, action: str | None, attempt: str) -> VerifyCall:
        call = super().call(token, secret=secret, verify_url=verify_url, public_key=public_key,
                            remote_ip=remote_ip, action=action, attempt=attempt)
        # The same key on a retry: Cloudflare answers it again instead of timeout-or-duplicate.
        return VerifyCall(call.url, data={**(call.data or {}), "idempotency_key": attempt})
