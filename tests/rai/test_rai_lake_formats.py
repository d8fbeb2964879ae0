"""The lake formats on the format seam: jsonl.gz (a gzip member per page) and Parquet (typed by
the shipped schema). Every record is read back once, by gzip, pyarrow and DuckDB; nothing the
service sent is dropped, coerced or shifted: what a typed column cannot hold is in extra_fields."""

from __future__ import annotations

import errno
import gzip
import io
import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from failopen.rai import _parquet
from failopen.rai._formats import FORMATS, JsonlGz, Parquet

pa = pytest.importorskip("pyarrow", reason='pyarrow is not installed: pip install -e ".[parquet]"')
pq = pytest.importorskip("pyarrow.parquet")
try:
    import duckdb
except ImportError:  # in [test]; a narrower install skips these checks, saying so
    duckdb = None
needs_duckdb = pytest.mark.skipif(
    duckdb is None, reason="duckdb is not installed: pip install duckdb"
)

UTC = timezone.utc

SESSION: dict[str, Any] = {
    "session_id": "00123",
    "session_created": "2024-05-01T10:00:00.123+05:30",
    "public_key": "pk_live_ünïcödé",
    "cohort_id": "0042",
    "anomaly_id": 70001,
    "original_ticket_id": "000777",
    "attack_label": "retroactive_attack",
    "client_theme": "default",
    "render_type": "browser",
    "risk_score": 0.91,
    "risk_band": "high",
    "risk_category": "bot",
    "custom_risk_score": 37.5,
    "suspicion_flags": ["automation_framework", "ip_reputation"],
    "tagged_by_telltale": True,
    "telltale_names": ["headless ✓", "日本語", "\u202eevil"],
    "verify": {"security_level": "enhanced", "solved": True, "verified": False},
    "schema_version": "rai-v1",
}
COHORT: dict[str, Any] = {
    "cohort_id": "0042",
    "public_key": "pk_live_a",
    "customer_name": "Acme 🛒",
    "cohort_window_start": "2024-05-01T00:00:00Z",
    "cohort_window_end": "2024-05-01T06:00:00-02:00",
    "created_at": "2024-05-03T12:30:00.5Z",
    "session_count": 120,
    "tagged_session_count": 40,
    "anomaly_ids": [70001, 70002],
    "telltale_ids": [],
    "telltale_names": [],
    "telltale_owner_categories": ["threat_research"],
    "ticketing_ticket_id": "880001",
    "ticketing_ticket_url": "https://support.example.com/tickets/880001",
    "schema_version": "rai-v1",
}
# The spec's types, field by field (sections 2.1-2.3), as the Parquet files must carry them.
TS = pa.timestamp("us", tz="UTC")
STRINGS = pa.list_(pa.string())
EXPECTED = {
    "cohorts": [
        ("cohort_id", pa.string()), ("public_key", pa.string()), ("customer_name", pa.string()),
        ("cohort_window_start", TS), ("cohort_window_end", TS), ("created_at", TS),
        ("session_count", pa.int64()), ("tagged_session_count", pa.int64()),
        ("anomaly_ids", pa.list_(pa.int64())), ("telltale_ids", pa.list_(pa.int64())),
        ("telltale_names", STRINGS), ("telltale_owner_categories", STRINGS),
        ("ticketing_ticket_id", pa.string()), ("ticketing_ticket_url", pa.string()),
        ("schema_version", pa.string()), ("extra_fields", pa.string()),
    ],
    "sessions": [
        ("session_id", pa.string()), ("session_created", TS), ("public_key", pa.string()),
        ("cohort_id", pa.string()), ("anomaly_id", pa.int64()),
        ("original_ticket_id", pa.string()), ("attack_label", pa.string()),
        ("client_theme", pa.string()), ("render_type", pa.string()),
        ("risk_score", pa.float64()), ("risk_band", pa.string()), ("risk_category", pa.string()),
        ("custom_risk_score", pa.float64()), ("suspicion_flags", STRINGS),
        ("tagged_by_telltale", pa.bool_()), ("telltale_names", STRINGS),
        ("verify", pa.struct([("security_level", pa.string()), ("solved", pa.bool_()),
                              ("verified", pa.bool_())])),
        ("schema_version", pa.string()), ("extra_fields", pa.string()),
    ],
}  # fmt: skip


def _write(f: IO[bytes], data: bytes) -> object:
    return f.write(data)


def _line(record: dict[str, Any]) -> str:
    """The record as the service sends it: UTF-8, a lone surrogate as its \\u escape."""
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode()
    except UnicodeEncodeError:
        text = json.dumps(record, separators=(",", ":"))
    return text


def spools(tmp_path: Path, fmt: Any, kind: str, pages: list[list[dict[str, Any]]],
           as_lines: bool = True) -> list[str]:  # fmt: skip
    """One spool per page, as a sync's fetching threads fill them (lines as received)."""
    paths = []
    for number, page in enumerate(pages):
        lines = [_line(r) for r in page]
        path = tmp_path / f"spool-{kind}-{number}.part"
        path.write_bytes(fmt.encode(kind, page, lines if as_lines else None))
        paths.append(str(path))
    return paths


def parquet_rows(tmp_path: Path, kind: str, pages: list[list[dict[str, Any]]]) -> list[Any]:
    out = io.BytesIO()
    Parquet().finish(kind, spools(tmp_path, Parquet(), kind, pages), out, _write)
    return pq.read_table(io.BytesIO(out.getvalue())).to_pylist()  # type: ignore[no-any-return]


def test_the_registry_has_the_lake_formats_on_the_seam() -> None:
    assert {name: (f.suffix, f.keeps_lines) for name, f in FORMATS.items()} == {
        "jsonl": (".jsonl", True), "jsonl.gz": (".jsonl.gz", True), "csv": (".csv", False),
        "parquet": (".parquet", True),
    }  # fmt: skip
    for fmt in FORMATS.values():
        fmt.require()  # everything is installed here


@pytest.mark.parametrize("kind", ["cohorts", "sessions"])
def test_the_arrow_schema_is_the_spec_field_by_field(kind: str) -> None:
    schema = _parquet.arrow_schema(kind)
    assert [(f.name, f.type) for f in schema] == EXPECTED[kind]
    assert all(f.nullable for f in schema)  # a record that lacks a field is still kept
    assert schema.metadata[_parquet.METADATA_KEY] == b"1"


# -- jsonl.gz ---------------------------------------------------------------------------------


def test_jsonl_gz_pages_concatenate_into_one_gzip_file_every_reader_reads(tmp_path: Path) -> None:
    fmt = JsonlGz()
    pages = [[{**SESSION, "session_id": f"s{p}-{i}"} for i in range(3)] for p in range(4)]
    paths = spools(tmp_path, fmt, "sessions", pages[:2]) + spools(
        tmp_path / "..", fmt, "sessions", pages[2:], as_lines=False
    )
    paths.append(str(tmp_path / "empty.part"))
    Path(paths[-1]).write_bytes(fmt.encode("sessions", [], []))  # an empty page adds nothing
    target = tmp_path / "sessions.jsonl.gz"
    with open(target, "wb") as out:
        fmt.finish("sessions", paths, out, _write)
    expected = [r["session_id"] for page in pages for r in page]
    text = gzip.decompress(target.read_bytes()).decode()
    assert [json.loads(line)["session_id"] for line in text.splitlines()] == expected
    assert json.loads(text.splitlines()[0]) == {**SESSION, "session_id": "s0-0"}
    if shutil.which("gzip"):
        shown = subprocess.run(["gzip", "-dc", str(target)], capture_output=True, check=True)
        assert shown.stdout.decode() == text
    import pyarrow.json as pj

    with pa.input_stream(str(target), compression="gzip") as stream:
        table = pj.read_json(stream)
    assert table.column("session_id").to_pylist() == expected
    if duckdb is not None:
        rows = duckdb.sql(f"select session_id from read_json_auto('{target}')").fetchall()
        assert [r[0] for r in rows] == expected


def test_jsonl_gz_is_the_same_bytes_for_the_same_page() -> None:
    page = [SESSION]
    assert JsonlGz().encode("sessions", page, None) == JsonlGz().encode("sessions", page, None)


# -- Parquet: round trips ---------------------------------------------------------------------


def test_every_session_field_round_trips_with_the_spec_types(tmp_path: Path) -> None:
    null_verify = {**SESSION, "session_id": "2", "verify": None, "custom_risk_score": None}
    empty = {**SESSION, "session_id": "3", "suspicion_flags": [], "telltale_names": []}
    rows = parquet_rows(tmp_path, "sessions", [[SESSION, null_verify], [empty]])
    first = rows[0]
    # 10:00:00.123 at +05:30 is 04:30:00.123 UTC: the instant, not the wall time.
    assert first["session_created"] == datetime(2024, 5, 1, 4, 30, 0, 123000, tzinfo=UTC)
    for name, value in SESSION.items():
        if name != "session_created":
            assert first[name] == value, name
    assert first["session_id"] == "00123" and first["original_ticket_id"] == "000777"
    assert first["extra_fields"] is None
    assert rows[1]["verify"] is None and rows[1]["custom_risk_score"] is None
    assert rows[1]["extra_fields"] is None
    assert rows[2]["suspicion_flags"] == [] and rows[2]["telltale_names"] == []


def test_every_cohort_field_round_trips(tmp_path: Path) -> None:
    (row,) = parquet_rows(tmp_path, "cohorts", [[COHORT]])
    assert row["cohort_window_end"] == datetime(2024, 5, 1, 8, 0, tzinfo=UTC)
    assert row["created_at"] == datetime(2024, 5, 3, 12, 30, 0, 500000, tzinfo=UTC)
    stamps = {"cohort_window_start", "cohort_window_end", "created_at"}
    assert {k: v for k, v in row.items() if k not in stamps} == {
        **{k: v for k, v in COHORT.items() if k not in stamps}, "extra_fields": None
    }


def test_a_field_the_schema_does_not_know_is_kept(tmp_path: Path) -> None:
    grown = {**SESSION, "device": {"os": "ios", "n": [1, 2.5]}, "geo_cc": "DE"}
    missing = {"session_id": "bare", "vendor_note": "☃"}  # every known field absent
    rows = parquet_rows(tmp_path, "sessions", [[grown, missing]])
    assert json.loads(rows[0]["extra_fields"]) == {"device": {"os": "ios", "n": [1, 2.5]},
                                                   "geo_cc": "DE"}  # fmt: skip
    assert rows[0]["verify"] == SESSION["verify"]
    assert rows[1]["session_id"] == "bare" and rows[1]["risk_score"] is None
    assert json.loads(rows[1]["extra_fields"]) == {"vendor_note": "☃"}


# A value the column cannot hold exactly: null there (or cut to microseconds), kept in extra_fields.
ODD = [
    ("anomaly_id", "70001"), ("anomaly_id", 1.5), ("anomaly_id", True), ("anomaly_id", 1 << 63),
    ("risk_score", True), ("risk_score", "0.9"), ("custom_risk_score", (1 << 53) + 1),
    ("tagged_by_telltale", 1),
    ("session_id", 123), ("session_id", "\ud800"), ("suspicion_flags", ["a", 1]),
    ("suspicion_flags", ["a", None]), ("suspicion_flags", "a"), ("telltale_names", {"a": 1}),
    ("verify", "solved"), ("verify", ["solved"]),
    ("session_created", "yesterday"), ("session_created", "2024-05-01T10:00:00"),
    ("session_created", "2024-02-30T10:00:00Z"), ("session_created", 1714557600),
    ("session_created", "2024-05-01T10:00:00+24:00"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value"), ODD)
def test_a_value_without_the_spec_type_is_kept_as_received(
    tmp_path: Path, name: str, value: Any
) -> None:
    odd = {**SESSION, "session_id": "odd", name: value}
    (alone,) = parquet_rows(tmp_path, "sessions", [[odd]])
    rows = parquet_rows(tmp_path, "sessions", [[SESSION, odd, SESSION]])
    assert alone == rows[1] and alone[name] is None
    assert json.loads(alone["extra_fields"]) == {name: value}
    assert rows[0] == rows[2] and rows[0]["extra_fields"] is None  # its neighbours untouched


def test_a_verify_with_a_field_of_its_own_keeps_its_struct_and_the_whole_object(
    tmp_path: Path,
) -> None:
    grown = {"security_level": "default", "solved": True, "verified": True, "score": 3}
    odd = {"solved": "yes", "verified": True}
    # Each alone in its file: one odd value sends a whole batch down the careful path.
    (first,) = parquet_rows(tmp_path, "sessions", [[{**SESSION, "verify": grown}]])
    (second,) = parquet_rows(tmp_path, "sessions", [[{**SESSION, "verify": odd}]])
    assert first["verify"] == {"security_level": "default", "solved": True, "verified": True}
    assert json.loads(first["extra_fields"]) == {"verify": grown}
    assert second["verify"] == {"security_level": None, "solved": None, "verified": True}
    assert json.loads(second["extra_fields"]) == {"verify": odd}


@pytest.mark.parametrize(
    ("text", "instant", "kept"),
    [
        ("2024-05-01T10:00:00Z", datetime(2024, 5, 1, 10, tzinfo=UTC), False),
        ("2024-05-01t10:00:00z", datetime(2024, 5, 1, 10, tzinfo=UTC), False),
        ("2024-05-01 10:00:00-07:00", datetime(2024, 5, 1, 17, tzinfo=UTC), False),
        ("2024-05-01T10:00:00.000000999Z", datetime(2024, 5, 1, 10, tzinfo=UTC), True),
        ("2024-05-01T10:00:00.1234569+00:00", datetime(2024, 5, 1, 10, 0, 0, 123456, UTC), True),
        ("2024-05-01T10:00:00.1234560Z", datetime(2024, 5, 1, 10, 0, 0, 123456, UTC), False),
        ("2300-01-01T00:00:00Z", datetime(2300, 1, 1, tzinfo=UTC), False),
        ("0001-01-01T00:00:00+00:00", datetime(1, 1, 1, tzinfo=UTC), False),
    ],
)
def test_timestamps_read_as_their_instant_whichever_path_reads_them(
    tmp_path: Path, text: str, instant: datetime, kept: bool
) -> None:
    """Alone (Arrow's cast when it can) and beside a malformed one (one at a time in Python):
    the same instant, and the text kept when microseconds cannot hold it."""
    alone = {**SESSION, "session_created": text}
    beside = {**SESSION, "session_id": "bad", "session_created": "2024-13-01T00:00:00Z"}
    for page in ([alone], [alone, beside]):
        row = parquet_rows(tmp_path, "sessions", [page])[0]
        assert row["session_created"] == instant
        expected = json.dumps({"session_created": text}) if kept else None
        assert (json.loads(row["extra_fields"]) if row["extra_fields"] else None) == (
            json.loads(expected) if expected else None
        )


# -- Parquet: the file ------------------------------------------------------------------------


def test_row_groups_are_bounded_and_records_keep_their_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_parquet, "ROWS_PER_GROUP", 4)
    monkeypatch.setattr(_parquet, "ROWS_PER_BATCH", 2)
    pages = [[{**SESSION, "session_id": f"{p}-{i}"} for i in range(3)] for p in range(3)]
    out = io.BytesIO()
    Parquet().finish("sessions", spools(tmp_path, Parquet(), "sessions", pages), out, _write)
    meta = pq.ParquetFile(io.BytesIO(out.getvalue())).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [4, 4, 1]
    assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {"ZSTD"}
    table = pq.read_table(io.BytesIO(out.getvalue()))
    assert table.column("session_id").to_pylist() == [r["session_id"] for p in pages for r in p]
    assert table.schema.metadata[b"failopen.schema_version"] == b"1"


def test_every_byte_goes_through_the_write_seam_and_its_failure_is_raised(tmp_path: Path) -> None:
    paths = spools(tmp_path, Parquet(), "sessions", [[SESSION] * 5])
    seen: list[bytes] = []

    def record(f: IO[bytes], data: bytes) -> object:
        seen.append(data)
        return f.write(data)

    out = io.BytesIO()
    Parquet().finish("sessions", paths, out, record)
    assert b"".join(seen) == out.getvalue() and len(seen) > 1

    def full(f: IO[bytes], data: bytes) -> object:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        Parquet().finish("sessions", paths, io.BytesIO(), full)


@pytest.mark.parametrize("line", [b"[1,2]", b'{"session_id":"b"} {"session_id":"c"}', b"{"])
def test_a_spool_line_that_is_not_a_record_fails_the_file_naming_it(
    tmp_path: Path, line: bytes
) -> None:
    path = tmp_path / "spool.part"
    path.write_bytes(b'{"session_id":"a"}\n' + line + b"\n")
    with pytest.raises(ValueError, match=r"spool.part, line 2: not a JSON record"):
        Parquet().finish("sessions", [str(path)], io.BytesIO(), _write)


def test_no_records_is_a_valid_empty_file(tmp_path: Path) -> None:
    out = io.BytesIO()
    Parquet().finish("cohorts", spools(tmp_path, Parquet(), "cohorts", [[]]), out, _write)
    table = pq.read_table(io.BytesIO(out.getvalue()))
    assert table.num_rows == 0 and table.schema.names[0] == "cohort_id"


@needs_duckdb
def test_duckdb_reads_every_record_once_with_the_spec_types(tmp_path: Path) -> None:
    pages = [[{**SESSION, "session_id": f"{p:03d}{i}"} for i in range(50)] for p in range(3)]
    pages[1][7] = {**pages[1][7], "verify": None, "new_field": 1}
    target = tmp_path / "sessions.parquet"
    with open(target, "wb") as out:
        Parquet().finish("sessions", spools(tmp_path, Parquet(), "sessions", pages), out, _write)
    con = duckdb.connect()
    ids = [r[0] for r in con.sql(f"select session_id from '{target}'").fetchall()]
    assert sorted(ids) == sorted(r["session_id"] for p in pages for r in p) and len(set(ids)) == 150
    types = dict(con.sql(f"describe select * from '{target}'").fetchall()[i][:2] for i in range(19))
    assert types["session_id"] == "VARCHAR" and types["anomaly_id"] == "BIGINT"
    assert types["session_created"] == "TIMESTAMP WITH TIME ZONE"
    assert types["verify"] == "STRUCT(security_level VARCHAR, solved BOOLEAN, verified BOOLEAN)"
    assert types["suspicion_flags"] == "VARCHAR[]" and types["risk_score"] == "DOUBLE"
    con.sql("set timezone = 'UTC'")
    (row,) = con.sql(
        f"select session_created::varchar, verify.solved, extra_fields->>'new_field' "
        f"from '{target}' where session_id = '0017'"
    ).fetchall()
    assert row == ("2024-05-01 04:30:00.123+00", None, "1")


def test_without_pyarrow_the_error_names_the_extra(tmp_path: Path) -> None:
    spool = tmp_path / "s.part"
    spool.write_bytes(b'{"session_id":"a"}\n')
    code = (
        "import sys, io; sys.modules['pyarrow'] = None\n"
        "from failopen.rai._formats import FORMATS\n"
        "from failopen.rai import _parquet\n"
        "parquet = FORMATS['parquet']\n"
        "for call in (_parquet.require_pyarrow, parquet.require, lambda: parquet.finish("
        f"'sessions', [{str(spool)!r}], io.BytesIO(), lambda f, b: f.write(b))):\n"
        "    try:\n        call()\n    except ImportError as exc:\n        print(exc)\n"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.splitlines()  # fmt: skip
    assert shown == ['Parquet output needs pyarrow: pip install "failopen[parquet]"'] * 3


# -- Parquet: nothing lost, whatever the service sends -----------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5)
    | st.sampled_from(["2024-05-01T10:00:00+05:30", "2024-05-01T10:00:00.1234567Z", "00123"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6,
)  # fmt: skip
_STAMPS = st.sampled_from([
    "2024-05-01T10:00:00Z", "2024-05-01T10:00:00.5+05:30", "2024-05-01t10:00:00z",
    "2024-05-01T10:00:00.123456789-08:00", "2024-05-01 23:59:59.999999+00:00",
    "2024-02-30T00:00:00Z", "2024-05-01T10:00:00", "9999-12-31T23:59:59Z",
])  # fmt: skip


def _valid(arrow_type: Any) -> st.SearchStrategy[Any]:
    """Values of the column's own type (timestamps: texts, some malformed), or null."""
    types = pa.types
    if types.is_struct(arrow_type):
        names = [arrow_type.field(i).name for i in range(arrow_type.num_fields)]
        return st.none() | st.fixed_dictionaries(
            {}, optional={n: _valid(arrow_type.field(n).type) for n in names}
        )
    if types.is_list(arrow_type):
        return st.none() | st.lists(_valid(arrow_type.value_type).filter(lambda v: v is not None),
                                    max_size=3)  # fmt: skip
    own = (_STAMPS if types.is_timestamp(arrow_type) else st.text(max_size=6)
           if types.is_string(arrow_type) else st.integers(-(1 << 63), (1 << 63) - 1)
           if types.is_int64(arrow_type) else st.booleans() if types.is_boolean(arrow_type)
           else st.floats(allow_nan=False, allow_infinity=False)
           | st.integers(-(1 << 53), 1 << 53))  # fmt: skip
    return st.none() | own


def _records(kind: str, odd: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Records of the spec's shape; with ``odd``, any JSON in any field and fields of its own."""
    schema = _parquet.arrow_schema(kind)
    known = {
        f.name: st.just(_ABSENT) | _valid(f.type) | (_json if odd else st.nothing())
        for f in list(schema)[:-1]
    }
    names = st.text(min_size=1, max_size=4).filter(lambda k: k not in known)
    new = st.dictionaries(names, _json, max_size=2 if odd else 0)
    return st.tuples(st.fixed_dictionaries(known), new).map(
        lambda pair: {**{k: v for k, v in pair[0].items() if v is not _ABSENT}, **pair[1]}
    )


_ABSENT = object()


@pytest.mark.parametrize("kind", ["cohorts", "sessions"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_typed_columns_and_extra_fields_give_back_every_record(kind: str, data: Any) -> None:
    """Whatever a record holds, its row gives it back: each non-null typed cell is the value
    (a timestamp: its instant), and extra_fields holds the rest exactly as received. pyarrow's
    reader (tried first) and the decoding in Python give the same rows."""
    from failopen.rai._arguments import parse_rfc3339

    odd = data.draw(st.booleans())
    records = data.draw(st.lists(_records(kind, odd), min_size=1, max_size=6))
    lines = [_line(r).encode() + b"\n" for r in records]
    where = [("spool", n) for n in range(1, len(lines) + 1)]
    batch = _parquet._batch(kind, lines, where)
    assert batch.equals(_parquet.record_batch(kind, _parquet._decode(lines, where)))
    schema = _parquet.arrow_schema(kind)
    for record, row in zip(records, batch.to_pylist(), strict=True):
        extra = json.loads(row["extra_fields"]) if row["extra_fields"] is not None else {}
        for field in list(schema)[:-1]:
            name, cell = field.name, row[field.name]
            if name in extra:
                assert extra[name] == record[name] and type(extra[name]) is type(record[name])
            elif pa.types.is_timestamp(field.type) and record.get(name) is not None:
                assert cell == parse_rfc3339(record[name]), name
            elif pa.types.is_struct(field.type) and record.get(name) is not None:
                assert {k: v for k, v in cell.items() if v is not None} == {
                    k: v for k, v in record[name].items() if v is not None
                }
            else:
                assert cell == record.get(name), name
                assert type(cell) in (type(record.get(name)), float), name
        unknown = {k: v for k, v in record.items() if k not in schema.names}
        assert {k: v for k, v in extra.items() if k not in schema.names} == unknown


def test_pyarrows_reader_takes_clean_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path is the one taken for records of the spec's shape (else the property test
    above would compare the careful path with itself)."""
    careful: list[int] = []
    monkeypatch.setattr(_parquet, "record_batch", lambda kind, records: careful.append(1))
    lines = [_line(SESSION).encode() + b"\n"] * 3
    assert _parquet._batch("sessions", lines, [("s", 1)] * 3).num_rows == 3 and not careful
