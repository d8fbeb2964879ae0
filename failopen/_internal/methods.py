"""The check of ``FAILOPEN_PROTECTED_METHODS``: each one an HTTP method a request can carry.

A method is a token (RFC 9110, section 5.6.2): no space, no separator. A value that is not one
protects nothing, since no request names it: ``POST PUT`` (spaces where commas belong) was kept as
one method called "POST PUT", and POST and PUT went unprotected without a word. Config refuses it
at start-up with these words.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["method_problem"]

# tchar, upper case (the methods are upper-cased before they are checked).
_METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Z-]+")


def method_problem(value: Any) -> str | None:
    """What makes ``value`` no set of HTTP methods, in words; None when nothing does (a value
    that is not a set of strings at all is for the caller to refuse)."""
    if not isinstance(value, frozenset) or not all(isinstance(v, str) for v in value):
        return None
    bad = sorted(method for method in value if not _METHOD.fullmatch(method))
    if not bad:
        return None
    return (f"{', '.join(map(repr, bad))} is not an HTTP method: a method has no spaces, and "
            "several are separated by commas (POST,PUT)")
