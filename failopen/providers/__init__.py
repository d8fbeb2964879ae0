"""The captcha vendors: each one's verify API and status page, behind one contract.

- the registry (:mod:`~failopen.providers.registry`): one small adapter per vendor, chosen by
  ``FAILOPEN_VENDOR``, on one base (:mod:`~failopen.providers.base`): the spec's vendor
  (:mod:`~failopen.providers.enforcement`, the default), :mod:`~failopen.providers.turnstile`,
  :mod:`~failopen.providers.hcaptcha`, :mod:`~failopen.providers.recaptcha` (the three share
  :mod:`~failopen.providers.siteverify`), :mod:`~failopen.providers.recaptcha_enterprise` and
  :mod:`~failopen.providers.friendly_captcha`; what each presets
  (:mod:`~failopen.providers.settings`);
- the verify call: :mod:`~failopen.providers.verify` sends a token the way the adapter spells it
  and returns the outcome the adapter reads (the spec's vendor's rules are
  :mod:`~failopen.providers.verify_answers`), logged by :mod:`~failopen.providers.verify_log`;
- the status page (Statuspage's ``components.json``, the spec's interface B, and the same API on
  Cloudflare's and hCaptcha's pages): :mod:`~failopen.providers.status` reads it
  (:mod:`~failopen.providers.status_documents`) and picks the component that stands for the
  captcha (:mod:`~failopen.providers.global_component`);
- the bounded HTTP exchange both use (:mod:`~failopen.providers.exchange`): one time budget, a
  byte cap, redirects only to the same host, errors that name host:port and never a credential;
- the rules for the vendor URLs themselves (:mod:`~failopen.providers.urls`): what a setting may
  give, and where a redirect may lead.

Nothing here decides anything: the engine turns these answers into evidence.
"""

from __future__ import annotations

__all__: list[str] = []
