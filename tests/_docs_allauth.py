"""The manual's django-allauth recipe (docs/allauth.md), block by block, for the tests that
follow it."""

from __future__ import annotations

import re

from _manual import page


def allauth_blocks() -> dict[str, str]:
    """The code blocks of the django-allauth page, by language (``python``: the settings,
    ``django``: the template override, ``http``: a headless call)."""
    blocks = dict(re.findall(r"^```([a-z]+)\n(.*?)^```", page("allauth.md"), re.S | re.M))
    assert sorted(blocks) == ["django", "http", "python"], sorted(blocks)
    return blocks
