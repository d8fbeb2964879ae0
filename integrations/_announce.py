"""The start-up line every adapter logs: what it protects, with which evidence, store and mode.

One INFO line per runtime an adapter builds, so "is sign-up protected here?" has an answer in
the log; a WARNING besides when it protects nothing (``FAILOPEN_PROTECTED_PATHS`` misspelled
without its S leaves every request unchecked). Nothing secret is in it: the store is shown as
the store describes itself (password masked); the status URL carries no credentials.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from failopen.providers.registry import DEFAULT_VENDOR
from failopen.runtime import FailOpen
from failopen.stores import mask_url

__all__ = ["announce", "evidence_text", "protection_text"]


def protection_text(methods: frozenset[str], paths: Sequence[str],
                    views: Sequence[str] = ()) -> str:
    """``POST on /login, /signup; views accounts:login`` (empty when nothing is protected)."""
    parts = []
    if paths:
        parts.append(f"{', '.join(sorted(methods))} on {', '.join(paths)}")
    if views:
        parts.append(f"views {', '.join(views)}")
    return "; ".join(parts)


def evidence_text(runtime: FailOpen) -> str:
    """Where outage evidence comes from, as one phrase."""
    config = runtime.config
    if config.status_url is None:
        if runtime.probe is not None:
            return (f"the verify probe alone (FAILOPEN_EVIDENCE=probe: {config.provider.title} "
                    "has no status page failopen reads)")
        return "none (no FAILOPEN_STATUS_URL: it never fails open; overrides only)"
    component = config.global_component or "guessed from the page's shape"
    text = f"status page {mask_url(config.status_url)} (global component: {component})"
    return text + " and the verify probe" if runtime.probe is not None else text


def announce(logger: logging.Logger, runtime: FailOpen, *, adapter: str,
             protects: str, nothing_hint: str) -> None:
    """Log the start-up INFO line; and a WARNING when ``protects`` is empty."""
    config = runtime.config
    if not protects and config.protected_by_fields:
        protects = "form fields only (FAILOPEN_PROTECTED_BY_FIELDS)"
    store = runtime.store.describe()
    evidence = evidence_text(runtime)
    # The spec's vendor's line stays as it always was; another vendor is named in it.
    vendor = "" if config.vendor == DEFAULT_VENDOR else f"vendor: {config.provider.title}; "
    logger.info(
        "failopen (%s) protects %s; %sevidence: %s; store: %s; mode: %s", adapter,
        protects or "nothing", vendor, evidence, store, config.mode,
        extra={"event": "failopen.started", "adapter": adapter,
               "protects": protects or None, "vendor": config.vendor, "evidence": evidence,
               "store": store, "mode": config.mode})
    if not protects and not config.protected_by_fields:  # fields protect: said in the settings
        logger.warning(
            "failopen (%s) protects nothing: every request reaches the app unchecked. %s",
            adapter, nothing_hint,
            extra={"event": "failopen.protects_nothing", "adapter": adapter})
