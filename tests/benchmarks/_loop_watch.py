"""How long an event loop was held: the longest gap a heartbeat task on it saw between turns."""

from __future__ import annotations

import asyncio
import time
from types import TracebackType

__all__ = ["LoopWatch"]


class LoopWatch:
    """``async with LoopWatch() as watch: ...``; then ``watch.worst`` (seconds) is the longest
    the loop went without giving the heartbeat a turn while the block ran."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._done = False
        self._beat: asyncio.Future[None] | None = None

    async def _heartbeat(self) -> None:
        last = time.perf_counter()
        while not self._done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            self.worst, last = max(self.worst, now - last), now

    async def __aenter__(self) -> LoopWatch:
        self._beat = asyncio.ensure_future(self._heartbeat())
        await asyncio.sleep(0)  # the heartbeat's first turn: it is watching from here
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._done = True
        assert self._beat is not None
        await self._beat
