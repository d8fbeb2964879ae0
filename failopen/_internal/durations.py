"""Durations as people write them: ``90``, ``1.5``, ``500ms``, ``90s``, ``30m``, ``2h``, ``1d``.

One reading for every ``FAILOPEN_*`` variable, Django setting and command-line flag that takes
seconds, so ``FAILOPEN_POLL_INTERVAL=30s`` works where ``--ttl 30m`` does.
"""

from __future__ import annotations

import argparse
import math
import re

__all__ = ["EXAMPLES", "duration_arg", "duration_or_zero_arg", "parse_duration"]

#: What the messages offer as examples.
EXAMPLES = "30s, 5m, 1h or a number of seconds"

_DURATION = re.compile(r"^([+-]?\d+(?:\.\d+)?|[+-]?\.\d+)\s*(ms|s|m|h|d)?$")
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, *, zero: bool = False) -> float:
    """Seconds in ``text``; ValueError saying what is wrong (not a duration, negative, zero
    where ``zero`` is False)."""
    match = _DURATION.match(text.strip().lower()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{text!r} is not a duration like {EXAMPLES}")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError(f"{text!r} is not a duration like {EXAMPLES}")
    if seconds < 0:
        least = "0 or more" if zero else "above 0"
        raise ValueError(f"{text!r} is negative; a duration is {least}")
    if seconds == 0 and not zero:
        raise ValueError(f"{text!r} is zero; a duration here must be above 0")
    return seconds


def duration_arg(text: str) -> float:
    """argparse type: a duration above 0 (the flag's name comes with argparse's message)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration_or_zero_arg(text: str) -> float:
    """argparse type: a duration of 0 or more."""
    try:
        return parse_duration(text, zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
