"""``ROUTE=VALUE`` pairs: how a setting that gives each protected route a value is read.

``FAILOPEN_OUTAGE_POLICY_ROUTES`` (a policy each) and ``FAILOPEN_EXPECTED_ACTIONS`` (an action
each) take the same three spellings: ``/login=open,/signup=fallback`` in an environment variable,
a mapping in Django's settings, or pairs in code. ValueError says what is wrong; the caller names
the setting (as :func:`failopen._internal.durations.parse_duration` leaves it to its callers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["route_pairs"]


def route_pairs(value: Any, *, what: str, whats: str, example: str,
                check: Callable[[str, Any], str]) -> tuple[tuple[str, str], ...]:
    """``(route, value)`` pairs in the order given, each value as ``check(route, raw)`` returns
    it (which raises ValueError for a bad one); ValueError for an item without ``=``, a pair of
    another shape, or a route given two values. ``what`` names the value (``policy``), ``whats``
    several of them (``policies``)."""
    pairs: Iterable[Any]
    upper = what.upper()
    if isinstance(value, str):
        pairs = []
        for item in value.split(","):
            if not item.strip():
                continue
            route, equals, given = item.rpartition("=")  # a value never holds "="
            if not equals or not route.strip():
                raise ValueError(f"{item.strip()!r} is not ROUTE={upper}; write e.g. {example}")
            pairs.append((route.strip(), given))
    elif isinstance(value, Mapping):
        pairs = value.items()
    elif isinstance(value, Iterable):
        pairs = value
    else:
        raise ValueError(f"expected ROUTE={upper},... or a mapping of routes to {whats}, got "
                         f"{type(value).__name__}")
    found: dict[str, str] = {}
    for pair in pairs:
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or not isinstance(pair[0], str) or not pair[0].strip()):
            raise ValueError(f"{pair!r} is not a (route, {what}) pair")
        route = pair[0].strip()
        checked = check(route, pair[1])
        if found.setdefault(route, checked) != checked:
            raise ValueError(f"{route!r} is given two {whats}, {found[route]} and {checked}; "
                             "give it one")
    return tuple(found.items())
