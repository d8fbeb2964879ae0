"""``printable``: outside text shown on a terminal, control and format characters escaped."""

from __future__ import annotations

import unicodedata

import pytest

from failopen._internal.terminal import printable


@pytest.mark.parametrize(
    ("text", "shown"),
    [("\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),  # OSC title change, ended by BEL
     ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear the screen
     ("a\rb", "a\\rb"), ("one\ntwo", "one\\ntwo"), ("\x00\x7f", "\\x00\\x7f"),
     ("\x9b31m", "\\x9b31m"), ("\x85", "\\x85"),  # C1: CSI, NEL
     ("abc\u202edef", "abc\\u202edef"), ("\u2066x\u2069", "\\u2066x\\u2069"),  # bidi
     ("\u202a\u202b\u202c\u202d", "\\u202a\\u202b\\u202c\\u202d"),
     ("zero\u200bwidth", "zero\\u200bwidth"), ("\ufeff", "\\ufeff"),  # other Cf
     ("tag\U000e0041", "tag\\U000e0041"),
     ("lone \ud800", "lone \\ud800")],  # from a JSON "\ud800": printing it would fail
)  # fmt: skip
def test_controls_and_format_characters_are_escaped(text: str, shown: str) -> None:
    assert printable(text) == shown
    assert printable(text).isascii() or not any(
        unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in printable(text)
    )


@pytest.mark.parametrize(
    "text",
    ["plain", "", "tab\tkept", "Ünïcødé ‐ 日本語 — ελληνικά", "emoji 🙂", "a\\x1b stays as typed"],
)
def test_ordinary_text_and_tab_are_kept(text: str) -> None:
    assert printable(text) == text


def test_every_control_and_format_character_but_tab_is_escaped() -> None:
    for code in range(0x110000):
        char = chr(code)
        if unicodedata.category(char) in ("Cc", "Cf", "Cs") and char != "\t":
            assert printable(char) != char and printable(char).isprintable(), hex(code)
