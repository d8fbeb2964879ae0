"""Text from outside, made safe to show: poll errors for the public (a terminal: _terminal.py).

The flag endpoint answers anyone, and part of an error's text comes from the status page (ids it
quoted) or the network stack (a proxy URL with its password, a redirect target with a token).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

__all__ = ["MAX_ERROR", "MAX_LOGGED_ERROR", "host_port", "public_error", "redact_url"]

#: Longest poll error shown on the flag endpoint and by ``failopen watch``.
MAX_ERROR = 300
# The log line keeps more: an operator reading it wants the whole hint (which ids, what to set).
MAX_LOGGED_ERROR = 2000

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_SPACE = re.compile(r"(\s+)")


def public_error(exc: BaseException, *, limit: int = MAX_ERROR) -> str:
    """A poll error as anyone may see it (the flag endpoint answers the public): bounded, one
    line, without the credentials or query strings a URL in an exception text may carry (a proxy
    URL with its password, a redirect target with a token). Linear in the text: a hostile page
    chooses part of it."""
    whole = f"{type(exc).__name__}: {exc}"
    words = _SPACE.split(_CONTROL.sub(" ", whole[: limit * 4]))
    if len(whole) > limit * 4:
        # The cut may fall inside a URL before its "@", leaving a password that passes for a
        # host: the word it cut is withheld whole (shown only if it began within the limit).
        words[-1] = "..."
    text = "".join(_redact_url(word) for word in words)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def redact_url(url: str) -> str:
    """A URL as a message may show it: no userinfo, no query or fragment, one line."""
    return "".join(_redact_url(word) for word in _SPACE.split(_CONTROL.sub(" ", url)))


def _redact_url(word: str) -> str:
    """``scheme://user:pass@host/path?query`` -> ``scheme://***@host/path?***`` in one word."""
    first = word.find("://")
    if first < 0:
        return word
    cuts = [i for i in (word.find("?", first), word.find("#", first)) if i >= 0]
    if cuts:
        word = word[: min(cuts)] + "?***"
    out: list[str] = []
    pos = 0
    # From pos - 1: an authority ends at the "/" that may begin the next URL's "://".
    while (found := word.find("://", max(pos - 1, 0))) >= 0:
        start = found + 3
        end = word.find("/", start)
        end = len(word) if end < 0 else end
        authority = word[start:end]
        if "@" in authority:
            authority = "***@" + authority.rpartition("@")[2]
        out += (word[pos:start], authority)
        pos = end
    out.append(word[pos:])
    return "".join(out)


def host_port(url: object) -> str:
    """``host:port`` of a URL, for an error that must say which server failed (a refused
    connection, a name that does not resolve): never its userinfo, path or query."""
    try:
        parts = urlsplit(str(url))
        host, port = parts.hostname, parts.port
    except ValueError:
        return "the server"
    if not host:
        return "the server"
    port = port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port else shown
