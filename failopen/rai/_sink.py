"""Where ``failopen rai sync`` writes: spools (temporary files) filled by the fetching threads, then
appended to one file per UTC day and kind, or copied to stdout.

Every byte of output goes through ``write`` (an injectable seam: tests make it fail as a full disk
would). An append that fails is cut back to the sizes the files had before it, so a failed batch
leaves no half line; a batch interrupted by a crash is cut back by the next run, from the sizes the
state file recorded before the append began.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from datetime import timezone
from typing import IO, Any, BinaryIO

from failopen.rai._arguments import parse_rfc3339
from failopen.rai._output import ENCODER, CsvRows
from failopen.rai._state import fsync_dir
from failopen.rai.exceptions import RaiValidationError

__all__ = [
    "Write", "Spool", "DirSink", "StdoutSink", "Sink", "utc_day", "SPOOL_PREFIX", "FILE_NAME",
]  # fmt: skip

Write = Callable[[IO[bytes], bytes], object]
SPOOL_PREFIX = ".failopen-sync-"
_DAY = re.compile(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt]")
#: The only names a sync writes (and the state file may ask to cut back).
FILE_NAME = re.compile(r"(cohorts|sessions)-(\d{4}-\d{2}-\d{2}|undated)\.(jsonl|csv)")
_COPY_CHUNK = 1 << 20
#: The record field whose UTC day names the file a record goes to.
DAY_FIELD = {"cohorts": "cohort_window_start", "sessions": "session_created"}


def _write(f: IO[bytes], data: bytes) -> object:
    return f.write(data)


def utc_day(value: Any) -> str:
    """``YYYY-MM-DD`` of an RFC 3339 timestamp in UTC, or ``undated``."""
    if not isinstance(value, str):
        return "undated"
    # The day names a file: it comes from the service, so only digits may reach the name.
    if len(value) >= 20 and value[-1] in "Zz" and _DAY.match(value):
        return value[:10]  # the common case, without parsing
    try:
        return parse_rfc3339(value).astimezone(timezone.utc).strftime("%Y-%m-%d")
    except RaiValidationError:
        return "undated"


class Spool:
    """The encoded records of one unit of work, in temporary files named by their output file."""

    def __init__(self, folder: str, fmt: str, columns: Mapping[str, tuple[str, ...]],
                 write: Write, by_day: bool, prefix: str = SPOOL_PREFIX) -> None:  # fmt: skip
        self._folder = folder
        self._prefix = prefix
        self._fmt = fmt
        self._columns = columns
        self._write = write
        self._by_day = by_day
        self._files: dict[str, BinaryIO] = {}
        self.parts: dict[str, str] = {}  # output file name -> spool path, in first-write order
        self.records = {"cohorts": 0, "sessions": 0}
        self.undated = 0  # records whose time could not be read: written to the undated file

    def _file(self, name: str) -> BinaryIO:
        f = self._files.get(name)
        if f is None:
            fd, path = tempfile.mkstemp(prefix=self._prefix, suffix=".part", dir=self._folder)
            f = self._files[name] = os.fdopen(fd, "wb", buffering=1 << 18)
            self.parts[name] = path
        return f

    def add(self, kind: str, records: list[dict[str, Any]], lines: list[str] | None = None) -> None:
        """Encode ``records`` of ``kind`` (cohorts or sessions) into the spool of their file;
        ``lines``, the records' JSON texts as received, are written as they are (JSONL)."""
        if self._fmt != "jsonl" or lines is None:
            lines = None
        groups: dict[str, list[int]] = {}
        field = DAY_FIELD[kind]
        names: dict[Any, str] = {}  # by the stamp's first 11 characters: one check per day
        for index, record in enumerate(records):
            stamp = record.get(field)
            prefix = name = None
            if isinstance(stamp, str) and len(stamp) >= 20 and stamp[-1] in "Zz":
                prefix = stamp[:11]  # utc_day's fast path reads only these
                name = names.get(prefix)
            if name is None:
                name = f"{kind}-{utc_day(stamp)}.{self._fmt}" if self._by_day else "-"
                if prefix is not None and _DAY.match(prefix):
                    names[prefix] = name
            groups.setdefault(name, []).append(index)
        self.records[kind] += len(records)
        if self._by_day:
            undated = groups.get(f"{kind}-undated.{self._fmt}")
            self.undated += len(undated) if undated else 0
        for name, group in groups.items():
            if lines is not None:
                text = [lines[i] for i in group] if len(group) < len(records) else lines
                data = "\n".join([*text, ""]).encode()  # one copy of 0.65 MB, not two
            else:
                data = self._encode(kind, [records[i] for i in group])
            self._write(self._file(name), data)

    def _encode(self, kind: str, records: list[dict[str, Any]]) -> bytes:
        if self._fmt == "csv":
            sink = _Collect()
            CsvRows(sink, self._columns[kind], header=False).write(records)  # type: ignore[arg-type]
            return b"".join(sink.chunks)
        encode = ENCODER.encode
        return ("\n".join([encode(r) for r in records]) + "\n").encode()

    def close(self) -> None:
        """Flush and close the temporary files (they stay until :meth:`discard`)."""
        for f in self._files.values():
            f.close()

    def discard(self) -> None:
        """Remove the temporary files."""
        self.close()
        for path in self.parts.values():
            with contextlib.suppress(OSError):
                os.unlink(path)


class _Collect:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.chunks.append(data)
        return len(data)


def _copy(spool_path: str, out: IO[bytes], write: Write) -> None:
    with open(spool_path, "rb") as f:
        while chunk := f.read(_COPY_CHUNK):
            write(out, chunk)


class DirSink:
    """One file per UTC day and kind in ``folder``, each batch appended and fsynced."""

    by_day = True

    def __init__(self, folder: str, fmt: str, columns: Mapping[str, tuple[str, ...]],
                 write: Write = _write) -> None:  # fmt: skip
        self.folder = os.path.abspath(folder)
        self.fmt = fmt
        self.columns = columns
        self.write = write

    def check(self) -> None:
        """An OSError naming ``--out-dir`` when it is not a writable directory."""
        if not os.path.isdir(self.folder):
            raise NotADirectoryError(2, "--out-dir: not an existing directory", self.folder)
        if not os.access(self.folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "--out-dir: the directory is not writable", self.folder)

    def spool(self) -> Spool:
        """A new spool beside the output files (a full disk shows before anything is appended)."""
        return Spool(self.folder, self.fmt, self.columns, self.write, by_day=True)

    def remove_stale_spools(self) -> None:
        """Delete spools a killed run left behind (called under the state lock)."""
        for path in glob.glob(os.path.join(glob.escape(self.folder), SPOOL_PREFIX + "*.part")):
            with contextlib.suppress(OSError):
                os.unlink(path)

    def sizes(self, names: Iterable[str]) -> dict[str, int]:
        """The current size of each output file (0 when it does not exist)."""
        sizes = {}
        for name in names:
            try:
                sizes[name] = os.stat(os.path.join(self.folder, name)).st_size
            except FileNotFoundError:
                sizes[name] = 0
        return sizes

    def rollback(self, sizes: Mapping[str, int]) -> None:
        """Cut each file back to its size before an append that did not complete."""
        for name, size in sizes.items():
            path = os.path.join(self.folder, os.path.basename(name))
            try:
                if os.stat(path).st_size > size:
                    os.truncate(path, size)
            except FileNotFoundError:
                continue

    def append(self, spools: list[Spool], sizes: Mapping[str, int]) -> list[str]:
        """Append the spools to their files (header first in a new CSV file), fsync each file.

        On an OSError the files are cut back to ``sizes`` and the error raised.
        """
        names = sorted({name for spool in spools for name in spool.parts})
        try:
            for name in names:
                with open(os.path.join(self.folder, name), "ab") as out:
                    if self.fmt == "csv" and sizes.get(name, 0) == 0:
                        kind = name.split("-", 1)[0]
                        header = _Collect()
                        CsvRows(header, self.columns[kind])  # type: ignore[arg-type]
                        self.write(out, b"".join(header.chunks))
                    for spool in spools:
                        if name in spool.parts:
                            _copy(spool.parts[name], out, self.write)
                    out.flush()
                    os.fsync(out.fileno())
            fsync_dir(self.folder)  # new day files are durable before the state says so
        except OSError:
            with contextlib.suppress(OSError):
                self.rollback(sizes)
            raise
        return names


class StdoutSink:
    """JSON lines on stdout (``--out-dir -``): each batch flushed before the state advances.

    Spools go to the system's temporary directory, named after the state file (``owner``), so
    the next run on that state (under its lock) finds those a killed run left, and only those.
    """

    by_day = False

    def __init__(self, out: IO[bytes], write: Write = _write, *, owner: str = "") -> None:
        self.out = out
        self.write = write
        self.fmt = "jsonl"
        tag = hashlib.sha256(os.path.abspath(owner).encode()).hexdigest()[:16] if owner else ""
        self._prefix = f"{SPOOL_PREFIX}{tag}-" if tag else SPOOL_PREFIX

    def check(self) -> None:
        """Nothing to check: stdout is open."""

    def spool(self) -> Spool:
        """A spool in the system's temporary directory."""
        return Spool(tempfile.gettempdir(), "jsonl", {}, self.write, by_day=False,
                     prefix=self._prefix)  # fmt: skip

    def remove_stale_spools(self) -> None:
        """Delete the spools a killed run on the same state left (none without an owner: the
        temporary directory is shared, and others' spools are not ours to clean)."""
        if self._prefix == SPOOL_PREFIX:
            return
        folder = glob.escape(tempfile.gettempdir())
        for path in glob.glob(os.path.join(folder, self._prefix + "*.part")):
            with contextlib.suppress(OSError):
                os.unlink(path)

    def sizes(self, names: Iterable[str]) -> dict[str, int]:
        """Stdout cannot be cut back: nothing to record."""
        return {}

    def rollback(self, sizes: Mapping[str, int]) -> None:
        """Nothing can be taken back from a pipe."""

    def append(self, spools: list[Spool], sizes: Mapping[str, int]) -> list[str]:
        """Copy the spools to stdout in order and flush."""
        for spool in spools:
            for path in spool.parts.values():
                _copy(path, self.out, self.write)
        self.out.flush()
        return []


Sink = DirSink | StdoutSink
