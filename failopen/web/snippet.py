"""The browser snippet: the one ``failopen.js`` the package ships (served by every adapter, with an
ETag), its fallback solver ``failopen-solver.js`` (a Web Worker the snippet starts only when a
route's outage policy is ``fallback``) and one adapter per vendor, ``failopen-<vendor>.js``
(loaded only for the configured vendor, or the second vendor the flag endpoint names), and the
attributes of its script tag built from the configuration."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from html import escape
from pathlib import Path

from failopen.config import Config
from failopen.providers.registry import PROVIDERS, provider_named
from failopen.providers.settings import check_action

__all__ = ["COMPANION_FILES", "SNIPPET_OPTIONS", "SNIPPET_PATH", "SOLVER_PATH", "Snippet",
           "adapter_file", "load_snippet", "snippet_attributes", "snippet_tag"]

#: Where the browser snippet ships inside the package.
SNIPPET_PATH = Path(__file__).parent.parent / "static" / "failopen" / "failopen.js"
#: The snippet's second file, beside it: the worker that solves the fallback challenge. The snippet
#: finds it by its own URL with the file name replaced.
SOLVER_PATH = SNIPPET_PATH.with_name("failopen-solver.js")


def adapter_file(vendor: str) -> str | None:
    """The file name of ``vendor``'s browser adapter beside the snippet (reCAPTCHA Enterprise
    shares reCAPTCHA's); None for the spec's vendor, which needs none."""
    adapter = provider_named(vendor).browser_adapter
    return None if adapter is None else f"failopen-{adapter}.js"


#: The files served beside ``failopen.js`` (by the ASGI and WSGI middleware, and Django's static
#: files): the solver and every vendor's adapter, by file name.
COMPANION_FILES: dict[str, Path] = {SOLVER_PATH.name: SOLVER_PATH} | {
    name: SNIPPET_PATH.with_name(name)
    for name in sorted({adapter_file(vendor) or "" for vendor in PROVIDERS} - {""})
}


@dataclass(frozen=True)
class Snippet:
    """The snippet's bytes with a strong ETag, read once."""

    body: bytes
    etag: str


@lru_cache(maxsize=16)  # the snippet, its companions, and a site's own snippet_path
def load_snippet(path: Path = SNIPPET_PATH) -> Snippet | None:
    """A file of the browser snippet (``SNIPPET_PATH``, ``SOLVER_PATH``), or None while it is not
    there."""
    try:
        body = path.read_bytes()
    except OSError:
        return None
    return Snippet(body=body, etag='"' + hashlib.sha256(body).hexdigest()[:32] + '"')


#: The snippet's tuning options: keyword of :func:`snippet_attributes` -> attribute.
SNIPPET_OPTIONS: dict[str, str] = {
    "form": "data-failopen-form",
    "action": "data-failopen-action",
    "ready_timeout_ms": "data-failopen-ready-timeout-ms",
    "retries": "data-failopen-retries",
    "retry_delay_ms": "data-failopen-retry-delay-ms",
}


def snippet_attributes(
    config: Config,
    *,
    flag_url: str,
    form: str | None = None,
    action: str | None = None,
    ready_timeout_ms: int | None = None,
    retries: int | None = None,
    retry_delay_ms: int | None = None,
) -> dict[str, str]:
    """The ``data-*`` attributes of the snippet's script tag: where to ask, what to send.

    The settings always (with another vendor than the spec's, also its name and widget mode:
    the snippet loads that vendor's adapter); the tuning options only when given (the snippet
    has defaults for them: ``form`` every form holding the token field, ``action`` the one the
    flag endpoint names for the form's route, 10000 ms, 3 retries, 500 ms). A tuning value that
    is not a whole number of at least 0 (1 for the time-out), an empty ``form`` or an action no
    vendor mints is a ValueError naming the option.
    """
    attributes = {
        "data-failopen-flag-url": flag_url,
        "data-failopen-public-key": config.public_key or "",
        "data-failopen-token-field": config.token_field,
        "data-failopen-vendor-url": config.vendor_url or "",
    }
    if config.provider.browser_adapter is not None:  # the spec's vendor needs none
        attributes["data-failopen-vendor"] = config.vendor
        attributes["data-failopen-widget"] = config.widget or ""
    if form is not None:
        if not isinstance(form, str) or not form.strip():
            raise ValueError("form: expected a CSS selector like '#login'")
        attributes[SNIPPET_OPTIONS["form"]] = form
    if action is not None:
        try:
            attributes[SNIPPET_OPTIONS["action"]] = check_action(action)
        except ValueError as exc:
            raise ValueError(f"action: {exc}") from None
    for name, value, least in (("ready_timeout_ms", ready_timeout_ms, 1),
                               ("retries", retries, 0), ("retry_delay_ms", retry_delay_ms, 0)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name}: expected a whole number of at least {least}, got {value!r}")
        attributes[SNIPPET_OPTIONS[name]] = str(value)
    return attributes


def snippet_tag(src: str, attributes: Mapping[str, str]) -> str:
    """The snippet's script tag, ``<script src="..." defer data-failopen-...></script>``: every
    value HTML-escaped (safe to put in a page as it is), ``src`` and ``defer`` first, as people
    write them. The template helpers (Django's ``{% failopen_script %}``, Jinja's
    ``failopen_script()``) render it; ``attributes`` from :func:`snippet_attributes`, plus a CSP
    ``nonce`` when the page has one."""
    rest = "".join(f' {escape(name)}="{escape(value)}"' for name, value in attributes.items())
    return f'<script src="{escape(src)}" defer{rest}></script>'
