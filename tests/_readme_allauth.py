"""The README's django-allauth recipe, block by block, for the tests that follow it."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def allauth_blocks() -> dict[str, str]:
    """The code blocks of the README's "django-allauth" section, by language
    (``python``: the settings, ``django``: the template override, ``http``: a headless call)."""
    text = README.read_text()
    section = re.search(r"^### django-allauth\n(.*?)^### ", text, re.S | re.M)
    assert section, "the README has a 'django-allauth' section"
    blocks = dict(re.findall(r"^```([a-z]+)\n(.*?)^```", section.group(1), re.S | re.M))
    assert sorted(blocks) == ["django", "http", "python"], sorted(blocks)
    return blocks
