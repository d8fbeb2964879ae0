"""Parquet files of cohorts and sessions, typed by the shipped schema (the only module that
imports pyarrow, and only when a Parquet file is written: ``pip install "failopen[parquet]"``).

The Arrow schema is derived from the JSON Schema files (``_schema.py``): strings stay strings (an
id "00123" stays "00123"), integers are int64, numbers float64, ``verify`` a struct, arrays lists,
timestamps ``timestamp("us", tz="UTC")`` holding the instant (the offset the service wrote is
not kept, the instant is). Every column is nullable: a record that lacks a field is still kept.

Nothing is dropped or changed silently. One more column, ``extra_fields`` (the name CSV uses),
holds a JSON object of what the typed columns cannot hold exactly: each field the schema does not
know, and each known field whose value does not have the spec's type (the column is then null;
a ``verify`` with a field of its own is kept whole there, its struct filled as far as it goes),
or a timestamp with digits past microseconds (the column holds it cut to microseconds). One
string column rather than a column per new field: every file a sync writes then has the same
columns, which pyarrow.dataset, DuckDB and Spark need to read a folder of files without merging
schemas (a dataset takes the first file's columns and would silently leave a later file's out).

pyarrow's own JSON reader is not used: it reads an offset-less "2024-05-01T10:00:00" as UTC,
truncates 1.5 to an int64, and one record it cannot parse fails the whole block.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
from collections.abc import Callable, Iterator
from typing import IO, Any

from failopen.rai._columns import column, stamps
from failopen.rai._output import ENCODER, EXTRA_COLUMN
from failopen.rai._schema import SCHEMA_VERSION, json_schema

__all__ = ["INSTALL", "ROWS_PER_GROUP", "METADATA_KEY", "require_pyarrow", "arrow_schema",
           "record_batch", "write_parquet"]  # fmt: skip

Write = Callable[[IO[bytes], bytes], object]

INSTALL = 'pip install "failopen[parquet]"'
#: Rows per row group: a reader skips whole groups by their statistics; the writer holds one.
ROWS_PER_GROUP = 65_536
#: Records decoded at a time: the Python objects of 4,096 sessions are about 8 MB.
ROWS_PER_BATCH = 4_096
#: The key of the file's metadata that carries the schema's version.
METADATA_KEY = b"failopen.schema_version"


def _modules() -> tuple[Any, Any, Any]:
    try:
        import pyarrow
        import pyarrow.compute
        import pyarrow.parquet
    except ImportError as exc:
        raise ImportError(f"Parquet output needs pyarrow: {INSTALL}") from exc
    return pyarrow, pyarrow.compute, pyarrow.parquet


def require_pyarrow() -> None:
    """An ImportError naming the extra when pyarrow is not installed (checked at start-up)."""
    _modules()


def _arrow_type(pa: Any, spec: dict[str, Any], defs: dict[str, Any]) -> Any:
    if "$ref" in spec:
        return _arrow_type(pa, defs[spec["$ref"].rsplit("/", 1)[-1]], defs)
    if "anyOf" in spec:  # a type or null: every column is nullable anyway
        (spec,) = [s for s in spec["anyOf"] if s.get("type") != "null"]
        return _arrow_type(pa, spec, defs)
    kinds = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
    (kind,) = [k for k in kinds if k != "null"]
    if kind == "string":
        return pa.timestamp("us", tz="UTC") if spec.get("format") == "date-time" else pa.string()
    if kind == "array":
        return pa.list_(_arrow_type(pa, spec["items"], defs))
    if kind == "object":
        return pa.struct([(name, _arrow_type(pa, sub, defs))
                          for name, sub in spec["properties"].items()])  # fmt: skip
    simple = {"integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}
    if kind not in simple:
        raise ValueError(f"the schema has a type Parquet output does not map: {kind!r}")
    return simple[kind]


_SCHEMAS: dict[str, Any] = {}


def arrow_schema(kind: str) -> Any:
    """The ``pyarrow.Schema`` of the Parquet files of ``kind`` ("cohorts" or "sessions"):
    the JSON Schema's fields in order, then ``extra_fields``; metadata: the schema's version.

    Raises ImportError naming the extra when pyarrow is not installed.
    """
    if kind not in _SCHEMAS:
        pa = _modules()[0]
        schema = json_schema(kind)
        defs = schema.get("$defs", {})
        columns = [pa.field(name, _arrow_type(pa, spec, defs))
                   for name, spec in schema["properties"].items()]  # fmt: skip
        columns.append(pa.field(EXTRA_COLUMN, pa.string()))
        metadata = {METADATA_KEY: str(SCHEMA_VERSION).encode(), b"failopen.kind": kind.encode()}
        _SCHEMAS[kind] = pa.schema(columns, metadata=metadata)
    return _SCHEMAS[kind]


def _extra_text(extra: dict[str, Any]) -> str:
    text: str = ENCODER.encode(extra)
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate: JSON's \\u escapes keep it
        text = json.dumps(extra, separators=(",", ":"))
    return text


def record_batch(kind: str, records: list[dict[str, Any]]) -> Any:
    """The records of ``kind`` as one ``pyarrow.RecordBatch`` of :func:`arrow_schema`."""
    pa, pc, _ = _modules()
    schema = arrow_schema(kind)
    known = frozenset(schema.names[:-1])
    extras: dict[int, dict[str, Any]] = {}
    if not all(map(known.issuperset, records)):
        for index, record in enumerate(records):
            if not known.issuperset(record):
                extras[index] = {k: v for k, v in record.items() if k not in known}
    count = len(records)
    arrays = []
    for field in list(schema)[:-1]:
        name, arrow_type = field.name, field.type
        values = list(map(dict.get, records, itertools.repeat(name, count)))
        array, bad = column(pa, pc, arrow_type, values)
        for index in bad:
            extras.setdefault(index, {})[name] = records[index][name]
        arrays.append(array)
    texts: list[str | None] = [None] * count
    for index, extra in extras.items():
        texts[index] = _extra_text(extra)
    arrays.append(pa.array(texts, pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_READ_SCHEMAS: dict[str, Any] = {}
_EXACT_FLOATS = float(1 << 53)  # past this a float64 column may hold an int inexactly


def _read_schema(kind: str) -> Any:
    """What pyarrow's JSON reader is asked for: the file's columns, timestamps as strings (its
    own parsing reads an offset-less time as UTC), no extra_fields."""
    if kind not in _READ_SCHEMAS:
        pa = _modules()[0]
        fields = list(arrow_schema(kind))[:-1]
        _READ_SCHEMAS[kind] = pa.schema(
            [pa.field(f.name, pa.string()) if pa.types.is_timestamp(f.type) else f for f in fields]
        )
    return _READ_SCHEMAS[kind]


def _read_fast(kind: str, lines: list[bytes]) -> Any:
    """The batch by pyarrow's JSON reader, or None when a record needs the careful path.

    The reader, told the schema and to fail on an unexpected field, refuses every value without
    its column's type (a number for a string, 1.5 or 1e2 for an int, a field the schema does
    not know, in ``verify`` too, a key given twice). What it would let through is checked here:
    a null inside an array, a float64 column with magnitudes from 2**53 (where an int may have
    been rounded), and two records on one line. Several times faster than decoding in Python.
    """
    pa, pc, _ = _modules()
    import pyarrow.json as pj  # with the others: only this module imports pyarrow

    options = pj.ParseOptions(explicit_schema=_read_schema(kind), unexpected_field_behavior="error")
    # One thread: the sync's fetching threads use the cores; Arrow's pool of threads cost 40 MB
    # of peak RSS for 12% of the time of a file (bench_rai_formats.py --quick, load 2).
    single = pj.ReadOptions(use_threads=False)
    try:
        table = pj.read_json(pa.BufferReader(b"".join(lines)), single, options)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if table.num_rows != len(lines):
        return None
    schema = arrow_schema(kind)
    arrays = []
    extras: dict[int, dict[str, Any]] = {}
    for field in list(schema)[:-1]:
        values = table.column(field.name).combine_chunks()
        if pa.types.is_list(field.type) and pc.list_flatten(values).null_count:
            return None
        if pa.types.is_float64(field.type):
            largest = pc.max(pc.abs(values)).as_py()
            if largest is not None and largest >= _EXACT_FLOATS:
                return None
        if pa.types.is_timestamp(field.type):
            strings = values
            values, bad = stamps(pa, pc, field.type, strings)
            for index in bad:
                extras.setdefault(index, {})[field.name] = strings[index].as_py()
        arrays.append(values)
    texts: list[str | None] = [None] * len(lines)
    for index, extra in extras.items():
        texts[index] = _extra_text(extra)
    arrays.append(pa.array(texts, pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _batch(kind: str, lines: list[bytes], where: list[tuple[str, int]]) -> Any:
    """The lines of ``kind`` as a record batch: pyarrow's reader when it can, else decoded in
    Python (a field the schema does not know, a value without its type, a line at fault)."""
    batch = _read_fast(kind, lines)
    if batch is None:
        with _no_cycle_collection():
            batch = record_batch(kind, _decode(lines, where))
    return batch


def _decode(lines: list[bytes], where: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """The records of JSON lines: one ``json.loads`` for the batch (a third faster than one
    per line); when that fails or finds other than one object per line, line by line, naming the
    spool and line at fault (a spool holds records only: none is ever skipped)."""
    try:
        records = json.loads(b"[" + b",".join(lines) + b"]")
        if len(records) == len(lines) and all(type(r) is dict for r in records):
            return records  # type: ignore[no-any-return]
    except ValueError:
        pass
    for line, (path, number) in zip(lines, where, strict=True):
        try:
            if type(json.loads(line)) is not dict:
                raise ValueError("not a JSON object")
        except ValueError as exc:
            raise ValueError(f"{path}, line {number}: not a JSON record ({exc})") from None
    raise ValueError("a batch of records did not decode one record per line")  # not reached


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Decoding makes thousands of dicts and lists, none in a cycle; the cycle collector, run
    every 700 new objects, walked them all again and again (a quarter of the time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _line_batches(spools: list[str]) -> Iterator[tuple[list[bytes], list[tuple[str, int]]]]:
    """The spools' JSON lines, :data:`ROWS_PER_BATCH` at a time, with where each was."""
    lines: list[bytes] = []
    where: list[tuple[str, int]] = []
    for path in spools:
        with open(path, "rb") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    lines.append(line)
                    where.append((path, number))
                if len(lines) == ROWS_PER_BATCH:
                    yield lines, where
                    lines, where = [], []
    if lines:
        yield lines, where


class _Through:
    """A write-only file for pyarrow whose every byte goes through the sink's ``write``."""

    closed = False

    def __init__(self, out: IO[bytes], write: Write) -> None:
        self._out = out
        self._write = write
        self._position = 0

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._write(self._out, chunk)
        self._position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        """The sink flushes ``out`` itself."""

    def close(self) -> None:
        self.closed = True  # ``out`` belongs to the caller


def write_parquet(kind: str, spools: list[str], out: IO[bytes], write: Write) -> int:
    """One Parquet file (zstd, row groups of :data:`ROWS_PER_GROUP`) of the records in the
    spools' JSON lines, in order, into ``out`` through ``write``; the number of rows.

    Memory holds one row group's Arrow arrays and one batch of decoded records, whatever the
    size of the spools.
    """
    pa, _, pq = _modules()
    schema = arrow_schema(kind)
    rows = 0
    pending: list[Any] = []
    with pq.ParquetWriter(pa.PythonFile(_Through(out, write), mode="w"), schema,
                          compression="zstd") as writer:  # fmt: skip
        for lines, where in _line_batches(spools):
            pending.append(_batch(kind, lines, where))
            rows += len(lines)
            if sum(batch.num_rows for batch in pending) >= ROWS_PER_GROUP:
                writer.write_table(pa.Table.from_batches(pending, schema), ROWS_PER_GROUP)
                pending = []
        if pending:
            writer.write_table(pa.Table.from_batches(pending, schema), ROWS_PER_GROUP)
    return rows
