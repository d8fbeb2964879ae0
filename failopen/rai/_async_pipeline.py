"""One list call's requests on an asyncio task, each sent as soon as the answer before it is in.

The asyncio twin of ``_pipeline.py``, with the same contract (:meth:`take`, :meth:`redirect`,
:meth:`close`), so that ``_async_client.py`` and the ``_client.py`` generated from it share one
paging loop. The two cannot be written once: the blocking one is a thread handing answers over
under a condition, this one is a task that is cancelled when its answer is no longer wanted.
As there, the next request is guessed from the raw answer (:meth:`Pager.guess_after`) and sent
before the consumer decodes it; the consumer corrects a wrong guess; at most one page is fetched
ahead of the one it holds.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

from failopen.rai._arguments import Params
from failopen.rai._pipeline import Answer

__all__ = ["Pipeline"]

_HEAD_START_TURNS = 8


class Pipeline:
    """Requests of one list call, each on a task; answers taken in order by one consumer.

    ``request(params, unwanted)`` sends one request and returns the body of its 2xx answer
    (retries included) or raises; ``unwanted()`` turns true once its answer would be dropped (a
    wrong guess, or closed), so it stops retrying. ``guess`` gives the request most likely to
    follow an answer, or None. Must be made with an event loop running (inside the paging
    generator); :meth:`close` never awaits, so it may run in a generator's finaliser.
    """

    def __init__(
        self,
        request: Callable[[Params, Callable[[], bool]], Awaitable[bytes]],
        guess: Callable[[Params, bytes], Params | None],
        first: Params,
        name: str = "failopen.rai.pages",
    ) -> None:
        self._request = request
        self._guess = guess
        self._name = name
        self._generation = 0
        self._closed = False
        # Hashes of the requests sent: a guess never repeats one, so a service returning the
        # same cursor again costs no request before the consumer sees it.
        self._sent: set[int] = set()
        self._task: asyncio.Task[Answer] | None = None
        # Cancelled fetches until they end: drain() waits for them.
        self._dropped: set[asyncio.Task[Answer]] = set()
        self._start(first)

    def _unwanted(self, generation: int) -> bool:
        return self._closed or generation != self._generation

    def _start(self, params: Params) -> None:
        self._sent.add(hash(tuple(params)))
        unwanted = functools.partial(self._unwanted, self._generation)
        self._task = asyncio.get_running_loop().create_task(
            self._fetch(params, unwanted), name=self._name
        )

    async def _fetch(self, params: Params, unwanted: Callable[[], bool]) -> Answer:
        try:
            body = await self._request(params, unwanted)
            guessed = self._guess(params, body)
        except Exception as exc:  # raised where the consumer takes this answer
            return Answer(params, None, exc, None)
        if guessed is not None and hash(tuple(guessed)) in self._sent:
            guessed = None
        return Answer(params, body, None, guessed)

    async def _head_start(self) -> None:
        """Give the next request a few turns of the event loop before the consumer goes on.

        Scheduling a task does not run it: without these turns the request would leave only
        when the consumer next awaits, after it has built models of and written the current
        page. httpx needs about three turns to put a request on a reused connection; the task
        then waits for the answer, and the remaining turns cost microseconds. A fetch that is
        still connecting continues whenever the consumer awaits.
        """
        task = self._task
        for _ in range(_HEAD_START_TURNS):
            if task is None or task.done():
                return
            await asyncio.sleep(0)

    async def take(self) -> Answer:
        """The next answer, waiting for it; the guessed request after it is sent at once."""
        if self._task is None:
            raise RuntimeError("the pipeline is closed")
        answer = await self._task  # the answer's own failure is in it, not raised
        self._task = None
        if answer.guessed is not None:
            self._start(answer.guessed)
            await self._head_start()
        return answer

    async def redirect(self, params: Params) -> None:
        """The guess after the last answer taken was wrong: drop its answer, send ``params``."""
        self._drop()
        self._start(params)
        await self._head_start()

    def close(self) -> None:
        """Stop sending; the request on its way is cancelled, never awaited."""
        self._closed = True
        self._drop()

    async def drain(self, timeout: float) -> None:
        """Once closed: wait, at most ``timeout`` seconds, for the cancelled fetches to end (the
        client waits so before it closes the connections they may be using)."""
        if self._dropped:
            await asyncio.wait(set(self._dropped), timeout=timeout)

    def _drop(self) -> None:
        self._generation += 1
        task = self._task
        if task is not None:
            task.cancel()
            task.add_done_callback(_collect)  # so an outcome nobody takes is not logged
            self._dropped.add(task)
            task.add_done_callback(self._dropped.discard)
            self._task = None


def _collect(task: asyncio.Task[Answer]) -> None:
    if not task.cancelled():
        task.exception()
