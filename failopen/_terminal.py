"""Outside text made safe to print on a terminal: shown, never obeyed.

A status page, a Redis heartbeat, an override's reason or an audit file can carry an escape
sequence that clears the screen an operator reads during an incident, a carriage return that
hides the start of a line, or a bidi override that shows a line reversed. The CLI passes such
text through :func:`printable` where it prints it; ``--json`` output is never changed.
"""

from __future__ import annotations

import unicodedata

__all__ = ["printable"]

# Cc: C0 and C1 controls and DEL (ESC, BEL, CR, LF, U+0080-U+009F). Cf: format characters,
# among them the bidi overrides and isolates (U+202A-U+202E, U+2066-U+2069) and zero-width ones.
# Zl/Zp: U+2028 and U+2029 end a line in some viewers. Cs: a lone surrogate (JSON may spell one)
# cannot be written to a UTF-8 terminal at all, and would end the command with an error.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
# A tab moves the cursor forward and nothing else: kept.
_KEPT = frozenset({"\t"})


def _escape(char: str) -> str:
    # Python's own spelling (``\x1b``, ``\n``, ``\u202e``), so an operator can read what was sent.
    return char.encode("unicode_escape").decode("ascii")


def printable(text: str) -> str:
    """``text`` with control and format characters escaped Python-style (``\\x1b``, ``\\u202e``).

    Tab and ordinary text (non-ASCII letters included) are kept; a newline is escaped, so one
    field stays on one line.
    """
    if text.isprintable():  # the common case, and linear: no control or format character here
        return text
    return "".join(
        _escape(char)
        if char not in _KEPT and unicodedata.category(char) in _ESCAPED_CATEGORIES
        else char
        for char in text
    )
