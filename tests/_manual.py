"""The manual as the tests read it: the README (the landing page) and the pages under docs/.

The tests that keep the manual honest (every command shown exists, the configuration table is
the code's, the Django and allauth recipes work when pasted into new projects) find the text they
check through these helpers, so a page that moves is found in one place.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["DOCS", "README", "ROOT", "manual", "page", "section", "shown"]

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def page(name: str) -> str:
    """One page of the manual, ``docs/<name>``."""
    path = DOCS / name
    assert path.is_file(), f"the manual has no page docs/{name}"
    return path.read_text()


def manual() -> dict[str, str]:
    """Every Markdown file a reader sees: ``README.md`` and ``docs/*.md``, by repository path."""
    texts = {"README.md": README.read_text()}
    for path in sorted(DOCS.rglob("*.md")):
        texts[path.relative_to(ROOT).as_posix()] = path.read_text()
    return texts


def shown(markdown: str) -> str:
    """What a reader sees: not the notes left in HTML comments."""
    return re.sub(r"<!--.*?-->", "", markdown, flags=re.S)


def section(markdown: str, heading: str) -> str:
    """The text under ``heading`` (a whole heading line, ``## Title``) up to the next heading of
    the same or a higher level, fenced code skipped when looking for it."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = markdown.splitlines(keepends=True)
    assert heading + "\n" in lines, f"no heading {heading!r}"
    start = lines.index(heading + "\n") + 1
    fenced = False
    for end in range(start, len(lines)):
        line = lines[end]
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"^#{{1,{level}}} ", line):
            return "".join(lines[start:end])
    return "".join(lines[start:])
