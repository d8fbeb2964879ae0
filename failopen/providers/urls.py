"""Which vendor URLs failopen talks to: a configured URL, and where a redirect may lead.

:func:`check_url` is the rule for every vendor URL a setting gives (the status page, the verify
endpoint, the browser script's base): absolute, http(s), no credentials, https unless the host is
loopback. :func:`next_url` is the rule for a redirect during an exchange: the same origin, at
most three hops. Both are about addresses alone, so they live apart from the bounded exchange in
:mod:`failopen.providers.exchange` that follows them.
"""

from __future__ import annotations

import ipaddress
import unicodedata

import httpx

from failopen.exceptions import ConfigError, RedirectRefused

__all__ = ["check_url", "is_loopback_host", "next_url"]

_MAX_REDIRECTS = 3


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals, where plain http is acceptable.

    Subdomains of ``.localhost`` are not accepted: resolvers here send them to DNS, and a DNS
    answer would carry plain HTTP off the machine.
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_url(value: str, *, setting: str) -> str:
    """Validate a vendor URL: absolute, http(s), no credentials, https unless the host is loopback.

    Whitespace and control or invisible format characters anywhere are refused rather than
    percent-encoded or stripped: ``https://status.x /`` and a trailing newline from a secret
    file are mistakes, and httpx would quietly turn a space into ``%20``, even inside the host.
    Messages name the host, never the whole value: a URL may carry a password.
    """
    if not isinstance(value, str):
        raise ConfigError(f"{setting}: expected a URL string, got {type(value).__name__}")
    bad = next((ch for ch in value if ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf")),
               None)
    if bad is not None:
        raise ConfigError(
            f"{setting}: contains whitespace or a control character ({bad!r} at position "
            f"{value.index(bad)}); remove it (a space, or a trailing newline from a file?)"
        )
    try:
        url = httpx.URL(value)
    except Exception:  # httpx raises several types for malformed URLs
        raise ConfigError(f"{setting}: not a valid URL") from None
    if url.userinfo:
        raise ConfigError(
            f"{setting}: credentials in the URL are not allowed (remove the user:password@ part)"
        )
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(f"{setting}: must be an absolute http(s) URL, like https://host/path")
    if url.scheme == "http" and not is_loopback_host(url.host):
        raise ConfigError(
            f"{setting}: plain http to {url.host} is not allowed; use https "
            "(plain http is allowed only for localhost, e.g. the test kit's fakes)"
        )
    return str(url)


def _same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


def next_url(current: httpx.URL, response: httpx.Response, hops: int) -> httpx.URL | None:
    """Where a redirect answer leads (None: not a redirect); RedirectRefused off the origin or
    past the hop limit."""
    if not response.is_redirect:
        return None
    location = response.headers.get("location")
    if not location:
        return None
    target = current.join(location)
    if not _same_origin(current, target):
        raise RedirectRefused(
            f"refused redirect from {current.host} to another origin ({target.host})"
        )
    if hops >= _MAX_REDIRECTS:
        raise RedirectRefused(f"more than {_MAX_REDIRECTS} redirects")
    return target
