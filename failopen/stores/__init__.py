"""Where overrides live, so every worker process that serves requests sees the same one.

* ``memory:`` — this process only (the default; fine for one worker).
* ``file:///path/to/override.json`` — every process on one machine. Writes are atomic
  (write, fsync, rename); readers poll a cheap ``lstat`` about once a second, off the request path.
  Whoever can write that file can switch enforcement off, so the file store trusts only what this
  user or root could have written: the directory must be owned by this user or root and not
  group- or world-writable (never ``/tmp``; use e.g. ``mkdir -m 0755 /run/failopen``), and the
  file must be a regular file (no symlink), owned by this user or root, not group- or
  world-writable. A bad directory is a ConfigError at start-up; a bad file is a StoreError, and
  the flag keeps the override it last knew.

A store answers three questions: what is the override (``load``), is there possibly a newer one
than I last loaded (``changed``, cheap), and record this one (``save``; None lifts it).
"""

from __future__ import annotations

from typing import Protocol

from failopen.exceptions import ConfigError
from failopen.flag import Override

__all__ = ["OverrideStore", "open_store"]


class OverrideStore(Protocol):
    """Storage for the operator override shared by a fleet of processes."""

    def load(self) -> Override | None:
        """The stored override (expired ones included; the flag drops those). Raises StoreError."""
        ...

    def save(self, override: Override | None) -> None:
        """Store an override, or lift it with None. Raises StoreError."""
        ...

    def changed(self) -> bool:
        """Cheap: may ``load`` return something other than last time? Raises StoreError."""
        ...

    def describe(self) -> str:
        """Where the override lives, for logs and ``failopen override show``."""
        ...


def open_store(url: str) -> OverrideStore:
    """Open the store named by a ``FAILOPEN_STORE`` URL."""
    from failopen.stores.file import FileStore
    from failopen.stores.memory import MemoryStore

    if url == "memory:" or url.startswith("memory:"):
        return MemoryStore()
    if url.startswith("file://"):
        return FileStore.from_url(url)
    raise ConfigError(
        f"FAILOPEN_STORE: {url!r} is not supported in this version; use memory: or file:///path"
    )
