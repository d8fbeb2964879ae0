"""Outside text made safe to show on a terminal: control and invisible format characters escaped.

A status page, an API record or an audit line can carry ESC and BEL sequences that rewrite the
screen an operator reads, or bidi overrides that reorder what it says. The CLI shows such text
through :func:`printable` where it prints (``--json`` output stays exact).
"""

from __future__ import annotations

import unicodedata

__all__ = ["printable"]

# Cc: C0, DEL and C1 controls; Cf: invisible format characters, bidi overrides and isolates
# (U+202A-U+202E, U+2066-U+2069) among them; Cs: a lone surrogate (from a JSON "\ud800"),
# which would also make the print itself fail.
_ESCAPED = frozenset(("Cc", "Cf", "Cs"))


def _escape(char: str) -> str:
    # repr's own escapes: \r, \n, \x1b, \u202e, \U000e0001 (the quotes around are cut off).
    return repr(char)[1:-1]


def printable(text: str) -> str:
    """``text`` with control and format characters shown as Python escapes (``\\x1b``,
    ``\\u202e``), newlines included; tab and ordinary text, non-ASCII letters too, kept."""
    if text.isprintable():  # the common case: no control, format or separator character
        return text
    return "".join(
        _escape(char) if char != "\t" and unicodedata.category(char) in _ESCAPED else char
        for char in text
    )
