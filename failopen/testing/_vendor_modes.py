"""The fake vendor script's modes (``ok``, ``http404``, ``error_then_ok:N``, ...): read by the fake
and checked by its control route before anything changes."""

from __future__ import annotations

__all__ = ["parse_mode"]


def parse_mode(mode: object) -> tuple[str, int]:
    """``("error_then_ok", 2)`` for ``"error_then_ok:2"``; ValueError naming the choices."""
    if isinstance(mode, str):
        kind, sep, number = mode.partition(":")
        if not sep and kind in ("ok", "http404", "silent", "error", "failed"):
            return kind, 0
        if sep and kind in ("error_then_ok", "slow") and number.isdigit() and number.isascii():
            return kind, int(number)
    raise ValueError(f"unknown vendor script mode {mode!r}; choose from "
                     "ok, http404, silent, error_then_ok:N, error, failed, slow:MS")
