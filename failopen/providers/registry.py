"""Which vendor adapter ``FAILOPEN_VENDOR`` names: one small module per vendor, one registry.

The spec's vendor (``enforcement``) is the default. Adding a vendor is one module with a
:class:`~failopen.providers.base.Provider` and one line here; nothing outside this wing branches
on a vendor's name.
"""

from __future__ import annotations

from failopen.exceptions import ConfigError
from failopen.providers.base import Provider
from failopen.providers.enforcement import Enforcement
from failopen.providers.friendly_captcha import FriendlyCaptcha
from failopen.providers.hcaptcha import HCaptcha
from failopen.providers.recaptcha import Recaptcha
from failopen.providers.recaptcha_enterprise import RecaptchaEnterprise
from failopen.providers.turnstile import Turnstile

__all__ = ["DEFAULT_VENDOR", "PROVIDERS", "provider_named"]

#: Every vendor failopen speaks to, by the name ``FAILOPEN_VENDOR`` takes.
PROVIDERS: dict[str, Provider] = {
    provider.name: provider for provider in (
        Enforcement(), Turnstile(), HCaptcha(), Recaptcha(), RecaptchaEnterprise(),
        FriendlyCaptcha(),
    )
}
DEFAULT_VENDOR = Enforcement.name


def provider_named(name: object, setting: str = "FAILOPEN_VENDOR") -> Provider:
    """The adapter for ``name``; ConfigError listing the known names for any other value."""
    provider = PROVIDERS.get(name) if isinstance(name, str) else None
    if provider is None:
        raise ConfigError(f"{setting}: {name!r} is not a vendor failopen knows; use one of "
                          f"{', '.join(PROVIDERS)}")
    return provider
