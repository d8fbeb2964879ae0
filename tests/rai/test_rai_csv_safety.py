"""CSV cells that a spreadsheet would run as a formula are written as text."""

from __future__ import annotations

import csv
import io

import pytest

from failopen.rai._output import CsvRows

DANGEROUS = ["=HYPERLINK(\"http://evil\")", "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)",
             "\tstart", "\rstart"]  # fmt: skip


def rows_of(records: list[dict[str, object]]) -> list[list[str]]:
    out = io.BytesIO()
    writer = CsvRows(out, ("a", "b"))
    writer.write(records)
    return list(csv.reader(io.StringIO(out.getvalue().decode(), newline="")))


@pytest.mark.parametrize("text", DANGEROUS)
def test_a_formula_like_text_cell_is_prefixed_with_an_apostrophe(text: str) -> None:
    rows = rows_of([{"a": text, "b": "fine"}])
    assert rows[1] == ["'" + text, "fine", ""]


def test_numbers_arrays_and_safe_text_are_unchanged() -> None:
    rows = rows_of([{"a": -0.5, "b": ["=x"]}, {"a": "a=b", "b": "'quoted"}])
    assert rows[1] == ["-0.5", '["=x"]', ""]
    assert rows[2] == ["a=b", "'quoted", ""]


def test_extra_fields_are_json_so_never_a_formula() -> None:
    rows = rows_of([{"a": "x", "b": "y", "=evil": "=1+1"}])
    assert rows[1][2].startswith("{")


def test_the_header_of_a_formula_like_column_name_is_safe_too() -> None:
    out = io.BytesIO()
    CsvRows(out, ("=a",))
    assert out.getvalue().decode().startswith("'=a,")
