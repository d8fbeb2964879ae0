"""Where ``failopen rai sync`` writes: spools (temporary files) filled by the fetching threads,
then, per committed batch, new whole files in Hive-style partitions, or a copy to stdout.

``DIR/kind=sessions/dt=YYYY-MM-DD/<run id>-<batch>.jsonl`` (and ``kind=cohorts``): a batch's
files are written under hidden temporary names in their final directories
(``.failopen-sync-<tag>-*.part``: no reader's ``*.jsonl`` pattern matches them), fsynced, and
renamed only after the state file records the batch and the renames still to do (``sync.py``).
A file, once visible, is never written again. ``tag`` is a hash of the state file's path: the
next run on that state (under its lock) deletes the temporaries a killed run left, and only those.

Every byte of output goes through ``write`` (an injectable seam: tests make it fail as a full disk
would).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import os
import re
import tempfile
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timezone
from typing import IO, Any, BinaryIO

from failopen.rai._arguments import parse_rfc3339
from failopen.rai._formats import FORMATS, Format, Write, copy_spools
from failopen.rai._output import ENCODER
from failopen.rai._schema import UNKNOWN_NAMED, unknown_fields
from failopen.rai._state import fsync_dir
from failopen.rai.exceptions import RaiValidationError

__all__ = [
    "Write", "Spool", "Move", "DirSink", "StdoutSink", "Sink", "utc_day", "SPOOL_PREFIX",
    "FILE_NAME", "UNDATED", "DAY_FIELD", "complete_renames", "owner_tag",
]  # fmt: skip

logger = logging.getLogger("failopen.rai")
SPOOL_PREFIX = ".failopen-sync-"
_DAY = re.compile(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt]", re.ASCII)
#: The day files earlier releases appended to (a state they left may ask to cut one back).
FILE_NAME = re.compile(r"(cohorts|sessions)-(\d{4}-\d{2}-\d{2}|undated)\.(jsonl|csv)", re.A)
#: The partition of records without a usable time: Hive's null partition, which DuckDB and
#: Spark read as a NULL ``dt`` (the column stays a DATE).
UNDATED = "__HIVE_DEFAULT_PARTITION__"
#: The record field whose UTC day names the partition a record goes to.
DAY_FIELD = {"cohorts": "cohort_window_start", "sessions": "session_created"}
#: Spool files a spool keeps open at once: a cohort spanning many days reopens the others.
_OPEN_FILES = 8


def _write(f: IO[bytes], data: bytes) -> object:
    return f.write(data)


def owner_tag(owner: str) -> str:
    """The hash of a state file's path that names its temporaries ("" without one)."""
    return hashlib.sha256(os.path.abspath(owner).encode()).hexdigest()[:16] if owner else ""


def utc_day(value: Any) -> str:
    """``YYYY-MM-DD`` of an RFC 3339 timestamp in UTC, or :data:`UNDATED`."""
    if not isinstance(value, str):
        return UNDATED
    # The day names a directory: it comes from the service, so only digits may reach the name.
    if len(value) >= 20 and value[-1] in "Zz" and _DAY.match(value):
        return value[:10]  # the common case, without parsing
    try:
        return parse_rfc3339(value).astimezone(timezone.utc).strftime("%Y-%m-%d")
    except RaiValidationError:
        return UNDATED


Part = tuple[str, str]  # (kind, dt): one output file per batch


class Spool:
    """The encoded records of one unit of work, in temporary files, one per partition."""

    def __init__(self, folder: str, fmt: Format, write: Write, by_day: bool,
                 prefix: str = SPOOL_PREFIX) -> None:  # fmt: skip
        self._folder = folder
        self._prefix = prefix
        self._fmt = fmt
        self._write = write
        self._by_day = by_day
        # Open spool files, least recently used first: a cohort whose sessions span hundreds
        # of days holds at most _OPEN_FILES handles (times --parallel threads).
        self._files: OrderedDict[Part, BinaryIO] = OrderedDict()
        self.parts: dict[Part, str] = {}  # partition -> spool path, in first-write order
        self.counts: dict[Part, int] = {}  # records per partition
        self.records = {"cohorts": 0, "sessions": 0}
        self.undated = 0  # records whose time could not be read: in the undated partition
        #: Top-level fields the shipped schema does not know, by kind (one record a page seen).
        self.unknown: dict[str, set[str]] = {}

    def _file(self, part: Part) -> BinaryIO:
        f = self._files.get(part)
        if f is not None:
            self._files.move_to_end(part)
            return f
        if len(self._files) >= _OPEN_FILES:
            self._files.popitem(last=False)[1].close()
        path = self.parts.get(part)
        if path is None:
            fd, path = tempfile.mkstemp(prefix=self._prefix, suffix=".part", dir=self._folder)
            self.parts[part] = path
            f = os.fdopen(fd, "wb", buffering=1 << 18)
        else:
            f = open(path, "ab", buffering=1 << 18)  # noqa: SIM115 (closed by close())
        self._files[part] = f
        return f

    def add(self, kind: str, records: list[dict[str, Any]], lines: list[str] | None = None) -> None:
        """Encode ``records`` of ``kind`` (cohorts or sessions) into the spools of their days;
        ``lines``, the records' JSON texts as received, are used when the format keeps them."""
        if not self._fmt.keeps_lines:
            lines = None
        if records:  # one record a page: JSONL keeps its speed; a slim record has its ids only
            sample = json.loads(lines[0]) if lines else records[0]
            if new := unknown_fields(kind, sample):
                seen = self.unknown.setdefault(kind, set())
                if len(seen) <= UNKNOWN_NAMED:  # one past the bound tells the summary of more
                    seen.update(sorted(new)[: UNKNOWN_NAMED + 1 - len(seen)])
        groups: dict[Part, list[int]] = {}
        field = DAY_FIELD[kind]
        parts: dict[str, Part] = {}  # by the stamp's first 11 characters: one check per day
        for index, record in enumerate(records):
            stamp = record.get(field)
            prefix = part = None
            if isinstance(stamp, str) and len(stamp) >= 20 and stamp[-1] in "Zz":
                prefix = stamp[:11]  # utc_day's fast path reads only these
                part = parts.get(prefix)
            if part is None:
                part = (kind, utc_day(stamp)) if self._by_day else ("-", "-")
                if prefix is not None and _DAY.match(prefix):
                    parts[prefix] = part
            groups.setdefault(part, []).append(index)
        self.records[kind] += len(records)
        if self._by_day:
            undated = groups.get((kind, UNDATED))
            self.undated += len(undated) if undated else 0
        for part, group in groups.items():
            whole = len(group) == len(records)
            text = None if lines is None else lines if whole else [lines[i] for i in group]
            data = self._fmt.encode(kind, records if whole else [records[i] for i in group], text)
            self._write(self._file(part), data)
            self.counts[part] = self.counts.get(part, 0) + len(group)

    def close(self) -> None:
        """Flush and close the temporary files (they stay until :meth:`discard`)."""
        while self._files:
            self._files.popitem()[1].close()

    def discard(self) -> None:
        """Remove the temporary files."""
        self.close()
        for path in self.parts.values():
            with contextlib.suppress(OSError):
                os.unlink(path)


@dataclass
class Move:
    """One output file of a batch: written at ``temp``, visible once renamed to ``final``."""

    temp: str
    final: str
    path: str  # relative to the output directory, "/"-separated
    kind: str
    dt: str
    records: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "dt": self.dt, "records": self.records,
                "bytes": self.bytes}  # fmt: skip


def _unlink(paths: Iterable[str]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


def complete_renames(renames: Iterable[tuple[str, str]]) -> list[str]:
    """Finish the renames a killed batch recorded (a temporary that is gone was renamed); the
    final paths renamed now. The state file checked the names (``_state.RENAME``)."""
    done, folders = [], set()
    for temp, final in renames:
        if os.path.lexists(final):
            # A visible file is never written again: only a state edited by hand (or restored
            # from a backup) can point a rename at one, and os.rename would replace it.
            if os.path.lexists(temp):
                logger.warning("a rename the state records would replace %s: left as it "
                               "is (its temporary %s is not delivered)", final, temp)  # fmt: skip
            continue
        try:
            os.rename(temp, final)
        except FileNotFoundError:
            if not os.path.exists(final):  # moved or deleted by hand: say so, once
                logger.warning("a file the state records as delivered is missing: %s (its "
                               "hidden temporary %s is gone too)", final, temp)  # fmt: skip
            continue
        done.append(final)
        folders.add(os.path.dirname(final))
    for folder in sorted(folders):
        fsync_dir(folder)
    return done


class DirSink:
    """New files per batch in ``folder/kind=<kind>/dt=<day>/``, never written again."""

    by_day = True

    def __init__(self, folder: str, fmt: str, write: Write = _write, *, owner: str = "") -> None:
        self.folder = os.path.abspath(folder)
        self.format = FORMATS[fmt]
        self.write = write
        self.tag = owner_tag(owner) or "0" * 16
        self._prefix = f"{SPOOL_PREFIX}{self.tag}-"

    def check(self) -> None:
        """An OSError naming ``--out-dir`` when it is not a writable directory."""
        if not os.path.isdir(self.folder):
            raise NotADirectoryError(2, "--out-dir: not an existing directory", self.folder)
        if not os.access(self.folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "--out-dir: the directory is not writable", self.folder)

    def spool(self) -> Spool:
        """A new spool beside the output (a full disk shows before anything is written)."""
        return Spool(self.folder, self.format, self.write, by_day=True, prefix=self._prefix)

    def _partitions(self) -> list[str]:
        found = []
        for kind in DAY_FIELD:
            with (
                contextlib.suppress(OSError),
                os.scandir(os.path.join(self.folder, f"kind={kind}")) as days,
            ):
                found += [e.path for e in days if e.name.startswith("dt=") and e.is_dir()]
        return found

    def remove_stale_spools(self) -> None:
        """Delete the temporaries a killed run on the same state left (under the state lock,
        after :func:`complete_renames`): another state's tag is not ours to delete."""
        for folder in [self.folder, *self._partitions()]:
            pattern = os.path.join(glob.escape(folder), glob.escape(self._prefix) + "*.part")
            _unlink(glob.glob(pattern))

    def rollback(self, sizes: Mapping[str, int]) -> None:
        """Cut each day file an earlier release was appending to back to its size before the
        append (a state it left when killed mid-append; names checked by the state file)."""
        for name, size in sizes.items():
            path = os.path.join(self.folder, os.path.basename(name))
            try:
                if os.stat(path).st_size > size:
                    os.truncate(path, size)
            except FileNotFoundError:
                continue

    def prepare(self, spools: list[Spool], run_id: str, seq: int) -> list[Move]:
        """Write one hidden file per partition of the batch, fsync each; the moves to publish.
        On an OSError nothing is left behind and the error is raised."""
        parts = sorted({part for spool in spools for part in spool.parts})
        moves: list[Move] = []
        try:
            for kind, dt in parts:
                rel = f"kind={kind}/dt={dt}"
                folder = os.path.join(self.folder, rel)
                self._makedirs(folder)
                name = f"{run_id}-{seq:04d}{self.format.suffix}"
                fd, temp = tempfile.mkstemp(prefix=self._prefix, suffix=".part", dir=folder)
                with os.fdopen(fd, "wb") as out:
                    move = Move(temp, os.path.join(folder, name), f"{rel}/{name}", kind, dt,
                                sum(s.counts.get((kind, dt), 0) for s in spools), 0)  # fmt: skip
                    moves.append(move)
                    paths = [s.parts[(kind, dt)] for s in spools if (kind, dt) in s.parts]
                    self.format.finish(kind, paths, out, self.write)
                    out.flush()
                    os.fsync(out.fileno())
                    move.bytes = os.fstat(out.fileno()).st_size
                os.chmod(temp, 0o644)  # mkstemp's 0600 would hide the data from readers
        except BaseException:
            self.discard(moves)
            raise
        return moves

    @staticmethod
    def _makedirs(folder: str) -> None:
        """Create a partition directory durably: a rename into a directory whose own entry is
        not on disk yet could vanish with it on a power loss."""
        if os.path.isdir(folder):
            return
        kind = os.path.dirname(folder)
        new_kind = not os.path.isdir(kind)
        os.makedirs(folder, exist_ok=True)
        fsync_dir(kind)
        if new_kind:
            fsync_dir(os.path.dirname(kind))

    def publish(self, moves: list[Move]) -> list[str]:
        """Rename each file to its final name, fsync the directories; the paths made visible."""
        return [self.relative(p) for p in complete_renames((m.temp, m.final) for m in moves)]

    def relative(self, path: str) -> str:
        """``path`` relative to the output directory, as the manifest names files."""
        return os.path.relpath(path, self.folder).replace(os.sep, "/")

    def discard(self, moves: list[Move]) -> None:
        """Remove the hidden files of a batch that is not to be published."""
        _unlink(m.temp for m in moves)


class _Tagged:
    """``--out-dir -``: each line ``{"kind":"sessions","record":{...}}``, the record's text as
    received; a field the vendor adds to a record can never collide with the tag."""

    name = "jsonl"
    suffix = ".jsonl"
    keeps_lines = True

    def encode(self, kind: str, records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
        if lines is None:
            lines = [ENCODER.encode(record) for record in records]
        head = f'{{"kind":"{kind}","record":'
        return "".join([f"{head}{line}}}\n" for line in lines]).encode()

    def finish(self, kind: str, spools: list[str], out: IO[bytes], write: Write) -> None:
        copy_spools(spools, out, write)

    def require(self) -> None:
        """Nothing to install."""


class StdoutSink:
    """Tagged JSON lines on stdout (``--out-dir -``): each batch flushed before the state
    advances (at least once: a batch a crash cut short is written again).

    Spools go to the system's temporary directory, named after the state file (``owner``), so
    the next run on that state (under its lock) finds those a killed run left, and only those.
    """

    by_day = False

    def __init__(self, out: IO[bytes], write: Write = _write, *, owner: str = "") -> None:
        self.out = out
        self.write = write
        self.format = _Tagged()
        tag = owner_tag(owner)
        self._prefix = f"{SPOOL_PREFIX}{tag}-" if tag else SPOOL_PREFIX

    def check(self) -> None:
        """Nothing to check: stdout is open."""

    def spool(self) -> Spool:
        """A spool in the system's temporary directory."""
        return Spool(tempfile.gettempdir(), self.format, self.write, by_day=False,
                     prefix=self._prefix)  # fmt: skip

    def remove_stale_spools(self) -> None:
        """Delete the spools a killed run on the same state left (none without an owner: the
        temporary directory is shared, and others' spools are not ours to clean)."""
        if self._prefix == SPOOL_PREFIX:
            return
        folder = glob.escape(tempfile.gettempdir())
        _unlink(glob.glob(os.path.join(folder, self._prefix + "*.part")))

    def rollback(self, sizes: Mapping[str, int]) -> None:
        """Nothing can be taken back from a pipe."""

    def prepare(self, spools: list[Spool], run_id: str, seq: int) -> list[Move]:
        """Copy the spools to stdout in order and flush: nothing to publish."""
        for spool in spools:
            self.format.finish("-", list(spool.parts.values()), self.out, self.write)
        self.out.flush()
        return []

    def publish(self, moves: list[Move]) -> list[str]:
        """Nothing to rename."""
        return []

    def relative(self, path: str) -> str:
        """``path`` as it is (no output directory)."""
        return path

    def discard(self, moves: list[Move]) -> None:
        """Nothing to remove."""


Sink = DirSink | StdoutSink
