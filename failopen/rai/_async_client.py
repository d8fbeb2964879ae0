"""The asyncio client; the decisions live in ``_base.py``, the paging ahead in
``_async_pipeline.py``."""

# unasync: the source of _client.py, the blocking client, which scripts/unasync.py generates from
# unasync: this file. Change this one, then run `python scripts/unasync.py` (CI runs `--check`).

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from typing import Any, Literal, TypeVar, overload

import httpx

from failopen.rai._arguments import Instant, Params, cohort_path
from failopen.rai._async_pipeline import Pipeline
from failopen.rai._base import (
    DEFAULT_MAX_PAGES,
    BaseClient,
    check_max_in_flight,
    error_from_response,
    parse_cohort,
)
from failopen.rai._bounded import MAX_ANSWER_BYTES, BodyReader
from failopen.rai._failures import after_attempts, check_whole, transport_error
from failopen.rai._pager import (
    SLIM_FIELDS,
    Pager,
    Record,
    cohort_sessions_pager,
    cohorts_pager,
    sessions_pager,
)
from failopen.rai.auth import ClientCredentialsAuth
from failopen.rai.exceptions import RaiError, RaiTransportError
from failopen.rai.models import Cohort, Page, Session

__all__ = ["AsyncClient"]

T = TypeVar("T")
D = TypeVar("D")


class AsyncClient(BaseClient):
    """The asyncio client of the session-intelligence API (spec interface A).

    Tokens are fetched and cached by :class:`~failopen.rai.auth.ClientCredentialsAuth`. Server
    errors and transport failures are retried up to ``max_attempts`` attempts in all, with
    exponential backoff and full jitter, waiting through ``sleep``. ``timeout`` bounds each
    attempt: every socket operation, and reading the whole body. With ``prefetch``, the next
    page is fetched in the background while the caller handles the current one, never more
    than one page ahead: its request leaves as soon as the current answer arrives (its cursor
    read from the raw bytes, checked once the page is decoded: ``_async_pipeline.py``), before
    the page is decoded or any model built. ``timer`` is the monotonic clock used for token expiry.
    A listing ends with InvalidResponse after ``max_pages`` pages in one window, or 100 empty
    pages in a row, that still ask for more (``_pager.py``). ``max_in_flight`` caps the
    requests on the wire at once, across all the callers of the client.
    """

    def __init__(
        self,
        base_url: str,
        client_id: str,
        client_secret: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
        max_attempts: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        prefetch: bool = True,
        timer: Callable[[], float] = time.monotonic,
        max_pages: int = DEFAULT_MAX_PAGES,
        max_in_flight: int | None = None,
    ) -> None:
        super().__init__(
            base_url, client_id, client_secret, timeout=timeout, max_attempts=max_attempts,
            backoff_base=backoff_base, backoff_max=backoff_max, prefetch=prefetch,
            max_pages=max_pages,
        )  # fmt: skip
        self._sleep = sleep
        check_max_in_flight(max_in_flight)
        self._slots = None if max_in_flight is None else asyncio.BoundedSemaphore(max_in_flight)
        # Each list call's pipeline, while it lives: closing the client waits for a request
        # still on its way, which would otherwise open a connection the closed pool never closes.
        self._pipelines: weakref.WeakSet[Pipeline] = weakref.WeakSet()
        self.auth = ClientCredentialsAuth(
            self.authorize_url, client_id, client_secret, timer=timer, user_agent=self.user_agent
        )
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            auth=self.auth,
            transport=transport,
            timeout=self.timeout,
            headers=self.headers(),
            follow_redirects=False,
        )

    # --- plumbing ---

    async def _exchange(self, method: str, path: str, params: Params | None) -> bytes:
        deadline = time.monotonic() + self.timeout
        request = self._http.build_request(
            method, path, params=None if params is None else tuple(params)
        )
        response = await self._http.send(request, stream=True)
        try:
            # Read raw and decoded within a bound (a small gzip answer can decode to gigabytes);
            # chunks joined once: a growing buffer would be copied as it grows, and leave holes
            # of every size behind in the heap (peak RSS crept up with the records exported).
            reader = BodyReader(response.headers, f"{method} {path}", MAX_ANSWER_BYTES)
            if response.is_stream_consumed:  # built in memory by a transport that is no network
                body = reader.whole(response.content)
            else:
                async for chunk in response.aiter_raw():
                    reader.feed(chunk)
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout(
                            f"body still arriving after {self.timeout:g}s", request=request
                        )
                body = reader.body()
            if response.is_success:
                check_whole(body, f"{method} {path}")
                return body
            raise error_from_response(
                response.status_code, response.headers, body, self.auth.redact
            )
        finally:
            await response.aclose()

    async def _request(
        self, method: str, path: str, params: Params | None = None,
        unwanted: Callable[[], bool] | None = None,
    ) -> bytes:  # fmt: skip
        """The body of a 2xx answer, retrying server and transport failures.

        ``unwanted`` tells whether the answer is still wanted (a guessed request whose guess
        proved wrong is not): a failed attempt is then neither retried nor a reason to hold
        back the client's other requests.
        """
        what = f"{method} {path}"
        attempt = 0
        waited_until = 0.0
        while True:
            attempt += 1
            paused, resume_at = self.paused_for(), self._resume_at
            if paused > 0 and resume_at > waited_until:
                # Another request of this client was told to back off: so is this one.
                await self._sleep(paused)
                waited_until = resume_at
            try:
                if self._slots is None:
                    return await self._exchange(method, path, params)
                async with self._slots:  # never held through a backoff
                    return await self._exchange(method, path, params)
            except RaiError as exc:
                error, cause = exc, None
            except httpx.RequestError as exc:
                error, cause = transport_error(exc), exc
            if unwanted is not None and unwanted():
                raise error from cause
            delay = self.retry_delay(attempt, error, what)
            if delay is None:
                raise after_attempts(error, attempt) from cause
            waited_until = self.pause(delay)
            await self._sleep(delay)

    async def _decoded(self, path: str, params: Params | None, decode: Callable[[bytes], D]) -> D:
        """``decode`` of a 2xx answer, asked for again while it is found cut off once decoded
        (RaiTransportError: just after an inner ``}``, which ``check_whole`` lets pass)."""
        cut = 0
        while True:
            body = await self._request("GET", path, params)
            try:
                return decode(body)
            except RaiTransportError as exc:
                self.retry_cut_off(cut := cut + 1, exc, f"GET {path}")  # the next one waits

    async def _raw_pages(self, pager: Pager[Any]) -> AsyncGenerator[Page[Record], None]:
        pager.max_pages = self.max_pages
        if not self.prefetch:
            params: Params | None = pager.first()
            while params is not None:
                page = pager.deliver(await self._decoded(pager.path, params, pager.decode))
                params = pager.after(page)
                yield page
            return
        # The next request leaves as soon as an answer arrives, its cursor read from the raw
        # bytes; the consumer decodes, and corrects a wrong guess.
        pipeline = Pipeline(
            lambda params, unwanted: self._request("GET", pager.path, params, unwanted),
            pager.guess_after, pager.first(), name="failopen.rai.prefetch",
        )  # fmt: skip
        self._pipelines.add(pipeline)
        what, cut = f"GET {pager.path}", 0  # cut: answers to this request cut off so far
        try:
            while True:
                answer = await pipeline.take()  # a failed fetch raises here, where its page is due
                if answer.error is not None:
                    raise answer.error
                assert answer.body is not None
                try:
                    decoded = pager.decode(answer.body)
                except RaiTransportError as exc:  # cut off just after an inner "}": again
                    self.retry_cut_off(cut := cut + 1, exc, what)
                    await pipeline.redirect(answer.params)
                    continue
                cut = 0
                page = pager.deliver(decoded)
                answer.body = None  # the page holds what it needs of it
                params = pager.after(page)
                if params != answer.guessed:
                    if params is not None:
                        await pipeline.redirect(params)
                    else:
                        pipeline.close()  # the guessed request's answer is dropped
                yield page
                if params is None:
                    return
        finally:
            # The caller stopped early (or failed): drop the page in flight, never wait for it.
            pipeline.close()

    async def _pages(self, pager: Pager[T]) -> AsyncGenerator[Page[T], None]:
        async with aclosing(self._raw_pages(pager)) as pages:
            async for page in pages:
                yield pager.build(page)

    async def _items(self, pages: AsyncGenerator[Page[T], None]) -> AsyncGenerator[T, None]:
        async with aclosing(pages):
            async for page in pages:
                for item in page.items:
                    yield item

    def _pages_or_raw(
        self, pager: Pager[T], raw: bool
    ) -> AsyncGenerator[Page[T], None] | AsyncGenerator[Page[Record], None]:
        return self._raw_pages(pager) if raw else self._pages(pager)

    def export_pages(self, pager: Pager[Any], slim: bool) -> AsyncGenerator[Page[Record], None]:
        """Raw pages of ``pager`` (one of ``_pager.py``'s plans), for the CLI's writers.

        ``slim`` is for a JSONL writer, which copies each record's text from ``lines``: such a
        record keeps only its time and id fields, so a page in memory is little more than its
        text (records of a page without lines stay whole).
        """
        if slim:
            pager.keep = SLIM_FIELDS[pager.key]
        return self._raw_pages(pager)

    # --- the API (the overloads and the pager calls kept compact by hand) ---
    # fmt: off

    @overload
    def iter_cohort_pages(
        self, start: Instant, end: Instant, public_keys: Sequence[str], *,
        cohort_id: str | None = ..., anomaly_id: int | None = ..., telltale_id: int | None = ...,
        min_session_count: int | None = ..., page_size: int | None = ...,
        raw: Literal[False] = ...,
    ) -> AsyncGenerator[Page[Cohort], None]: ...
    @overload
    def iter_cohort_pages(
        self, start: Instant, end: Instant, public_keys: Sequence[str], *,
        cohort_id: str | None = ..., anomaly_id: int | None = ..., telltale_id: int | None = ...,
        min_session_count: int | None = ..., page_size: int | None = ..., raw: Literal[True],
    ) -> AsyncGenerator[Page[Record], None]: ...
    @overload
    def iter_cohort_pages(
        self, start: Instant, end: Instant, public_keys: Sequence[str], *,
        cohort_id: str | None = ..., anomaly_id: int | None = ..., telltale_id: int | None = ...,
        min_session_count: int | None = ..., page_size: int | None = ..., raw: bool,
    ) -> AsyncGenerator[Page[Cohort], None] | AsyncGenerator[Page[Record], None]: ...
    def iter_cohort_pages(
        self,
        start: Instant,
        end: Instant,
        public_keys: Sequence[str],
        *,
        cohort_id: str | None = None,
        anomaly_id: int | None = None,
        telltale_id: int | None = None,
        min_session_count: int | None = None,
        page_size: int | None = None,
        raw: bool = False,
    ) -> AsyncGenerator[Page[Cohort], None] | AsyncGenerator[Page[Record], None]:
        """Pages of cohorts of the keys in [start, end]; windows over 30 days are split.

        With ``raw=True`` a page holds the records as decoded dicts, unknown fields included,
        and no :class:`Cohort` is built: the cheapest way to export.
        """
        return self._pages_or_raw(cohorts_pager(
            start, end, public_keys, cohort_id=cohort_id, anomaly_id=anomaly_id,
            telltale_id=telltale_id, min_session_count=min_session_count, page_size=page_size,
        ), raw)

    def iter_cohorts(
        self,
        start: Instant,
        end: Instant,
        public_keys: Sequence[str],
        *,
        cohort_id: str | None = None,
        anomaly_id: int | None = None,
        telltale_id: int | None = None,
        min_session_count: int | None = None,
        page_size: int | None = None,
    ) -> AsyncGenerator[Cohort, None]:
        """Cohorts of the keys in [start, end], following the cursor (spec 4.3)."""
        return self._items(self._pages(cohorts_pager(
            start, end, public_keys, cohort_id=cohort_id, anomaly_id=anomaly_id,
            telltale_id=telltale_id, min_session_count=min_session_count, page_size=page_size,
        )))

    async def get_cohort(self, cohort_id: str) -> Cohort:
        """One cohort by id (spec 4.4)."""
        return await self._decoded(cohort_path(cohort_id), None, parse_cohort)

    @overload
    def iter_cohort_session_pages(
        self, cohort_id: str, *, page_size: int | None = ..., raw: Literal[False] = ...
    ) -> AsyncGenerator[Page[Session], None]: ...
    @overload
    def iter_cohort_session_pages(
        self, cohort_id: str, *, page_size: int | None = ..., raw: Literal[True]
    ) -> AsyncGenerator[Page[Record], None]: ...
    @overload
    def iter_cohort_session_pages(
        self, cohort_id: str, *, page_size: int | None = ..., raw: bool
    ) -> AsyncGenerator[Page[Session], None] | AsyncGenerator[Page[Record], None]: ...
    def iter_cohort_session_pages(
        self, cohort_id: str, *, page_size: int | None = None, raw: bool = False
    ) -> AsyncGenerator[Page[Session], None] | AsyncGenerator[Page[Record], None]:
        """Pages of the sessions of one cohort; ``raw=True``: records as decoded, no models."""
        return self._pages_or_raw(cohort_sessions_pager(cohort_id, page_size=page_size), raw)

    def iter_cohort_sessions(
        self, cohort_id: str, *, page_size: int | None = None
    ) -> AsyncGenerator[Session, None]:
        """The sessions of one cohort, following the cursor (spec 4.5)."""
        return self._items(self._pages(cohort_sessions_pager(cohort_id, page_size=page_size)))

    @overload
    def iter_session_pages(
        self, start: Instant, end: Instant, public_keys: Sequence[str], *,
        cohort_id: str | None = ..., anomaly_id: int | None = ..., telltale_id: int | None = ...,
        page_size: int | None = ..., raw: Literal[False] = ...,
    ) -> AsyncGenerator[Page[Session], None]: ...
    @overload
    def iter_session_pages(
        self, start: Instant, end: Instant, public_keys: Sequence[str], *,
        cohort_id: str | None = ..., anomaly_id: int | None = ..., telltale_id: int | None = ...,
        page_size: int | None = ..., raw: Literal[True],
    ) -> AsyncGenerator[Page[Record], None]: ...
    @overload
    def iter_session_pages(
        self, start: Instant, end: Instant, public_keys: Sequence[str], *,
        cohort_id: str | None = ..., anomaly_id: int | None = ..., telltale_id: int | None = ...,
        page_size: int | None = ..., raw: bool,
    ) -> AsyncGenerator[Page[Session], None] | AsyncGenerator[Page[Record], None]: ...
    def iter_session_pages(
        self,
        start: Instant,
        end: Instant,
        public_keys: Sequence[str],
        *,
        cohort_id: str | None = None,
        anomaly_id: int | None = None,
        telltale_id: int | None = None,
        page_size: int | None = None,
        raw: bool = False,
    ) -> AsyncGenerator[Page[Session], None] | AsyncGenerator[Page[Record], None]:
        """Pages of sessions across cohorts; windows over 30 days are split.

        With ``raw=True`` a page holds the records as decoded dicts, unknown fields included,
        and no :class:`Session` is built: the cheapest way to export.
        """
        return self._pages_or_raw(sessions_pager(
            start, end, public_keys, cohort_id=cohort_id, anomaly_id=anomaly_id,
            telltale_id=telltale_id, page_size=page_size,
        ), raw)

    def iter_sessions(
        self,
        start: Instant,
        end: Instant,
        public_keys: Sequence[str],
        *,
        cohort_id: str | None = None,
        anomaly_id: int | None = None,
        telltale_id: int | None = None,
        page_size: int | None = None,
    ) -> AsyncGenerator[Session, None]:
        """Sessions across cohorts of the keys in [start, end], following the cursor (spec 4.6)."""
        return self._items(self._pages(sessions_pager(
            start, end, public_keys, cohort_id=cohort_id, anomaly_id=anomaly_id,
            telltale_id=telltale_id, page_size=page_size,
        )))

    # fmt: on

    # --- lifetime ---

    async def aclose(self) -> None:
        """Close the connection pool, once a page being fetched ahead (at most one per list
        call, bounded by ``timeout``) has come or been dropped."""
        for pipeline in list(self._pipelines):
            pipeline.close()
            await pipeline.drain(self.timeout)
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
