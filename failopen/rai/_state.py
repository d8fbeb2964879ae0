"""The state file of ``failopen rai sync``: where each public key's last run ended, the cohort ids
delivered in the last :data:`FORGET_AFTER` (each with the time to forget it: ids, never records),
and the renames of a batch's files still to do (written ahead: the next run completes them).

The file is JSON, replaced atomically (temporary file, fsync, rename, fsync of the directory), so
a crash at any point leaves either the old state or the new one, never half of either. A lock
file beside it (``<state>.lock``, held with ``flock``) makes a second run on the same state refuse
to start; the kernel drops the lock when its holder dies, even by ``kill -9``, so no stale lock
needs cleaning up.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, Any

from failopen.rai._arguments import MAX_WINDOW, format_rfc3339, parse_rfc3339
from failopen.rai.exceptions import RaiValidationError

__all__ = ["VERSION", "FORGET_AFTER", "StateError", "KeyState", "SyncState", "locked"]

#: 2: ``delivered`` maps an id to when to forget it (1: to the end of the window it was listed in,
#: forgotten with the lookback; read and converted). A failopen that reads only 1 refuses a 2.
#: 3: a 2 with ``renames`` pending, written only while a batch's files are not all renamed: a
#: failopen that does not know renames refuses it (it would leave delivered records hidden),
#: and reads every other state this one writes.
VERSION = 3
#: How long a delivered cohort id is remembered after the run that delivered it: twice the
#: 30-day reach a run lists (``--lookback`` at most), so no run can list it again after that.
FORGET_AFTER = 2 * MAX_WINDOW
_LAST = datetime(9000, 1, 1, tzinfo=timezone.utc)
# The day files of _sink.FILE_NAME (not imported: _sink imports this module).
_FILE_NAME = re.compile(r"(cohorts|sessions)-(\d{4}-\d{2}-\d{2}|undated)\.(jsonl|csv)")
# A rename the state may ask for: a sink's hidden temporary to a run's file, in one partition
# directory, so a hand-edited state can rename nothing else.
_PARTITION = r"/kind=(cohorts|sessions)/dt=(\d{4}-\d{2}-\d{2}|__HIVE_DEFAULT_PARTITION__)/"
_TEMP = re.compile(r"(/.*)" + _PARTITION + r"\.failopen-sync-[0-9a-f]{16}-[a-z0-9_]+\.part")
_FINAL = re.compile(r"(/.*)" + _PARTITION + r"\d{8}T\d{6}Z-[0-9a-f]{8}-\d{4,}\.[a-z0-9.]+")


class StateError(Exception):
    """The state file cannot be used (corrupt, another version, locked); nothing was changed."""


@dataclass
class KeyState:
    """One public key: listed through ``through``; ``delivered`` maps cohort id to the time to
    forget it (the end of the run that delivered it plus :data:`FORGET_AFTER`), whatever flags
    later runs use: a run lists at most 30 days behind where the previous one ended.
    ``since`` is where the key's first run started, recorded before it fetches anything: a first
    run killed before it completes is resumed from there without ``--since``."""

    through: str | None = None
    delivered: dict[str, str] = field(default_factory=dict)
    since: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"through": self.through, "delivered": self.delivered, "since": self.since}


@dataclass
class SyncState:
    """The whole state file."""

    path: str
    keys: dict[str, KeyState] = field(default_factory=dict)
    #: Left by an earlier release killed mid-append (read, never written): day file name -> its
    #: size before the append; the next run cuts those files back once.
    pending: dict[str, int] = field(default_factory=dict)
    #: (temporary, final) absolute paths of a batch recorded as delivered but not all renamed.
    renames: list[tuple[str, str]] = field(default_factory=list)
    #: True from the start of a run until it completes: the next run reports "resumed".
    running: bool = False
    exists: bool = False

    @classmethod
    def load(cls, path: str) -> SyncState:
        """The state at ``path``; an empty state when there is no file; StateError when unusable."""
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return cls(path)
        except OSError as exc:
            raise StateError(f"cannot read the state file {path}: {exc.strerror or exc}") from None
        try:
            return cls._parse(path, json.loads(data))
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise StateError(
                f"the state file {path} is not a valid sync state ({exc}); it was left as it is: "
                "restore it from a backup, or move it away and start again with --since"
            ) from None

    @classmethod
    def _parse(cls, path: str, body: Any) -> SyncState:
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        version = body.get("version")
        if version not in (1, 2, VERSION) or isinstance(version, bool):
            raise ValueError(f"version {version!r}, this failopen reads 1 to {VERSION}")
        keys: dict[str, KeyState] = {}
        for key, entry in body["keys"].items():
            through, since = entry["through"], entry.get("since")
            if through is not None and not isinstance(through, str):
                raise ValueError(f"keys.{key}.through is not a string")
            if since is not None and not isinstance(since, str):
                raise ValueError(f"keys.{key}.since is not a string")
            delivered = entry["delivered"]
            if not isinstance(delivered, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in delivered.items()
            ):
                raise ValueError(f"keys.{key}.delivered is not an object of strings")
            try:
                for stamp in (through, since, *delivered.values()):
                    # A run subtracts days from these: far from the start of datetime.
                    if stamp is not None and parse_rfc3339(stamp).year < 1970:
                        raise ValueError(f"keys.{key}: {stamp!r} is before 1970")
            except RaiValidationError as exc:
                raise ValueError(str(exc)) from None
            if version == 1:  # the end of a listing window: remembered from there on
                # (an end in year 9999, from an --until refused since, must not overflow)
                delivered = {
                    cohort: format_rfc3339(min(parse_rfc3339(end), _LAST) + FORGET_AFTER)
                    for cohort, end in delivered.items()
                }  # fmt: skip
            keys[key] = KeyState(through, dict(delivered), since)
        pending = body.get("pending") or {}
        if not isinstance(pending, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and v >= 0 and _FILE_NAME.fullmatch(k)
            for k, v in pending.items()
        ):
            raise ValueError("pending is not an object of file names and sizes")
        renames = body.get("renames") or []
        if not isinstance(renames, list) or not all(_is_rename(pair) for pair in renames):
            raise ValueError("renames is not a list of [temporary, final] in one partition")
        return cls(path, keys, dict(pending), [(t, f) for t, f in renames],
                   bool(body.get("running")), exists=True)  # fmt: skip

    def key(self, public_key: str) -> KeyState:
        """The state of one key, created empty when new."""
        return self.keys.setdefault(public_key, KeyState())

    def remove_stale_temporaries(self) -> None:
        """Delete the temporary files of a :meth:`save` killed before its rename (under the lock).

        Only names :meth:`save` makes: ``.<state name>.``, mkstemp's eight characters, ``.tmp``.
        """
        folder = os.path.dirname(os.path.abspath(self.path))
        name = re.compile(re.escape(f".{os.path.basename(self.path)}.") + r"[a-z0-9_]{8}\.tmp")
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                if name.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)

    def save(self) -> None:
        """Replace the state file atomically and durably."""
        body: dict[str, Any] = {
            "version": VERSION if self.renames else 2,
            "running": self.running,
            "keys": {key: self.keys[key].to_json() for key in sorted(self.keys)},
        }
        if self.renames:
            body["renames"] = [list(pair) for pair in self.renames]
        folder = os.path.dirname(os.path.abspath(self.path))
        fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(self.path)}.", suffix=".tmp",
                                    dir=folder)  # fmt: skip
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(body, f, separators=(",", ":"), sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        fsync_dir(folder)
        self.exists = True


def _is_rename(pair: Any) -> bool:
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
        return False
    temp, final = _TEMP.fullmatch(pair[0]), _FINAL.fullmatch(pair[1])
    return bool(temp and final and temp.groups() == final.groups() and "/../" not in temp[1] + "/")


def fsync_dir(folder: str) -> None:
    """Make a rename or a new file in ``folder`` durable (a no-op where directories can't sync)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(state_path: str) -> Iterator[IO[str]]:
    """Hold ``<state_path>.lock`` for the block; StateError at once when another run holds it."""
    lock_path = state_path + ".lock"
    try:
        handle = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 (held across the yield)
    except OSError as exc:
        raise StateError(f"cannot open the lock file {lock_path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StateError(
                    f"another failopen rai sync is running with the state file {state_path} "
                    f"(it holds {lock_path}); this run did nothing"
                ) from None
            raise
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")  # for the curious operator; the flock is the lock
        handle.flush()
        yield handle
    finally:
        handle.close()
