"""One WARNING per process when the server runs several workers and the outage fallback keeps its
count in each one's memory (issue 31, item 10).

Without a Redis store the outage rate limit and the used fallback solutions live in the
process: under ``gunicorn -w 4`` each worker admits its own 20/minute per client, and a
solution used at one worker is accepted once more at each other. ``failopen check`` guesses
from ``WEB_CONCURRENCY`` and ``GUNICORN_CMD_ARGS``, but the workers count is usually on the
command line, where it cannot look. The server itself says so: a WSGI server sets
``wsgi.multiprocess`` in every request's environ (gunicorn: true with more than one worker). So
the adapters hand the first request's word to :meth:`PerWorkerMemory.server_says`, once per
process; after that a request pays one attribute read.

ASGI carries no such word: uvicorn's ``--workers`` children are spawned processes, but so is
its ``--reload`` child, one process; so nothing is said there (the docs say why).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

__all__ = ["RATE", "USED", "PerWorkerMemory"]

logger = logging.getLogger("failopen")

#: What a process may keep for itself.
RATE, USED = "the outage rate limit", "the used fallback solutions"


class PerWorkerMemory:
    """Says, once per process, what several workers make of the count kept in memory."""

    def __init__(self, kept: Sequence[str], *, rate: str) -> None:
        #: What each process keeps for itself (:data:`RATE`, :data:`USED`); empty: nothing.
        self.kept = tuple(kept)
        self.rate = rate
        #: True until a server's word was heard in this process (read on every request).
        self.pending = bool(self.kept)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PerWorkerMemory(kept={self.kept!r}, pending={self.pending})"

    def server_says(self, several: object, *, adapter: str, how: str) -> None:
        """``several``: the server's word (``wsgi.multiprocess``: only ``True`` counts). Logs
        the WARNING the first time in this process it is true; never raises."""
        with self._lock:
            if not self.pending:
                return
            self.pending = False
        if several is not True:
            return
        what = []
        if RATE in self.kept:
            what.append(f"each worker admits its own {self.rate} per client and route")
        if USED in self.kept:
            what.append("a fallback solution used at one worker is accepted once more at each "
                        "other")
        logger.warning(
            "failopen (%s): the server runs several worker processes (%s), and %s %s kept in "
            "each one's memory (no Redis store): during an outage %s. Set "
            "FAILOPEN_STORE=redis://... to share %s (see Fleet mode in the manual)",
            adapter, how, " and ".join(self.kept), "are" if len(self.kept) > 1 else "is",
            ", and ".join(what), "them" if len(self.kept) > 1 else "it",
            extra={"event": "failopen.memory_per_worker", "adapter": adapter,
                   "kept": list(self.kept)})
