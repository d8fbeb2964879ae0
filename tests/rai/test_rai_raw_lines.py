"""A raw page keeps each record's JSON text; it decodes exactly as ``json.loads`` does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from failopen.rai._base import decode_page
from failopen.rai.exceptions import InvalidResponse

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(), inner, max_size=3), max_leaves=8)  # fmt: skip
records = st.lists(st.dictionaries(st.text(), values, max_size=4), max_size=5)


@settings(max_examples=300, deadline=None)
@given(records=records, extra=st.dictionaries(st.text(), values, max_size=2),
       separators=st.sampled_from([(",", ":"), (", ", ": ")]), ascii=st.booleans())  # fmt: skip
def test_lines_are_the_records_text_and_decode_like_json_loads(
    records: list[dict[str, Any]], extra: dict[str, Any], separators: tuple[str, str],
    ascii: bool,
) -> None:  # fmt: skip
    body = {**extra, "sessions": records, "next_page_token": "t"}
    content = json.dumps(body, separators=separators, ensure_ascii=ascii).encode()
    page = decode_page(content, "sessions")
    assert page.items == json.loads(content)["sessions"]
    assert page.lines is not None
    assert [json.loads(line) for line in page.lines] == page.items
    assert all("\n" not in line and "\r" not in line for line in page.lines)


def test_pretty_printed_answers_decode_but_give_no_lines() -> None:
    content = json.dumps({"sessions": [{"a": 1}], "next_page_token": ""}, indent=2).encode()
    page = decode_page(content, "sessions")
    assert page.items == [{"a": 1}] and page.lines is None


@pytest.mark.parametrize("content", [
    b'{"sessions":[{"a":1},]}', b'{"sessions":[{"a":1}],}', b'{"sessions":[{"a":1}]} x',
    b'{"sessions":[{"a":1}', b'{"sessions":[{"a":1} {"b":2}]}', b"[]", b'{"sessions" [1]}',
])  # fmt: skip
def test_what_json_loads_refuses_is_refused(content: bytes) -> None:
    with pytest.raises(InvalidResponse):
        decode_page(content, "sessions")


def test_a_bom_or_another_encoding_falls_back_to_json_loads() -> None:
    body = {"sessions": [{"a": "é"}]}
    for content in (b"\xef\xbb\xbf" + json.dumps(body).encode(), json.dumps(body).encode("utf-16")):
        assert decode_page(content, "sessions").items == [{"a": "é"}]
