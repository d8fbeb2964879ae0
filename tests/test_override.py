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
