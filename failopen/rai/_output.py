"""Where a ``failopen rai`` export goes: JSONL and CSV writers, the atomic file, the progress line.

Both writers take records exactly as decoded (``raw=True`` pages), so an export never builds
typed models. The command itself, its arguments and exit codes, is ``cli.py``.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import IO, Any, TextIO

from failopen._internal.terminal import printable

__all__ = [
    "EXTRA_COLUMN", "ENCODER", "UsageError", "JsonLines", "CsvRows", "AtomicFile",
    "sigterm_raises", "Terminated", "signals_held", "Progress", "safe_text", "limit_malloc_arenas",
]  # fmt: skip

EXTRA_COLUMN = "extra_fields"

# One reusable encoder: json.dumps with non-default options builds a new encoder on every call.
ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)


class UsageError(Exception):
    """A bad argument found by the CLI itself (exit 2); an unwritable ``--out`` is an OSError."""


class JsonLines:
    """Each record as received, one per line."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out

    def write(self, records: Iterable[dict[str, Any]], lines: list[str] | None = None) -> None:
        """Write the records as JSON lines, in one write call.

        ``lines``, when given, are the records' JSON texts as received (a raw page's
        ``lines``): written as they are, without encoding the records again.
        """
        if lines is None:
            encode = ENCODER.encode
            lines = [encode(record) for record in records]
        else:
            lines = list(lines)
        if lines:
            lines.append("")
            self._out.write("\n".join(lines).encode())


# A spreadsheet runs a cell starting with one of these as a formula (CSV injection); such text is
# written with a leading apostrophe, which spreadsheets show as text and do not evaluate. Numbers
# are left alone ("-0.5" is a number to a spreadsheet, not a formula), and arrays, objects and
# extra_fields are JSON, starting with "[" or "{".
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def safe_text(text: str) -> str:
    """``text`` as a CSV cell a spreadsheet will not run as a formula."""
    return "'" + text if text.startswith(_FORMULA_START) else text


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return ENCODER.encode(value)


class CsvRows:
    """A header row, then one row per record in a fixed column order.

    With ``terminal``, the rows are a table on an operator's screen, not data: each cell is
    shown :func:`~failopen._internal.terminal.printable`, so a record's ESC or bidi characters
    cannot rewrite what the screen shows (a file or a pipe gets the text exactly).
    """

    def __init__(self, out: IO[bytes], columns: tuple[str, ...], *, header: bool = True,
                 terminal: bool = False) -> None:  # fmt: skip
        self._out = out
        self._columns = columns
        self._known = frozenset(columns)
        self._terminal = terminal
        if header:
            self.write_header()

    def write_header(self) -> None:
        """Write the header row (once per file: a sync appending to a file skips it)."""
        self._write_rows([[safe_text(name) for name in (*self._columns, EXTRA_COLUMN)]])

    def _write_rows(self, rows: list[list[str]]) -> None:
        if self._terminal:
            rows = [[printable(cell) for cell in row] for row in rows]
        buffer = io.StringIO()
        csv.writer(buffer).writerows(rows)
        self._out.write(buffer.getvalue().encode())

    def write(self, records: Iterable[dict[str, Any]], lines: list[str] | None = None) -> None:
        """Write one row per record; fields outside the columns go to ``extra_fields``."""
        rows = []
        for record in records:
            row = [_cell(record.get(name)) for name in self._columns]
            extra = {k: v for k, v in record.items() if k not in self._known}
            row.append(ENCODER.encode(extra) if extra else "")
            rows.append(row)
        if rows:
            self._write_rows(rows)


class AtomicFile:
    """A file that appears at ``path`` only when complete (temporary file + ``os.replace``)."""

    def __init__(self, path: str) -> None:
        """Create the temporary file; an OSError naming ``--out`` when it cannot be (exit 1)."""
        self.path = os.path.abspath(path)
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            raise FileNotFoundError(errno.ENOENT, "--out: the directory does not exist", folder)
        if os.path.isdir(self.path):
            raise IsADirectoryError(errno.EISDIR, "--out: is a directory", self.path)
        try:
            fd, self._temp = tempfile.mkstemp(
                prefix=f".{os.path.basename(self.path)}.", suffix=".part", dir=folder
            )
        except OSError as exc:
            # Name the directory, not the random name of a temporary file the user never asked for.
            raise OSError(
                exc.errno, f"--out: cannot create a file in the directory ({exc.strerror})", folder
            ) from exc
        self.file: IO[bytes] = os.fdopen(fd, "wb", buffering=1 << 20)
        self._synced = 0

    #: Bytes written between two flushes to disk while the export runs (see :meth:`written`).
    SYNC_EVERY = 64 << 20

    def written(self) -> None:
        """Flush what was written to disk every :attr:`SYNC_EVERY` bytes.

        The disk then keeps up while pages are fetched, and :meth:`commit` does not wait for the
        whole file at the end (0.6-0.8 s for the 640 MB of a million sessions).
        """
        position = self.file.tell()
        if position - self._synced >= self.SYNC_EVERY:
            self.file.flush()
            getattr(os, "fdatasync", os.fsync)(self.file.fileno())
            self._synced = position

    def commit(self) -> None:
        """Flush to disk and move into place, keeping an existing file's permissions."""
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        try:
            mode = os.stat(self.path).st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(self._temp, mode)
        os.replace(self._temp, self.path)

    def discard(self) -> None:
        """Remove the incomplete temporary file."""
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._temp)


class Terminated(SystemExit):
    """SIGTERM (Airflow's time-out, Kubernetes' stop): exit code 143 (128 + 15) unless caught."""


# SIGTERM arriving inside :func:`signals_held` waits here until the block ends (main thread only).
_held = {"depth": 0, "signum": 0}


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` (a SystemExit) so cleanup runs, as for Ctrl-C."""

    def stop(signum: int, frame: FrameType | None) -> None:
        if _held["depth"]:
            _held["signum"] = signum  # raised when the step in progress is done
            return
        raise Terminated(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held["signum"] = 0
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Defer SIGTERM (under :func:`sigterm_raises`) until the block ends: a step that must finish
    whole (append, fsync, record in the state, count it) is not cut in the middle. A mask
    would not do: the kernel hands a process's signal to any thread that does not block it."""
    _held["depth"] += 1
    try:
        yield
    except BaseException:
        _held["depth"] -= 1
        raise
    _held["depth"] -= 1
    signum = _held["signum"]
    if signum and not _held["depth"]:
        _held["signum"] = 0
        raise Terminated(128 + signum)


class Progress:
    """Records, pages and rate on one self-rewriting stderr line (terminals only)."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._enabled = stream.isatty()
        self._clock = clock
        self._started = self._shown = clock()
        self.records = self.pages = 0

    def add(self, records: int, pages: int = 1) -> None:
        """Count a page of records, redrawing the line at most every 0.2 s."""
        self.records += records
        self.pages += pages
        if self._enabled and self._clock() - self._shown >= 0.2:
            self._show("\r")

    def _show(self, lead: str, end: str = "") -> None:
        self._shown = self._clock()
        rate = self.records / max(self._shown - self._started, 1e-9)
        self._stream.write(
            f"{lead}{self.records:,} records, {self.pages:,} pages, {rate:,.0f} records/s{end}"
        )
        self._stream.flush()

    def finish(self) -> None:
        """End the line with the final totals (on a terminal, once any page was counted)."""
        if self._enabled and self.pages:
            self._show("\r", "\n")


_M_ARENA_MAX = -8  # glibc's mallopt parameter number
MALLOC_ARENAS = 2


def limit_malloc_arenas() -> bool:
    """Cap glibc's malloc arenas at :data:`MALLOC_ARENAS` in this process (the CLI only).

    A thread that allocates gets an arena of its own (up to eight per core); each keeps the
    holes its pages of 0.65 MB leave behind, so peak RSS grew with the fetching threads of
    ``--parallel`` (61-64 MB with 4 windows, each a fetching and a decoding thread), not with the
    data (50 MB in one arena). Python allocates under its GIL, so the threads hardly ever wait
    for a shared arena. Left alone when ``MALLOC_ARENA_MAX`` is set, and off glibc. True when
    applied.
    """
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):  # musl and others: no such knob
            return False
        return bool(libc.mallopt(_M_ARENA_MAX, MALLOC_ARENAS))
    except (OSError, AttributeError):
        return False
