"""A second captcha vendor as the fallback challenge (issue 29): its settings and its verify call.

``FAILOPEN_FALLBACK_VENDOR`` names a vendor of the registry (:mod:`failopen.providers.registry`);
unset, the fallback challenge is the self-hosted ALTCHA proof of work, as before. Its keys are
``FAILOPEN_FALLBACK_PRIVATE_KEY`` (a secret, kept as :class:`~failopen.secret.Secret` and shown
as ``***`` everywhere) and ``FAILOPEN_FALLBACK_PUBLIC_KEY``; ``FAILOPEN_FALLBACK_VERIFY_URL`` and
``FAILOPEN_FALLBACK_VENDOR_URL`` take the vendor's presets when unset, as the first vendor's do.

The server pins the challenge: a ``fallback`` route takes the second vendor's token (its own form
field, or the ``X-Altcha`` header) only while enforcement is off for the first vendor's outage,
verified with the second vendor's secret (:class:`SecondVendor`, through
:class:`~failopen.engine.outage.OutageGate`). While enforcing, only the first vendor's token
counts; the browser never chooses.

Refused at start-up, each with what to change:

* a name the registry does not know (the message lists them);
* the first vendor again: one outage would take both;
* ``enforcement`` (the spec's vendor): its token travels in ``FAILOPEN_TOKEN_HEADER``, the header
  the server reads as the *first* vendor's token, so a request could not say which challenge it
  answers; and it has no public verify endpoint or script origin to preset. It is the default
  first vendor, not a second one;
* a second vendor whose token field is the first vendor's (reCAPTCHA and reCAPTCHA Enterprise
  share ``g-recaptcha-response``): the server must tell the two answers apart by where they are;
* no private key; no public key (the flag endpoint hands the site key to the snippet, which
  cannot render any vendor's widget without one);
* fallback settings without ``FAILOPEN_FALLBACK_VENDOR`` (a typo, or a half-removed setting).

Design decision, the second vendor failing too (issue 29, item 8): its verify *unavailable*,
rate-limited, misconfigured or our own queue full is 503 ``fallback_unavailable`` with
``Retry-After``: never an admission and never outage evidence about anything. ALTCHA and a second
vendor are **not** mixed: ``FAILOPEN_FALLBACK_SECRET`` together with ``FAILOPEN_FALLBACK_VENDOR``
stops start-up. A third tier (ALTCHA once the second vendor fails) would need evidence that the
second vendor is out, and the only signal a request path has is its own verify failing: the kind
of signal the design never trusts alone for the first vendor (it confirms with the status page).
Without that evidence an attacker who could make the second vendor's verify fail, or merely
claim it did, would choose the weaker proof of work; and the browser would have to be told which
of two challenges to solve, a choice the server then has to re-check anyway. A route that must
stay up through both vendors' outages is an ``open`` route (rate-limited, audited), which is an
honest setting instead of a hidden third one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from failopen._internal.defaults import DefaultText
from failopen.exceptions import ConfigError
from failopen.providers.base import Provider
from failopen.providers.registry import provider_named
from failopen.providers.urls import check_url
from failopen.providers.verify import (
    Verifier,
    VerifyResult,
    averify_in_context,
    verify_in_context,
)
from failopen.providers.verify_answers import _PRINTABLE_ASCII
from failopen.secret import Secret

__all__ = ["ALTCHA", "SecondVendor", "check_fallback_vendor", "fallback_token_field"]

#: The self-hosted challenge's name where a challenge is named (audit, metrics, flag endpoint).
ALTCHA = "altcha"
#: Where an ALTCHA solution travels in a form or JSON body.
ALTCHA_FIELD = "altcha"
_VENDOR = "FAILOPEN_FALLBACK_VENDOR"
_KEY = "FAILOPEN_FALLBACK_PRIVATE_KEY"
_SITE_KEY = "FAILOPEN_FALLBACK_PUBLIC_KEY"
_VERIFY_URL = "FAILOPEN_FALLBACK_VERIFY_URL"
_VENDOR_URL = "FAILOPEN_FALLBACK_VENDOR_URL"
# A provider's own checks name the first vendor's settings: said of the second, the same words
# must name the second's.
_FIRST_NAMES = re.compile(r"\bFAILOPEN_(VERIFY_URL|PRIVATE_KEY|PUBLIC_KEY|VENDOR)\b")
_GENERATE = "the site's settings page at the vendor shows both keys"


def fallback_token_field(vendor: str | None) -> str:
    """The body field a ``fallback`` route's answer is read from: the second vendor's own
    widget field, else ALTCHA's."""
    return provider_named(vendor, _VENDOR).token_field if vendor else ALTCHA_FIELD


def _as_second(exc: ConfigError) -> ConfigError:
    return ConfigError(_FIRST_NAMES.sub(r"FAILOPEN_FALLBACK_\1", str(exc)))


def _given(value: Any) -> bool:
    return value is not None and not isinstance(value, DefaultText)


def check_fallback_vendor(*, vendor: Any, first: Provider, first_token_field: str,
                          private_key: Secret | None, public_key: Any, verify_url: Any,
                          vendor_url: Any, fallback_secret: Secret | None) -> dict[str, Any]:
    """The second vendor's settings checked together; the Config fields to set (the presets,
    kept as DefaultText so a copy with another second vendor takes that one's)."""
    found: dict[str, Any] = {}
    # Another second vendor's presets (Config.replace): not given, so preset again below.
    if isinstance(verify_url, DefaultText):
        found["fallback_verify_url"] = verify_url = None
    if isinstance(vendor_url, DefaultText):
        found["fallback_vendor_url"] = vendor_url = None
    if vendor is None:
        stray = [name for name, value in ((_KEY, private_key), (_SITE_KEY, public_key),
                                          (_VERIFY_URL, verify_url), (_VENDOR_URL, vendor_url))
                 if value is not None]
        if stray:
            raise ConfigError(f"{', '.join(stray)}: set without {_VENDOR}; name the second "
                              "vendor (such as hcaptcha) or remove the setting")
        return found
    provider = provider_named(vendor, _VENDOR)
    if provider.name == first.name:
        raise ConfigError(f"{_VENDOR}: {provider.name} is FAILOPEN_VENDOR too; name another "
                          "vendor (one outage would take both)")
    if provider.script_origin is None:
        raise ConfigError(
            f"{_VENDOR}: {provider.name} cannot be the second vendor: its token travels in "
            "FAILOPEN_TOKEN_HEADER, where the server reads the first vendor's, so a request could "
            f"not say which challenge it answers; name another vendor")
    if fallback_secret is not None:
        raise ConfigError(
            f"FAILOPEN_FALLBACK_SECRET: set together with {_VENDOR}; a fallback route takes one "
            f"challenge, the second vendor's; remove FAILOPEN_FALLBACK_SECRET (for ALTCHA, "
            f"remove {_VENDOR} instead)")
    if provider.token_field == first_token_field:
        raise ConfigError(
            f"{_VENDOR}: {provider.title}'s token field {provider.token_field!r} is the first "
            "vendor's too (FAILOPEN_TOKEN_FIELD), so the server could not tell the two answers "
            "apart; name a vendor with a field of its own")
    if private_key is None:
        raise ConfigError(f"{_KEY}: required with {_VENDOR}={provider.name} ({provider.title}'s "
                          f"secret, with which a fallback route verifies tokens; {_GENERATE})")
    key = private_key.reveal()
    if not _PRINTABLE_ASCII.fullmatch(key) or key != key.strip():
        # Never echo the key itself.
        raise ConfigError(f"{_KEY}: has surrounding whitespace or characters outside printable "
                          "ASCII (a trailing newline from a secrets file?)")
    if not isinstance(public_key, str) or not public_key or public_key != public_key.strip():
        raise ConfigError(
            f"{_SITE_KEY}: required with {_VENDOR}={provider.name} (the site key the flag "
            f"endpoint gives the snippet to render {provider.title}'s widget; {_GENERATE})")
    if verify_url is None:
        if provider.verify_url is None:
            raise ConfigError(f"{_VERIFY_URL}: required with {_VENDOR}={provider.name} (each "
                              f"{provider.title} customer has its own verify endpoint)")
        found["fallback_verify_url"] = DefaultText(provider.verify_url)
    else:
        try:
            url = check_url(verify_url, setting=_VERIFY_URL)
            provider.check_verify_url(url)
        except ConfigError as exc:
            raise _as_second(exc) from None
        found["fallback_verify_url"] = url
    if vendor_url is None:
        found["fallback_vendor_url"] = DefaultText(provider.script_origin)
    else:
        url = check_url(vendor_url, setting=_VENDOR_URL)
        if "?" in url or "#" in url:
            raise ConfigError(f"{_VENDOR_URL}: expected an origin without query or fragment, "
                              f"like {provider.script_origin} (the snippet appends the path)")
        found["fallback_vendor_url"] = url.rstrip("/")
    return found


@dataclass(frozen=True)
class SecondVendor:
    """The second vendor's verify call as a fallback route makes it: its name (what the audit,
    the metrics and the flag endpoint call the challenge) and whether it checks actions."""

    name: str
    verifier: Verifier
    checks_action: bool

    def __repr__(self) -> str:
        return f"SecondVendor({self.name!r})"

    def _action(self, action: str | None) -> str | None:
        # A route's action applies to whichever vendor's token, where that vendor can check it.
        return action if self.checks_action else None

    def verify(self, token: str, *, client: str, action: str | None) -> VerifyResult:
        """The vendor's verdict on ``token`` (blocking: the sync adapters' path)."""
        return verify_in_context(self.verifier, token, remote_ip=client or None,
                                 action=self._action(action))

    async def averify(self, token: str, *, client: str, action: str | None) -> VerifyResult:
        """The async twin of :meth:`verify`: never a blocking call on the event loop."""
        return await averify_in_context(self.verifier, token, remote_ip=client or None,
                                        action=self._action(action))
