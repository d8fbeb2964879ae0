"""``FAILOPEN_OUTAGE_RATE`` read without any optional package (issue 31, item 11).

The rate limit counts in memory with failopen's own windows (:mod:`failopen.fallback.rate_memory`),
so reading its rate must not need ``limits`` either: a site installed with ``[django]`` alone
(the documented first step) would otherwise run the default ``20/minute`` uncounted. The grammar
is the one ``limits`` read before, so every rate that started a site still does, and means the
same; only the fleet's Redis count still uses ``limits``, which reads the same text into the same
window (``tests/fallback/test_rate_text.py`` compares the two):

* ``N/unit`` or ``N per unit``, spaces anywhere between the parts, any letter case;
* ``unit``: second, minute, hour, day (and month = 30 days, year = 360 days, as ``limits`` has
  them), singular or plural;
* a window of several units: ``N/5 minutes``, ``N per 2 hours``.

Refused: more than one rate (``20/minute;5/second``: ``limits`` would have kept the first one),
``N`` of 0 (it admits nobody: the ``closed`` policy says that), a window of 0 units (``limits``
read ``20/0 minutes`` as ``20/minute`` without a word), a window of more than 100 years (its
seconds are no float: every count failed, and each request was admitted uncounted), anything
else.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["Rate", "parse_rate"]

# The language of limits' SINGLE_EXPR (limits/util.py), matched whole: the same Unicode spaces,
# the same letters. Its runs of \s* side by side (around "per", around the optional multiple)
# are folded into one each: the same strings, without time cubic in a run of spaces.
_RATE = re.compile(r"\s*([0-9]+)\s*(?:/|per)\s*(?:([0-9]+)\s*)?([a-z]+)\s*", re.IGNORECASE)
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86_400,
                 "month": 30 * 86_400, "year": 12 * 30 * 86_400}
_UNITS = {**_UNIT_SECONDS, **{f"{name}s": seconds for name, seconds in _UNIT_SECONDS.items()}}
# The longest window: far beyond any outage, and still a float and a Redis expiry.
_LONGEST = 100 * _UNIT_SECONDS["year"]
_GRAMMAR = "write N/second, N/minute, N/hour or N/day (such as 20/minute, or 100 per 5 minutes)"


class Rate(NamedTuple):
    """``amount`` admissions per ``seconds``."""

    amount: int
    seconds: int


def parse_rate(text: str) -> Rate:
    """The rate ``text`` writes; ValueError saying what to write instead. Not ``none``: the
    caller reads that word (it turns the limit off)."""
    found = _RATE.fullmatch(text)
    seconds = _UNITS.get(found.group(3).lower()) if found else None
    if found is None or seconds is None:
        raise ValueError(f"{text!r} is not one rate; {_GRAMMAR}, or none")
    amount = int(found.group(1))
    if amount < 1:
        raise ValueError(f"{text!r} admits nobody; to refuse every request during an outage "
                         "use the closed policy, to not count use none")
    multiples = 1 if found.group(2) is None else int(found.group(2))
    if multiples < 1:
        raise ValueError(f"{text!r} has a window of no time; {_GRAMMAR}")
    if seconds * multiples > _LONGEST:
        raise ValueError(f"{text!r} counts over more than 100 years; {_GRAMMAR}")
    return Rate(amount, seconds * multiples)
