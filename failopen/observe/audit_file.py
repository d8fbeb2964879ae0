"""The audit file: one JSON line per request admitted without a check (``FAILOPEN_AUDIT_FILE``),
and one each time this process's flag turned off or back on.

What a security team reviews after an outage (``failopen audit windows FILE``). A line::

    {"time": "2026-11-23T18:01:02.123Z", "window": "watcher:2026-11-23T18:00:57Z",
     "path": "/login", "client": "203.0.113.9", "ua": "sha256:9f86d081884c7d65",
     "outcome": "bypassed_flag_off", "reason": "enforcement off (watcher): ...", "pid": 4711}

- ``ua`` is the first 16 hex digits of a plain SHA-256 of the User-Agent header (unsalted, so
  the same browser has the same hash in every process and every file: lines correlate; the
  header itself, often unique enough to follow a person, is not kept).
- ``window`` names one bypass window: the flag's source and the second it turned off. An
  override's time comes from the shared store, so every process of a fleet writes the same id;
  a status-page window starts when each process saw the outage, so processes differ by seconds
  and ``failopen audit windows`` joins overlapping windows of the same source into one.
- When the flag turns, a line with ``event`` (``enforcement_off`` | ``enforcement_back``) in place
  of ``path``, ``client``, ``ua`` and ``outcome`` names the window that opened or ended.
- Paths, clients and reasons are cut to a bounded length, and JSON escapes every control
  character: a request cannot forge a line.

Requests never wait for the disk: :meth:`AuditFile.record` appends a tuple to a bounded queue
(never blocks: when it is full the line is dropped and counted), and a daemon thread
(``failopen.audit-writer``) formats and appends. Lines are appended with ``O_APPEND`` in whole
lines, so several processes may share one file; the file rotates by size like
``logging.handlers.RotatingFileHandler`` (``file.1`` .. ``file.N``). Disk errors are counted and
logged once per kind of error, never raised.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import errno
import functools
import hashlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from datetime import datetime, timezone
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from failopen._internal.forksafe import BackgroundThread
from failopen.exceptions import ConfigError

__all__ = [
    "AuditFile", "DEFAULT_AUDIT_BACKUPS", "DEFAULT_AUDIT_MAX_BYTES", "check_audit_path",
    "hash_user_agent", "window_id",
]

logger = logging.getLogger("failopen.audit")

#: Defaults of FAILOPEN_AUDIT_MAX_BYTES (10 MiB) and FAILOPEN_AUDIT_BACKUPS.
DEFAULT_AUDIT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_AUDIT_BACKUPS = 5
#: Lines waiting for the writer; beyond this, lines are dropped (and counted), never waited for.
QUEUE_SIZE = 10_000
# Flag-turn lines queued beyond QUEUE_SIZE: kept through a flood of bypassed requests.
_MARK_RESERVE = 64
# Lengths kept of what the caller chose: a line stays small, and one write() each.
_MAX_PATH, _MAX_CLIENT, _MAX_REASON = 512, 100, 300
# A chunk written in one call: whole lines only, so processes sharing a file never interleave.
_CHUNK = 64 * 1024
# Not on every platform (Windows has none): there, links are left to the directory's permissions.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# The writer looks for lines at least this often (seconds) without being woken.
_POLL = 0.25

Writer = Callable[[int, bytes], int]
# (time, path (None: the flag turned), client, User-Agent, outcome or event, reason, window)
Entry = tuple[float, str | None, str, str, str, str, str]


def check_audit_path(path: object, setting: str = "FAILOPEN_AUDIT_FILE") -> str:
    """The absolute path, checked where it will be written; ConfigError naming ``setting``."""
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        raise ConfigError(f"{setting}: expected a file path, got {path!r}")
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        raise ConfigError(f"{setting}: {path!r} is a directory; give a file path such as "
                          "/var/log/failopen/audit.jsonl")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(f"{setting}: the directory {directory!r} does not exist; create it "
                          "(writable by the server's user) or choose another path")
    if not os.access(directory, os.W_OK | os.X_OK):
        # Rotation renames inside the directory: the file alone being writable is not enough.
        raise ConfigError(f"{setting}: the directory {directory!r} is not writable by this "
                          "process (user id %d); fix its permissions or choose another path"
                          % os.getuid())
    if os.path.islink(path):
        # The writer never follows a link (see AuditFile._open): refused now, not line by line.
        raise ConfigError(f"{setting}: {path!r} is a symbolic link; the audit file is written "
                          "only under its own name (rotation renames it): give the real path")
    if os.path.exists(path) and (not os.path.isfile(path) or not os.access(path, os.W_OK)):
        raise ConfigError(f"{setting}: {path!r} exists but is not a writable regular file")
    # Absolute: a server that changes directory after start-up still writes where it was told.
    return os.path.abspath(path)


def hash_user_agent(user_agent: str) -> str:
    """``sha256:`` and the first 16 hex digits of the User-Agent's SHA-256 ("" when absent)."""
    if not user_agent:
        return ""
    digest = hashlib.sha256(user_agent.encode("utf-8", "surrogateescape")).hexdigest()
    return "sha256:" + digest[:16]


# A few browsers send most requests: hash each User-Agent once. Only ordinary lengths are cached
# (and queued as they are): a longer one is hashed as it is queued, so neither the cache nor the
# queue holds strings of an attacker's choosing at full length.
_hash_cached = functools.lru_cache(maxsize=4096)(hash_user_agent)
_MAX_UA_KEPT = 512


class _Hashed(str):
    """A User-Agent already hashed (it was too long to queue)."""

    __slots__ = ()


def _ua_field(user_agent: str) -> str:
    return user_agent if isinstance(user_agent, _Hashed) else _hash_cached(user_agent)


def window_id(source: str, since: float) -> str:
    """The id of the bypass window that began at ``since`` (seconds) from ``source``."""
    try:
        moment = datetime.fromtimestamp(int(since), tz=timezone.utc)
    except (ValueError, OverflowError, OSError, TypeError):
        return f"{source}:unknown"
    return f"{source}:{moment.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _time(timestamp: float) -> str:
    moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


_open_files: weakref.WeakSet[AuditFile] = weakref.WeakSet()


@atexit.register
def _write_on_exit() -> None:
    # The writer is a daemon thread: without this, lines queued at exit would be lost.
    for audit_file in list(_open_files):
        with contextlib.suppress(Exception):
            audit_file.close()


class AuditFile(BackgroundThread):
    """Appends bypass lines to a rotating JSON-lines file from a background thread. Never raises
    into a caller of :meth:`record`."""

    def __init__(
        self,
        path: str,
        *,
        max_bytes: int = DEFAULT_AUDIT_MAX_BYTES,
        backups: int = DEFAULT_AUDIT_BACKUPS,
        queue_size: int = QUEUE_SIZE,
        write: Writer = os.write,
        time_now: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(name="failopen.audit-writer", logger=logger)
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self._write = write
        self._now = time_now
        self.queue_size = queue_size
        self._pending: collections.deque[Entry] = collections.deque()
        self._wake = threading.Event()
        self._fd: int | None = None
        self._pid = os.getpid()
        self._counts_lock = threading.Lock()
        self.written = self.dropped = self.failed = 0
        self._dropped_told = 0
        self._last_error: str | None = None
        self._busy = False
        self._second, self._stamp = -1, ""
        _open_files.add(self)

    def __repr__(self) -> str:
        return f"AuditFile({self.path!r}, max_bytes={self.max_bytes}, backups={self.backups})"

    def stats(self) -> dict[str, int]:
        """Lines written, dropped (queue full) and failed (disk errors) by this process."""
        return {"written": self.written, "dropped": self.dropped, "failed": self.failed}

    def record(self, path: str, client: str, user_agent: str, outcome: str, reason: str,
               window: str) -> None:
        """Queue one line (per request: a tuple and an append, never a wait). Never raises."""
        try:
            self.ensure_running()
            pending = self._pending
            if len(pending) >= self.queue_size:
                with self._counts_lock:
                    self.dropped += 1
                return
            if len(user_agent) > _MAX_UA_KEPT:
                user_agent = _Hashed(hash_user_agent(user_agent))
            # deque.append is atomic: no lock and no wake-up per request; the writer wakes on
            # the first line of a batch and otherwise polls. Cut here: a queued line holds no
            # more of what the request sent than the line will.
            pending.append((self._now(), _cut(path, _MAX_PATH), _cut(client, _MAX_CLIENT),
                            user_agent, outcome, _cut(reason, _MAX_REASON), window))
            if len(pending) == 1:
                self._wake.set()
        except Exception:  # noqa: BLE001 - the request goes on whatever happens here
            with self._counts_lock:
                self.failed += 1

    def mark(self, event: str, window: str, reason: str) -> None:
        """Queue a line saying the flag turned (``enforcement_off`` or ``enforcement_back``), so
        a review sees when a window ended, not only its last bypassed request. Never raises."""
        try:
            self.ensure_running()
            # Beyond a queue full of bypassed requests (a flood as an outage ends): this is the
            # line a review needs most, and there are few (one per turn of the flag).
            if len(self._pending) >= self.queue_size + _MARK_RESERVE:
                with self._counts_lock:
                    self.dropped += 1
                return
            self._pending.append((self._now(), None, "", "", event, _cut(reason, _MAX_REASON),
                                  window))
            self._wake.set()
        except Exception:  # noqa: BLE001 - called from a flag listener: never into it
            with self._counts_lock:
                self.failed += 1

    def drain(self, timeout: float = 5.0) -> None:
        """Return once every line queued so far is written (or failed); for shutdown and tests."""
        deadline = time.monotonic() + timeout
        while self.running and time.monotonic() < deadline:
            with self._counts_lock:
                idle = not self._pending and not self._busy
            if idle:
                return
            self._wake.set()
            time.sleep(0.002)
        if not self.running:  # no thread (stopped, or never started): write from here
            self._append(self._take_all())

    def close(self) -> None:
        """Write what is queued, stop the thread and close the file."""
        self.drain()
        self.stop()
        self._append(self._take_all())  # anything queued while the thread ended
        self._close_fd()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the writer thread (lines still queued stay queued)."""
        self._stop.set()
        self._wake.set()  # at once, not at the next poll
        super().stop(timeout)

    def _after_fork(self) -> None:
        # The parent's descriptor and lines are the parent's: a child starts its own.
        self._counts_lock = threading.Lock()
        self._pending = collections.deque()
        self._wake = threading.Event()
        self._fd = None
        self._busy = False
        self._pid = os.getpid()

    # --- the writer thread ------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(_POLL)
            self._wake.clear()
            with self._counts_lock:
                self._busy = True
            try:
                self._append(self._take_all())
            finally:
                with self._counts_lock:
                    self._busy = False
            self._tell_drops()

    def _take_all(self) -> list[Entry]:
        pending = self._pending
        batch: list[Entry] = []
        while pending:
            batch.append(pending.popleft())
        return batch

    def _append(self, batch: list[Entry]) -> None:
        if not batch:
            return
        lines = [self._line(entry) for entry in batch]
        done = 0
        try:
            fd = self._open()
            chunk: list[bytes] = []
            size = 0
            for line in lines:
                if size + len(line) > _CHUNK and chunk:
                    fd = self._flush(fd, chunk, size)
                    done += len(chunk)
                    chunk, size = [], 0
                chunk.append(line)
                size += len(line)
            self._flush(fd, chunk, size)
        except OSError as exc:
            self._close_fd()
            self._failed(exc, len(lines) - done)
        else:
            self._recovered()

    def _flush(self, fd: int, chunk: list[bytes], size: int) -> int:
        fd = self._rotate_if_due(fd, size)
        data = b"".join(chunk)
        while data:
            written = self._write(fd, data)
            if written <= 0:  # a writer that makes no progress must not spin this thread
                raise OSError(errno.EIO, "write made no progress")
            data = data[written:]
        with self._counts_lock:
            self.written += len(chunk)
        return fd

    def _line(self, entry: Entry) -> bytes:
        at, path, client, user_agent, outcome, reason, window = entry
        second = int(at)
        if second != self._second:  # one calendar conversion per second, not per line
            self._second, self._stamp = second, _time(second)[:-5]
        stamp = f"{self._stamp}.{int((at - second) * 1000):03d}Z"
        # The JSON encoder's ASCII quoting: every control and non-ASCII character is escaped,
        # so a line is a line. Keys in a fixed order, built by hand: the writer keeps up.
        if path is None:  # the flag turned: no request, so no path, client or User-Agent
            return (f'{{"time": "{stamp}", "window": {_quote(window)}, '
                    f'"event": {_quote(outcome)}, "reason": {_quote(reason)}, '
                    f'"pid": {self._pid}}}\n').encode("ascii")
        return (
            f'{{"time": "{stamp}", "window": {_quote(window)}, '
            f'"path": {_quote(_cut(path, _MAX_PATH))}, '
            f'"client": {_quote(_cut(client, _MAX_CLIENT))}, '
            f'"ua": "{_ua_field(user_agent)}", "outcome": {_quote(outcome)}, '
            f'"reason": {_quote(_cut(reason, _MAX_REASON))}, "pid": {self._pid}}}\n'
        ).encode("ascii")

    def _open(self) -> int:
        fd = self._fd
        if fd is not None:
            try:
                # Another process (or a logrotate) moved the file away: follow the name.
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except OSError:
                pass
            self._close_fd()
        self._pid = os.getpid()
        # O_NOFOLLOW: whoever may write to the log directory must not be able to plant a link
        # there (after a rotation or a logrotate move) and have requests' lines appended to any
        # file this process may write. A link is an error, counted and logged like a full disk.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o640)
        return self._fd

    def _rotate_if_due(self, fd: int, adding: int) -> int:
        size = os.fstat(fd).st_size
        if size == 0 or size + adding <= self.max_bytes:
            return fd
        self._close_fd()
        for n in range(self.backups - 1, 0, -1):
            older = f"{self.path}.{n}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{n + 1}")
        if os.path.exists(self.path):
            os.replace(self.path, f"{self.path}.1")
        return self._open()

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _failed(self, exc: OSError, lost: int) -> None:
        with self._counts_lock:
            self.failed += lost
        kind = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        if kind != self._last_error:  # once per change: a full disk must not flood the log
            self._last_error = kind
            logger.error("audit file %s: cannot write (%s: %s); %d line(s) lost so far, "
                         "requests go on", self.path, kind, exc.strerror or exc, self.failed,
                         extra={"event": "failopen.audit_file_failed", "file": self.path,
                                "error": kind, "lost": self.failed})

    def _recovered(self) -> None:
        if self._last_error is not None:
            logger.warning("audit file %s: writing again after %s; %d line(s) were lost",
                           self.path, self._last_error, self.failed,
                           extra={"event": "failopen.audit_file_back", "file": self.path,
                                  "error": self._last_error, "lost": self.failed})
            self._last_error = None

    def _tell_drops(self) -> None:
        dropped = self.dropped
        if dropped != self._dropped_told:
            self._dropped_told = dropped
            logger.warning("audit file %s: %d line(s) dropped so far: more bypasses than the "
                           "writer keeps up with (queue of %d)", self.path, dropped,
                           self.queue_size,
                           extra={"event": "failopen.audit_file_dropped", "file": self.path,
                                  "dropped": dropped})


def describe(stats: dict[str, Any]) -> str:
    """``written=.. dropped=.. failed=..`` for a log line."""
    return " ".join(f"{key}={value}" for key, value in stats.items())
