"""One list call's requests on a fetching thread, each sent as soon as the answer before it is in.

A page's cursor is at the end of its answer: :meth:`Pager.guess_after` reads it from the raw
bytes, so the fetching thread sends the next request the moment an answer arrives, before anyone
decodes it (the decode is most of the client's CPU per page, and under a busy GIL it used to keep
each cursor waiting for tens of milliseconds). The consumer then decodes the page and works out the
real next request (:meth:`Pager.after`); when the guess was wrong (an answer the guess misread),
the guessed answer is dropped unread and the right request sent. So the consumer sees exactly the
pages of sequential paging, and at most one page is fetched ahead of the one it holds.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass

from failopen.rai._arguments import Params

__all__ = ["Answer", "Pipeline"]


@dataclass
class Answer:
    """The answer to one request, and the request the fetching thread sent after it (if any)."""

    params: Params
    body: bytes | None
    error: BaseException | None
    guessed: Params | None


class Pipeline:
    """Requests of one list call, sent from a daemon thread; answers taken in order by one consumer.

    ``request(params, unwanted)`` sends one request and returns the body of its 2xx answer
    (retries included) or raises; ``unwanted()`` turns true once its answer would be dropped (a
    wrong guess, or closed), so it stops retrying. ``guess`` gives the request most likely to
    follow an answer, or None. The thread sends
    the next request only while the consumer holds no unread answer (or is waiting for one): one
    page ahead at most. :meth:`close` stops it; a request already on the wire is finished and
    dropped (the thread is a daemon, so it never holds up the interpreter's exit).
    """

    def __init__(
        self,
        request: Callable[[Params, Callable[[], bool]], bytes],
        guess: Callable[[Params, bytes], Params | None],
        first: Params,
        name: str = "failopen.rai.pages",
    ) -> None:
        self._request = request
        self._guess = guess
        self._cond = threading.Condition()
        self._next: Params | None = first  # guarded by _cond, as are the fields below
        self._generation = 0
        self._answer: Answer | None = None
        self._waiting = False
        self._closed = False
        # Hashes of the requests sent (fetching thread only): a guess never repeats one, so a
        # service returning the same cursor again costs no request before the consumer sees it.
        self._sent: set[int] = set()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _may_send(self) -> bool:
        # An unread answer blocks the next request, unless the consumer is already waiting for
        # it (then it is as good as taken: sending now spares the hand-over of the GIL).
        return self._closed or (
            self._next is not None and (self._answer is None or self._waiting)
        )

    def _unwanted(self, generation: int) -> bool:
        # Read without the lock: a hint, checked again (locked) before an answer is kept.
        return self._closed or generation != self._generation

    def _slot_free(self, generation: int) -> bool:
        return self._answer is None or self._closed or generation != self._generation

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                cond.wait_for(self._may_send)
                if self._closed:
                    return
                params, generation = self._next, self._generation
                self._next = None
            assert params is not None
            self._sent.add(hash(tuple(params)))
            body: bytes | None = None
            error: BaseException | None = None
            guessed: Params | None = None
            try:
                body = self._request(params, functools.partial(self._unwanted, generation))
                guessed = self._guess(params, body)
                if guessed is not None and hash(tuple(guessed)) in self._sent:
                    guessed = None
            except BaseException as exc:  # raised where the consumer takes this answer
                error = exc
            with cond:
                # The answer before may still be on its way to a consumer who was waiting.
                cond.wait_for(functools.partial(self._slot_free, generation))
                if self._closed:
                    return
                if generation == self._generation:  # else redirected meanwhile: dropped
                    self._answer = Answer(params, body, error, guessed)
                    self._next = guessed
                cond.notify_all()
            del body

    def take(self) -> Answer:
        """The next answer, waiting for it."""
        with self._cond:
            self._waiting = True
            self._cond.notify_all()
            try:
                self._cond.wait_for(lambda: self._answer is not None or self._closed)
            finally:
                self._waiting = False
            answer = self._answer
            if answer is None:
                raise RuntimeError("the pipeline is closed")
            self._answer = None
            self._cond.notify_all()
            return answer

    def redirect(self, params: Params) -> None:
        """The guess after the last answer taken was wrong: drop its answer, send ``params``."""
        with self._cond:
            self._generation += 1
            self._answer = None
            self._next = params
            self._cond.notify_all()

    def close(self) -> None:
        """Stop sending; an answer on its way is dropped."""
        with self._cond:
            self._closed = True
            self._answer = None
            self._cond.notify_all()

    def drain(self, timeout: float) -> None:
        """Once closed: wait, at most ``timeout`` seconds, for a request still on its way (the
        client waits so before it closes the connections that request may be using)."""
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
