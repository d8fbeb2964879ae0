"""The status page's base address, checked: the one setting every status request is built on."""

from __future__ import annotations

import re

import httpx

from failopen.exceptions import ConfigError
from failopen.providers.urls import check_url

__all__ = ["COMPONENTS_PATH", "check_status_url"]

COMPONENTS_PATH = "/api/v2/components.json"

# A document path where the base address belongs: /api/v2, /api/v2/<anything>, or any *.json.
_DOCUMENT_PATH = re.compile(r"(?i)(?:/api/v2(?:/[^/]*)?|/[^/]*\.json)/*$")


def check_status_url(value: str, setting: str = "FAILOPEN_STATUS_URL") -> str:
    """Validate the status page's base address; raise ConfigError saying what to change.

    On top of :func:`failopen.providers.urls.check_url` (absolute, https unless loopback, no
    credentials, no whitespace): no query or fragment, and no document path. A value ending in
    ``/api/v2/components.json`` would be requested with the path doubled, so it is refused with
    the base address to use instead, rather than trimmed: a setting that means one thing here and
    another in the operator's notes is how the wrong page ends up watched.
    """
    url = httpx.URL(check_url(value, setting=setting))
    if url.query or url.fragment:
        raise ConfigError(
            f"{setting}: must be the page's base address (like https://status.example.com), "
            "without a query or fragment"
        )
    document = _DOCUMENT_PATH.search(url.path)
    if document is not None:
        base = str(url.copy_with(path=url.path[: document.start()]))
        raise ConfigError(
            f"{setting}: give the page's base address, not a document on it: failopen adds "
            f"{COMPONENTS_PATH} itself; use {base}"
        )
    return str(url)
