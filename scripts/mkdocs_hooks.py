"""MkDocs hooks for the manual (mkdocs.yml names this file).

The pages are written to read right in two places: the built site and the forge that shows
docs/*.md as they are. A ``|`` inside a table cell's code span must be escaped (``\\|``) for
GitHub-flavoured Markdown, while Python-Markdown already leaves a pipe in backticks alone and
would print the backslash: so the escape is dropped, in table rows only, before the page is
rendered.
"""

from __future__ import annotations

import re
from typing import Any

_FENCE = re.compile(r"^\s*(```|~~~)")


def unescape_table_pipes(markdown: str) -> str:
    """``\\|`` to ``|`` on table rows (lines starting with ``|``) outside fenced code."""
    out, fenced = [], False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("|"):
            line = line.replace("\\|", "|")
        out.append(line)
    return "\n".join(out)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs calls this with each page's Markdown before rendering it."""
    return unescape_table_pipes(markdown)
