"""An override store in a JSON file: every process on one machine shares it."""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

from failopen.exceptions import ConfigError, StoreError
from failopen.flag import Override

__all__ = ["FileStore"]

_MAX_BYTES = 64 * 1024


class FileStore:
    """Override in a JSON file, replaced atomically so a reader never sees half a write."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_absolute():
            raise ConfigError(f"FAILOPEN_STORE: the file store needs an absolute path, got {path}")
        if not self.path.parent.is_dir():
            raise ConfigError(
                f"FAILOPEN_STORE: directory {self.path.parent} does not exist; create it or "
                "choose another path"
            )
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None

    @classmethod
    def from_url(cls, url: str) -> FileStore:
        """``file:///var/run/failopen/override.json`` -> FileStore."""
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise ConfigError(
                f"FAILOPEN_STORE: {url!r} must look like file:///absolute/path/override.json"
            )
        return cls(unquote(parts.path))

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot stat {self.path}: {exc.strerror}") from None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def changed(self) -> bool:
        return self._signature() != self._seen

    def load(self) -> Override | None:
        with self._lock:
            signature = self._signature()
            if signature is None:
                self._seen = None
                return None
            try:
                with open(self.path, "rb") as fh:
                    raw = fh.read(_MAX_BYTES + 1)
            except FileNotFoundError:
                self._seen = None
                return None
            except OSError as exc:
                raise StoreError(f"cannot read {self.path}: {exc.strerror}") from None
            if len(raw) > _MAX_BYTES:
                raise StoreError(f"{self.path} is larger than {_MAX_BYTES} bytes")
            try:
                data = json.loads(raw)
            except ValueError:
                raise StoreError(f"{self.path} is not valid JSON") from None
            override = None if data is None else Override.from_json(data)
            self._seen = signature
            return override

    def save(self, override: Override | None) -> None:
        payload = json.dumps(None if override is None else override.to_json()).encode()
        with self._lock:
            try:
                fd, tmp = tempfile.mkstemp(
                    prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
                )
                try:
                    with os.fdopen(fd, "wb") as fh:
                        fh.write(payload)
                        fh.flush()
                        os.fsync(fh.fileno())
                    os.chmod(tmp, 0o644)
                    os.replace(tmp, self.path)
                except BaseException:
                    os.unlink(tmp)
                    raise
            except OSError as exc:
                raise StoreError(f"cannot write {self.path}: {exc.strerror}") from None

    def describe(self) -> str:
        return f"file://{self.path}"

    def __repr__(self) -> str:
        return f"FileStore({str(self.path)!r})"
