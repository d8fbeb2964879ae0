"""``failopen check``'s ``fallback_verify_api`` line: the second vendor's keys
(``FAILOPEN_FALLBACK_VENDOR``), checked as the first vendor's are (:func:`check_verify_api`: a
made-up token sent; the key confirmed by the vendor's own refusal codes or by a made-up key
answered otherwise, else "key not confirmed"; its documented test secret a problem)."""

from __future__ import annotations

import re

from failopen.cli.preflight import Check, Wiring, check_verify_api
from failopen.config import Config
from failopen.exceptions import ConfigError

__all__ = ["check_fallback_verify_api"]

# The first vendor's check speaks of the first vendor's settings: said of the second, the words
# must name the second's.
_FIRST_NAMES = re.compile(r"\bFAILOPEN_(VERIFY_URL|PRIVATE_KEY|PUBLIC_KEY|VENDOR)\b")


def check_fallback_verify_api(config: Config, wiring: Wiring) -> Check:
    """Send the second vendor a made-up token with its own keys (``ok`` without one)."""
    if config.fallback_vendor is None:
        return Check("fallback_verify_api", "ok",
                     "no second vendor (FAILOPEN_FALLBACK_VENDOR): a fallback route asks for the "
                     "self-hosted ALTCHA challenge", {"vendor": None})
    try:
        # The second vendor's settings in the first vendor's places: one check, one logic.
        as_first = Config(vendor=config.fallback_vendor, verify_url=config.fallback_verify_url,
                          private_key=config.fallback_private_key,
                          public_key=config.fallback_public_key,
                          verify_timeout=config.verify_timeout, min_score=config.min_score,
                          protected_paths=config.protected_paths or ("/",))
    except ConfigError as exc:  # Config built with these already: unreachable, said anyway
        return Check("fallback_verify_api", "problem", _second(str(exc)))
    found = check_verify_api(as_first, wiring)
    return Check("fallback_verify_api", found.status, _second(found.detail), found.facts)


def _second(text: str) -> str:
    return _FIRST_NAMES.sub(r"FAILOPEN_FALLBACK_\1", text)
