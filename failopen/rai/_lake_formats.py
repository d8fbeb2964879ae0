"""The lake formats of ``failopen rai sync``: ``jsonl.gz`` and ``parquet``, on the format seam of
``_formats.py`` (``encode`` on a fetching thread, one page at a time, into a spool; ``finish`` on
the main thread, the spools into one output file).

- ``jsonl.gz``: each page one gzip member of its JSON lines. Members concatenated are one valid
  gzip file (RFC 1952), so ``finish`` copies the spools as they are, and ``gzip -dc``, zcat,
  DuckDB's ``read_json_auto`` and pyarrow read every member. Compressing on the fetching
  threads keeps it off the main thread (zlib lets other threads run meanwhile).
- ``parquet``: pages are spooled as JSON lines; ``finish`` types them by the shipped schema and
  writes one Parquet file (``_parquet.py``, the only module that imports pyarrow).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from typing import IO, Any

from failopen.rai import _parquet
from failopen.rai._output import ENCODER

__all__ = ["JsonlGz", "Parquet", "LAKE_FORMATS", "jsonl_bytes"]

Write = Callable[[IO[bytes], bytes], object]
_COPY_CHUNK = 1 << 20


def jsonl_bytes(records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
    """One JSON line per record: ``lines`` (the texts as received) when given, else encoded."""
    if lines is None:
        encode = ENCODER.encode
        lines = [encode(record) for record in records]
    return "\n".join([*lines, ""]).encode() if lines else b""


def _copy(spools: list[str], out: IO[bytes], write: Write) -> None:
    for path in spools:
        with open(path, "rb") as f:
            while chunk := f.read(_COPY_CHUNK):
                write(out, chunk)


class JsonlGz:
    """JSON lines, gzip-compressed: one member per page."""

    name = "jsonl.gz"
    suffix = ".jsonl.gz"
    keeps_lines = True
    #: zlib's level: gzip's own default. Measured on the emulator's sessions (one page of 1,000,
    #: 0.59 MB): level 6 writes 1/17.8 of the bytes at 193 MB/s, level 1 1/13.5 at 434 MB/s.
    LEVEL = 6

    def encode(self, kind: str, records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
        """The page's JSON lines as one gzip member (empty for an empty page)."""
        data = jsonl_bytes(records, lines)
        # mtime=0: the same records give the same bytes (no wall-clock time in the header).
        return gzip.compress(data, compresslevel=self.LEVEL, mtime=0) if data else b""

    def finish(self, kind: str, spools: list[str], out: IO[bytes], write: Write) -> None:
        """Copy the members: concatenated, they are one gzip file."""
        _copy(spools, out, write)


class Parquet:
    """One Parquet file (zstd) per output file, typed by the shipped schema."""

    name = "parquet"
    suffix = ".parquet"
    keeps_lines = True

    def encode(self, kind: str, records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
        """The page's JSON lines: typing them waits for :meth:`finish` (pyarrow is not
        thread-bound, but the typed arrays of a whole run would not fit in memory)."""
        return jsonl_bytes(records, lines)

    def finish(self, kind: str, spools: list[str], out: IO[bytes], write: Write) -> None:
        """Read the spools' lines, type them, write the Parquet file into ``out``."""
        _parquet.write_parquet(kind, spools, out, write)


#: The registry hook: ``_formats.FORMATS`` takes these by name.
LAKE_FORMATS = {fmt.name: fmt for fmt in (JsonlGz(), Parquet())}
