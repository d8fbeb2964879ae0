"""An override store that lives in this process only."""

from __future__ import annotations

import threading

from failopen._internal.forksafe import renew_locks_after_fork
from failopen.stores.override import Override

__all__ = ["MemoryStore"]


class MemoryStore:
    """Keeps the override in memory: one process sees it. The default store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        renew_locks_after_fork(self, "_lock")
        self._override: Override | None = None
        self._version = 0
        self._seen = 0

    def load(self) -> Override | None:
        """The override last saved (expired ones included; the flag drops those)."""
        with self._lock:
            self._seen = self._version
            return self._override

    def save(self, override: Override | None) -> None:
        """Keep this override, or lift it with None."""
        with self._lock:
            self._override = override
            self._version += 1

    def changed(self) -> bool:
        """True when a save happened since the last load."""
        return self._version != self._seen

    def describe(self) -> str:
        """Where the override lives, for logs."""
        return "memory: (this process only)"

    def __repr__(self) -> str:
        return "MemoryStore()"
