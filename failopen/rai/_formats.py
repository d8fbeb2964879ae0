"""The file formats of ``failopen rai sync``: how a page of records is encoded into a spool (on a
fetching thread), and how spools become one whole output file (on the main thread).

The sink (``_sink.py``) knows nothing of a format but this seam: :data:`FORMATS` is the registry
the ``--format`` choices come from, and every byte of output goes through the sink's ``write``
(tests make it fail as a full disk would).

The lake formats: ``jsonl.gz`` gzips each page into one gzip member (members concatenated are one
valid gzip file, RFC 1952, so finishing is a copy, and ``gzip -dc``, DuckDB and pyarrow read it
whole); ``parquet`` spools JSON lines and types them by the shipped schema when the file is
finished (``_parquet.py``, the only module that imports pyarrow).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Mapping
from typing import IO, Any, Protocol

from failopen.rai import _parquet
from failopen.rai._command import COHORT_COLUMNS, SESSION_COLUMNS
from failopen.rai._output import ENCODER, CsvRows

__all__ = ["Write", "Format", "FORMATS", "Jsonl", "Csv", "JsonlGz", "Parquet", "copy_spools"]

Write = Callable[[IO[bytes], bytes], object]
_COPY_CHUNK = 1 << 20


class Format(Protocol):
    """One ``--format``: its name, its file name ending, and its two steps."""

    name: str
    suffix: str
    #: Spools may take the records' JSON text as received (``client.export_pages(slim=True)``).
    keeps_lines: bool

    def encode(self, kind: str, records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
        """On a fetching thread: the bytes one page adds to a cohort's spool (no header)."""
        ...  # pragma: no cover

    def finish(self, kind: str, spools: list[str], out: IO[bytes], write: Write) -> None:
        """On the main thread: one whole output file from spool files (paths, in order) into
        ``out`` (header or footer included). Every byte goes through ``write``."""
        ...  # pragma: no cover

    def require(self) -> None:
        """At start-up: an ImportError naming the extra to install when the format needs a
        library that is missing (before anything is fetched)."""
        ...  # pragma: no cover


def copy_spools(spools: list[str], out: IO[bytes], write: Write) -> None:
    """Copy the spool files, in order, into ``out`` through ``write``."""
    for path in spools:
        with open(path, "rb") as f:
            while chunk := f.read(_COPY_CHUNK):
                write(out, chunk)


def _json_lines(records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
    if lines is None:
        encode = ENCODER.encode
        lines = [encode(r) for r in records]
    return "\n".join([*lines, ""]).encode()  # one copy of 0.65 MB a page, not two


class _Collect:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.chunks.append(data)
        return len(data)


class Jsonl:
    """One JSON record per line, exactly as received when the text is at hand."""

    name = "jsonl"
    suffix = ".jsonl"
    keeps_lines = True

    def encode(self, kind: str, records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
        """The lines, or the records encoded, each ending in a newline."""
        return _json_lines(records, lines)

    def finish(self, kind: str, spools: list[str], out: IO[bytes], write: Write) -> None:
        """The spools, copied."""
        copy_spools(spools, out, write)

    def require(self) -> None:
        """Nothing to install."""


class Csv:
    """The spec's columns per kind and ``extra_fields``; every file starts with its header."""

    name = "csv"
    suffix = ".csv"
    keeps_lines = False

    def __init__(self, columns: Mapping[str, tuple[str, ...]]) -> None:
        self.columns = columns

    def encode(self, kind: str, records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
        """The rows, without a header."""
        sink = _Collect()
        CsvRows(sink, self.columns[kind], header=False).write(records)  # type: ignore[arg-type]
        return b"".join(sink.chunks)

    def finish(self, kind: str, spools: list[str], out: IO[bytes], write: Write) -> None:
        """The header row, then the spools."""
        header = _Collect()
        CsvRows(header, self.columns[kind])  # type: ignore[arg-type]
        write(out, b"".join(header.chunks))
        copy_spools(spools, out, write)

    def require(self) -> None:
        """Nothing to install."""


class JsonlGz(Jsonl):
    """JSON lines as :class:`Jsonl` writes them, gzip-compressed: one gzip member per page."""

    name = "jsonl.gz"
    suffix = ".jsonl.gz"
    #: zlib's level, gzip's own default. On the emulator's sessions (a page of 1,000, 0.59 MB):
    #: level 6 writes 1/17.8 of the bytes at 193 MB/s, level 1 1/13.5 at 434 MB/s.
    LEVEL = 6

    def encode(self, kind: str, records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
        """The page's lines as one gzip member (nothing for an empty page). On the fetching
        thread: zlib lets the other threads run while it compresses."""
        data = super().encode(kind, records, lines)
        # mtime=0: the same records give the same bytes (no wall-clock time in the header).
        return gzip.compress(data, compresslevel=self.LEVEL, mtime=0) if data else b""


class Parquet:
    """One Parquet file (zstd) per output file, typed by the shipped schema."""

    name = "parquet"
    suffix = ".parquet"
    keeps_lines = True

    def encode(self, kind: str, records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
        """The page's JSON lines: typing waits for :meth:`finish`, which holds one row group's
        columns at a time (typed pages of a whole batch would have to wait in memory)."""
        return _json_lines(records, lines)

    def finish(self, kind: str, spools: list[str], out: IO[bytes], write: Write) -> None:
        """Read the spools' lines, type them, write the Parquet file into ``out``."""
        _parquet.write_parquet(kind, spools, out, write)

    def require(self) -> None:
        """pyarrow (the ``[parquet]`` extra)."""
        _parquet.require_pyarrow()


FORMATS: dict[str, Format] = {
    fmt.name: fmt
    for fmt in (Jsonl(), JsonlGz(), Csv({"cohorts": COHORT_COLUMNS, "sessions": SESSION_COLUMNS}),
                Parquet())  # fmt: skip
}
