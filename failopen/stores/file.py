"""An override store in a JSON file: every process on one machine shares it.

Whoever can write the override file can switch enforcement off, so the store only trusts a file
that nobody but this user (or root) could have put there:

* The directory (after resolving symlinks, once, at start-up) must be owned by this process's
  effective user or by root, and writable by neither group nor others: in ``/tmp`` or any other
  shared directory, anyone could plant or replace the file. Every directory above it must be
  owned by this user or root too and, unless it has the sticky bit (``/tmp``), not be group- or
  other-writable, since whoever can write a parent can swap the whole directory.
  A directory that breaks a rule is a ConfigError at start-up that says what to change.
* The file itself must be a regular file (a symlink is refused, never followed), owned by this
  user or root, and writable by neither group nor others. Anything else is a StoreError; the
  flag then keeps the override it last knew (see ``EnforcementFlag.refresh``).

Writes go to a new temporary file (created exclusively, mode 0644) in the same directory, are
fsynced, then renamed over the old file, so a reader never sees half a write.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.exceptions import ConfigError, StoreError
from failopen.stores.override import Override
from failopen.stores.urls import mask_url

__all__ = ["FileStore", "parse_file_url"]

_MAX_BYTES = 64 * 1024
_TRUSTED_OWNERS_HINT = "owned by this user or root"

# What we compare to tell whether the file may have changed since the last load.
_Signature = tuple[int, int, int, int, int, int]


def _signature(st: os.stat_result) -> _Signature:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_mode)


def _trusted_owner(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def _check_directory(directory: Path) -> None:
    """ConfigError unless only this user (or root) can change what ``directory`` contains."""
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        raise ConfigError(
            f"FAILOPEN_STORE: directory {directory} does not exist; create it "
            "(e.g. mkdir -m 0755 /run/failopen) or choose another path"
        ) from None
    except OSError as exc:
        raise ConfigError(f"FAILOPEN_STORE: cannot stat directory {directory}: {exc.strerror}") \
            from None
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"FAILOPEN_STORE: {directory} is not a directory")
    mode = stat.S_IMODE(st.st_mode)
    if not _trusted_owner(st.st_uid):
        raise ConfigError(
            f"FAILOPEN_STORE: directory {directory} is owned by uid {st.st_uid}, who could "
            f"replace the override file; use a directory {_TRUSTED_OWNERS_HINT} (uid "
            f"{os.geteuid()}), e.g. mkdir -m 0755 /run/failopen"
        )
    if mode & 0o022:
        raise ConfigError(
            f"FAILOPEN_STORE: directory {directory} is writable by other users (mode {mode:04o}); "
            "use a directory only its owner can write, e.g. mkdir -m 0755 /run/failopen"
        )
    # Whoever can write a parent can rename this directory away and put their own in its place,
    # unless the parent is sticky (like /tmp): then only the owner of an entry may rename it.
    for parent in directory.parents:
        try:
            pst = os.stat(parent)
        except OSError as exc:
            raise ConfigError(f"FAILOPEN_STORE: cannot stat directory {parent}: {exc.strerror}") \
                from None
        pmode = stat.S_IMODE(pst.st_mode)
        if not _trusted_owner(pst.st_uid) or (pmode & 0o022 and not pmode & stat.S_ISVTX):
            raise ConfigError(
                f"FAILOPEN_STORE: directory {parent} (owner uid {pst.st_uid}, mode {pmode:04o}) "
                f"lets other users replace {directory}; keep the store under directories "
                f"{_TRUSTED_OWNERS_HINT} that only their owner can write, "
                "e.g. mkdir -m 0755 /run/failopen"
            )


def _check_path(path: Path) -> Path:
    """``path`` if it can name the override file (no I/O), else ConfigError."""
    if not path.is_absolute():
        raise ConfigError(f"FAILOPEN_STORE: the file store needs an absolute path, got {path}")
    if path.name in ("", ".", ".."):
        raise ConfigError(
            f"FAILOPEN_STORE: {path} names a directory; give a file, e.g. "
            "file:///run/failopen/override.json"
        )
    return path


def parse_file_url(url: str) -> Path:
    """The path of ``file:///absolute/path/override.json`` (no I/O), else ConfigError.

    Only a local path: a host or credentials (``file://user:pw@host/...``) are refused, and the
    message shows the URL masked.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.netloc not in ("", "localhost") or not parts.path:
        raise ConfigError(
            f"FAILOPEN_STORE: {mask_url(url)} must look like file:///absolute/path/override.json"
        )
    return _check_path(Path(unquote(parts.path)))


class FileStore:
    """Override in a JSON file, replaced atomically so a reader never sees half a write.

    Only a file that this user or root wrote is trusted; see the module docstring for the rules.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = _check_path(Path(path))
        # Resolve the directory once, check the real one, and only ever use the real one: a
        # symlinked directory cannot be re-pointed somewhere else after the check.
        directory = Path(os.path.realpath(self.path.parent))
        _check_directory(directory)
        self._real = directory / self.path.name
        self._lock = threading.Lock()
        renew_locks_after_fork(self, "_lock")
        self._seen: _Signature | None = None

    @classmethod
    def from_url(cls, url: str) -> FileStore:
        """``file:///var/run/failopen/override.json`` -> FileStore."""
        return cls(parse_file_url(url))

    def _current(self) -> _Signature | None:
        # lstat: a symlink swapped in for the file counts as a change, which load then refuses.
        try:
            st = os.lstat(self._real)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot stat {self.path}: {exc.strerror}") from None
        return _signature(st)

    def changed(self) -> bool:
        """Cheap: has the file (or what stands at its path) changed since the last load?"""
        return self._current() != self._seen

    def load(self) -> Override | None:
        """The stored override, after checking who wrote the file. Raises StoreError.

        A file refused once it is open counts as seen: ``changed`` stays False until it changes
        again, so a server logs the refusal once per change, not on every refresh.
        """
        with self._lock:
            try:
                # O_NOFOLLOW: never read through a symlink. O_NONBLOCK: a FIFO cannot hang us
                # before the fstat below refuses it (it does nothing for a regular file).
                fd = os.open(
                    self._real,
                    os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                )
            except FileNotFoundError:
                self._seen = None
                return None
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EMLINK):  # EMLINK: O_NOFOLLOW on BSDs
                    raise StoreError(
                        f"refusing {self.path}: it is a symbolic link; the override file must "
                        "be a regular file written by failopen"
                    ) from None
                raise StoreError(f"cannot read {self.path}: {exc.strerror}") from None
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                try:
                    override = self._read(fh, st)
                finally:
                    # The signature of the file actually read (not a fresh lstat, which could
                    # be a newer file written meanwhile, then never loaded).
                    self._seen = _signature(st)
            return override

    def _read(self, fh: BinaryIO, st: os.stat_result) -> Override | None:
        self._check_file(st)
        if st.st_size > _MAX_BYTES:
            raise StoreError(f"{self.path} is larger than {_MAX_BYTES} bytes")
        try:
            raw = fh.read(_MAX_BYTES + 1)
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc.strerror}") from None
        if len(raw) > _MAX_BYTES:
            raise StoreError(f"{self.path} is larger than {_MAX_BYTES} bytes")
        try:
            data = json.loads(raw)
        except ValueError:
            raise StoreError(f"{self.path} is not valid JSON") from None
        return None if data is None else Override.from_json(data)

    def _check_file(self, st: os.stat_result) -> None:
        """StoreError unless the opened file is one only this user or root could have written."""
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(f"refusing {self.path}: it is not a regular file")
        if not _trusted_owner(st.st_uid):
            raise StoreError(
                f"refusing {self.path}: it is owned by uid {st.st_uid}, not by this user "
                f"(uid {os.geteuid()}) or root; remove it and place the override again"
            )
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o022:
            raise StoreError(
                f"refusing {self.path}: it is writable by other users (mode {mode:04o}); "
                f"chmod 0644 {self.path} or place the override again"
            )

    def save(self, override: Override | None) -> None:
        """Write the override atomically (None lifts it). Raises StoreError."""
        payload = json.dumps(
            None if override is None else override.to_json(), allow_nan=False
        ).encode()
        with self._lock:
            try:
                # mkstemp: O_CREAT | O_EXCL (and O_NOFOLLOW), mode 0600, in the checked directory.
                fd, tmp = tempfile.mkstemp(
                    prefix=f".{self._real.name}.", suffix=".tmp", dir=self._real.parent
                )
                try:
                    with os.fdopen(fd, "wb") as fh:
                        os.fchmod(fh.fileno(), 0o644)
                        fh.write(payload)
                        fh.flush()
                        os.fsync(fh.fileno())
                    os.replace(tmp, self._real)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
            except OSError as exc:
                raise StoreError(f"cannot write {self.path}: {exc.strerror}") from None

    def describe(self) -> str:
        """The store URL, for logs and ``failopen override show``."""
        return f"file://{self.path}"

    def __repr__(self) -> str:
        return f"FileStore({str(self.path)!r})"
