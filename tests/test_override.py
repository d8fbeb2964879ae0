"""What an override accepts about who placed it and why, whichever way it arrives.

``set_by`` and ``reason`` are shown on the flag endpoint, in ``failopen override status`` and in
the log: a stored record (a file or Redis key a hand wrote) must not put a control character on
an operator's terminal, nor an unbounded text on every page that shows the override.
"""

from __future__ import annotations

from typing import Any

import pytest

from failopen.exceptions import StoreError
from failopen.stores.override import MAX_REASON, Override

BASE: dict[str, Any] = {"enforce": True, "reason": "incident 42", "set_at": 1000.0}


@pytest.mark.parametrize("set_by", [7, 1.5, b"cli", ["cli"], {"who": "cli"}, True])
def test_set_by_that_is_not_text_is_a_store_error(set_by: object) -> None:
    with pytest.raises(StoreError, match="set_by"):
        Override(**BASE, set_by=set_by)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="set_by"):
        Override.from_json({**BASE, "set_by": set_by})


@pytest.mark.parametrize("set_by", ["cli\n", "ops\x1b[31m", "a\x00b", "x\u2028y", "tab\there"])
def test_set_by_with_a_control_character_is_a_store_error(set_by: str) -> None:
    with pytest.raises(StoreError, match="printable"):
        Override(**BASE, set_by=set_by)
    with pytest.raises(StoreError, match="printable"):
        Override.from_json({**BASE, "set_by": set_by})


@pytest.mark.parametrize("set_by", [None, "cli", "django:42", "admin-token", ""])
def test_printable_set_by_is_kept(set_by: str | None) -> None:
    assert Override(**BASE, set_by=set_by).set_by == set_by
    assert Override.from_json({**BASE, "set_by": set_by}).set_by == set_by


def test_reason_is_cut_at_500_characters() -> None:
    assert MAX_REASON == 500
    exact = "r" * 500
    assert Override(**{**BASE, "reason": exact}).reason == exact
    long = "0123456789" * 60
    kept = Override.from_json({**BASE, "reason": long}).reason
    assert kept == long[:500]
    assert Override.from_json(Override(**{**BASE, "reason": long}).to_json()).reason == kept


def test_set_by_is_cut_at_200_characters() -> None:
    exact = "s" * 200
    assert Override(**BASE, set_by=exact).set_by == exact
    long = "django:" + "9" * 400
    kept = Override(**BASE, set_by=long).set_by
    assert kept == long[:200]
    assert Override.from_json({**BASE, "set_by": long}).set_by == kept


# -- what each refusal says: an operator reading a corrupt record must know which field --------

@pytest.mark.parametrize(("fields", "message"), [
    ({"enforce": "yes"}, "override 'enforce' must be true or false, got str"),
    ({"reason": 42}, "override 'reason' must be a string"),
    ({"set_by": "a\nb"}, "override 'set_by' must be a printable string"),
    ({"set_at": "1000"}, "override 'set_at' must be seconds since the epoch, got str"),
    ({"expires_at": [1]}, "override 'expires_at' must be seconds since the epoch, got list"),
    ({"set_at": 1e300}, "override 'set_at' must be a finite time in 1970..9999, got 1e+300"),
    ({"set_at": -1.5}, "override 'set_at' must be a finite time in 1970..9999, got -1.5"),
    ({"set_at": 10**400},
     "override 'set_at' must be a finite time in 1970..9999, got an integer out of range"),
    ({"expires_at": 999.0}, "override 'expires_at' is before its 'set_at'"),
])
def test_each_refusal_names_the_field_and_what_was_wrong(
    fields: dict[str, Any], message: str,
) -> None:
    with pytest.raises(StoreError) as raised:
        Override(**{**BASE, **fields})
    assert str(raised.value) == message


def test_a_force_off_without_expiry_or_too_long_says_what_to_do() -> None:
    with pytest.raises(StoreError) as endless:
        Override(enforce=False, reason="outage", set_at=1000.0)
    assert str(endless.value).startswith("an override forcing enforcement off has no expiry; ")
    assert str(endless.value).endswith("7 days (604800 s): place it again with a ttl")
    with pytest.raises(StoreError) as too_long:
        Override(enforce=False, reason="outage", set_at=1000.0, expires_at=1000.0 + 8 * 86400)
    assert str(too_long.value) == (
        "an override forcing enforcement off lasts longer than the maximum of 7 days "
        "(604800 s): place it again with a shorter ttl")


def test_a_stored_record_that_is_not_an_override_says_so() -> None:
    with pytest.raises(StoreError) as not_object:
        Override.from_json(["enforce", True])
    assert str(not_object.value) == "stored override is not an object"
    with pytest.raises(StoreError) as missing:
        Override.from_json({"enforce": True})
    assert str(missing.value) == "stored override is malformed (missing 'set_at')"


# -- the edges of what is accepted ----------------------------------------------------------

def test_the_last_second_a_datetime_can_show_is_accepted_and_the_next_is_not() -> None:
    last = 253402300799  # 9999-12-31T23:59:59Z
    assert Override(**{**BASE, "set_at": last}).set_at == float(last)
    with pytest.raises(StoreError):
        Override(**{**BASE, "set_at": last + 1})
    assert Override(**{**BASE, "set_at": 0}).set_at == 0.0


def test_an_override_that_ends_when_it_begins_is_readable_and_already_over() -> None:
    # A ttl of 0 placed, or a record read back: a lapsed override, never a corrupt one.
    lapsed = Override(**{**BASE, "expires_at": 1000.0})
    assert lapsed.expired(1000.0)
    off = Override(enforce=False, reason="outage", set_at=1000.0, expires_at=1000.0)
    assert off.expired(1000.0)


def test_a_force_off_of_exactly_seven_days_plus_rounding_is_accepted() -> None:
    # set_at + ttl is a float sum: a stored record may exceed the maximum by up to a second.
    week = 7 * 86400.0
    assert Override(enforce=False, reason="o", set_at=1000.0, expires_at=1000.0 + week + 1.0)
    with pytest.raises(StoreError):
        Override(enforce=False, reason="o", set_at=1000.0, expires_at=1000.0 + week + 1.01)


def test_a_record_without_a_reason_reads_as_an_empty_one() -> None:
    assert Override.from_json({"enforce": True, "set_at": 1000.0}).reason == ""


def test_the_stored_form_keeps_who_placed_it_and_omits_it_when_unknown() -> None:
    placed = Override(**BASE, set_by="django:42")
    assert placed.to_json()["set_by"] == "django:42"
    assert Override.from_json(placed.to_json()) == placed
    anonymous = Override(**BASE)
    assert "set_by" not in anonymous.to_json()  # an older reader sees the fields it knows
    assert Override.from_json(anonymous.to_json()) == anonymous
