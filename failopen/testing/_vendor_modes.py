"""The fake vendor scripts' modes (``ok``, ``http404``, ``error_then_ok:N``, ...): read by the fakes
and checked by their control route before anything changes.

The spec's vendor script (:class:`~failopen.testing.FakeVendorScript`) and the captcha vendors'
browser scripts (:mod:`failopen.testing.browser_scripts`) share the parser; each names the kinds
it understands, so a mode one of them cannot play is refused up front, not ignored.
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["SCRIPT_KINDS", "WIDGET_KINDS", "parse_mode"]

# Display order of the choices in the error message; numbered kinds take ``:N`` or ``:MS``.
_SHOWN = {"ok": "ok", "http404": "http404", "silent": "silent", "error_then_ok": "error_then_ok:N",
          "error": "error", "failed": "failed", "expire": "expire:MS", "slow": "slow:MS"}
_NUMBERED = frozenset({"error_then_ok", "slow", "expire"})

#: What :class:`~failopen.testing.FakeVendorScript` plays.
SCRIPT_KINDS: frozenset[str] = frozenset(
    {"ok", "http404", "silent", "error_then_ok", "error", "failed", "slow"})
#: What the captcha vendors' browser-script fakes play (no ``failed``: their widgets let a person
#: try again rather than end in a verdict; ``expire:MS`` instead).
WIDGET_KINDS: frozenset[str] = frozenset(
    {"ok", "http404", "silent", "error_then_ok", "error", "expire", "slow"})


def parse_mode(mode: object, kinds: Collection[str] = SCRIPT_KINDS) -> tuple[str, int]:
    """``("error_then_ok", 2)`` for ``"error_then_ok:2"``; ValueError naming the choices."""
    if isinstance(mode, str):
        kind, sep, number = mode.partition(":")
        if kind in kinds:
            if not sep and kind not in _NUMBERED:
                return kind, 0
            if sep and kind in _NUMBERED and number.isdigit() and number.isascii():
                return kind, int(number)
    choices = ", ".join(shown for kind, shown in _SHOWN.items() if kind in kinds)
    raise ValueError(f"unknown vendor script mode {mode!r}; choose from {choices}")
