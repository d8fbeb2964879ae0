"""A raw page keeps each record's JSON text; it decodes exactly as ``json.loads`` does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from failopen.rai._base import decode_page
from failopen.rai.exceptions import InvalidResponse, RaiTransportError

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
    b'{"sessions":[{"a":1} {"b":2}]}', b"[]", b'{"sessions" [1]}',
])  # fmt: skip
def test_what_json_loads_refuses_is_refused(content: bytes) -> None:
    with pytest.raises(InvalidResponse):
        decode_page(content, "sessions")


@pytest.mark.parametrize("content", [b'{"sessions":[{"a":1}', b'{"sessions":[{"a":"x}'])
def test_a_body_that_ends_before_its_json_is_a_cut_off_answer(content: bytes) -> None:
    # Retried by the client like any cut-off answer (test_rai_cut_and_connect.py).
    with pytest.raises(RaiTransportError) as info:
        decode_page(content, "sessions")
    assert info.value.code == "incomplete_answer"


def test_a_bom_or_another_encoding_falls_back_to_json_loads() -> None:
    body = {"sessions": [{"a": "é"}]}
    for content in (b"\xef\xbb\xbf" + json.dumps(body).encode(), json.dumps(body).encode("utf-16")):
        assert decode_page(content, "sessions").items == [{"a": "é"}]


def test_a_slim_page_keeps_every_record_whole_in_its_text() -> None:
    # What a JSONL export holds in memory: each record's text, and only the fields it sorts and
    # routes by; the text still has every field, unknown and nested ones included.
    records = [{"session_id": f"s{i}", "session_created": "2024-05-01T00:00:00Z",
                "verify": {"session_id": "nested"}, "future": [i]} for i in range(3)]  # fmt: skip
    content = json.dumps({"sessions": records}, separators=(",", ":")).encode()
    page = decode_page(content, "sessions", keep=("session_id", "session_created", "cohort_id"))
    assert page.items == [{"session_id": f"s{i}", "session_created": "2024-05-01T00:00:00Z"}
                          for i in range(3)]  # fmt: skip
    assert page.lines is not None
    assert [json.loads(line) for line in page.lines] == records


def test_a_slim_page_without_lines_keeps_whole_records() -> None:
    # Pretty-printed: there is no text to copy, so the records must be encoded again, whole.
    records = [{"session_id": "s", "future": {"a": 1}}]
    content = json.dumps({"sessions": records}, indent=2).encode()
    page = decode_page(content, "sessions", keep=("session_id",))
    assert page.items == records and page.lines is None


@pytest.mark.parametrize("content", [b'{"sessions":[1]}', b'{"sessions":[["session_id"]]}'])
def test_a_slim_page_still_refuses_a_record_that_is_no_object(content: bytes) -> None:
    with pytest.raises(InvalidResponse):
        decode_page(content, "sessions", keep=("session_id",))
