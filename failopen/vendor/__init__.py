"""The vendor's two interfaces, as the spec gives them (``shared/spec/service-interface.md``).

- the status page (interface B): :mod:`~failopen.vendor.status` reads ``components.json`` and
  ``status.json`` (:mod:`~failopen.vendor.status_documents`) and picks the *global* component
  (:mod:`~failopen.vendor.global_component`);
- the verify call: :mod:`~failopen.vendor.verify` sends a token and classifies the answer
  (:mod:`~failopen.vendor.verify_answers`);
- the bounded HTTP exchange both use (:mod:`~failopen.vendor.exchange`): one time budget, a byte
  cap, redirects only to the same host, errors that name host:port and never a credential;
- the rules for the vendor URLs themselves (:mod:`~failopen.vendor.urls`): what a setting may
  give, and where a redirect may lead.

Nothing here decides anything: the engine turns these answers into evidence.
"""

from __future__ import annotations

__all__: list[str] = []
