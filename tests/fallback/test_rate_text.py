"""FAILOPEN_OUTAGE_RATE read by failopen itself (issue 31, item 11): every rate ``limits`` read
before is read the same (a site that started still starts, and counts as before; a fleet's
Redis keys and windows, which ``limits`` still counts, are the same), and what is refused says
what to write."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from failopen.config import Config
from failopen.exceptions import ConfigError
from failopen.fallback.rate_text import Rate, parse_rate

limits = pytest.importorskip("limits")


def _limits_reading(text: str) -> Rate | None:
    """What the check before issue 31 accepted (one rate, at least 1), as (amount, seconds)."""
    try:
        items = limits.parse_many(text)
    except ValueError:
        return None
    if len(items) != 1 or items[0].amount < 1:
        return None
    return Rate(items[0].amount, items[0].get_expiry())


def _ours(text: str) -> Rate | None:
    try:
        return parse_rate(text)
    except ValueError:
        return None


DOCUMENTED = ["20/minute", "1/second", "100/hour", "1000/day", "20 per minute", "20/minutes",
              "20 PER Minute", " 20 / minute ", "100/5 minutes", "100 per 5 minutes",
              "5/2hours", "020/minute", "3/month", "3 per year", "20\u00a0per\u00a0minute",
              "20perminute"]


@pytest.mark.parametrize("text", DOCUMENTED)
def test_every_rate_limits_read_is_read_the_same(text: str) -> None:
    assert _ours(text) is not None and _ours(text) == _limits_reading(text)
    assert Config(outage_rate=text).outage_rate == text


@pytest.mark.parametrize(("text", "says"), [
    ("20/minute;5/second", "not one rate"), ("20/minute, 5/second", "not one rate"),
    ("0/minute", "admits nobody"), ("20/fortnight", "not one rate"), ("20", "not one rate"),
    ("minute", "not one rate"), ("20/", "not one rate"), ("-1/minute", "not one rate"),
    ("20/0 minutes", "window of no time"), ("２０/minute", "not one rate"),
    ("20 / ſecond", "not one rate"), ("20/minute\x00", "not one rate"),
    # Seconds no float holds: the count failed on every request, each admitted uncounted.
    ("1/" + "9" * 400 + " years", "more than 100 years"), ("1/101 years", "more than 100 years"),
])
def test_what_is_refused_stops_start_up_saying_what_to_write(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=f"FAILOPEN_OUTAGE_RATE: .*{says}") as raised:
        Config(outage_rate=text)
    assert "20/minute" in str(raised.value) or "closed" in str(raised.value)


_PIECES = st.sampled_from(["0", "1", "20", "05", "/", " ", "per", "PER", "\u00a0", "\t", "\n",
                           "second", "minutes", "Hour", "days", "month", "years", "fortnight",
                           ";", ",", "|", ":", "s", "x", "-", "\u017f", "\u212a"])


@settings(max_examples=3000, deadline=None)
@given(st.lists(_PIECES, max_size=7).map("".join))
def test_the_grammar_is_limits_grammar(text: str) -> None:
    ours, theirs = _ours(text), _limits_reading(text)
    if theirs is not None and ours is None and theirs.seconds > 100 * 360 * 86_400:
        with pytest.raises(ValueError, match="more than 100 years"):
            parse_rate(text)  # the other rate limits read that failopen refuses
    elif theirs is not None and ours is None:
        # The one rate limits read that failopen refuses: a window of 0 units, which limits
        # took for one unit.
        assert limits.parse(text).multiples == 1
        with pytest.raises(ValueError, match="window of no time"):
            parse_rate(text)
    else:
        assert ours == theirs, text
