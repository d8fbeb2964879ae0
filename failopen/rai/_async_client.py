"""The asyncio client; its twin is ``_client.py``, the decisions live in ``_base.py``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

import httpx

from failopen.rai._arguments import Instant, Params, cohort_path
from failopen.rai._base import (
    DEFAULT_MAX_PAGES,
    BaseClient,
    error_from_response,
    parse_cohort,
    transport_error,
)
from failopen.rai._pager import (
    Pager,
    Record,
    cohort_sessions_pager,
    cohorts_pager,
    sessions_pager,
)
from failopen.rai.auth import ClientCredentialsAuth
from failopen.rai.exceptions import RaiError
from failopen.rai.models import Cohort, Page, Session

__all__ = ["AsyncClient"]

T = TypeVar("T")
_HEAD_START_TURNS = 8


class AsyncClient(BaseClient):
    """asyncio client of the session-intelligence API (spec interface A); twin of ``Client``.

    Tokens are fetched and cached by :class:`~failopen.rai.auth.ClientCredentialsAuth`. Server
    errors and transport failures are retried up to ``max_attempts`` attempts in all, with
    exponential backoff and full jitter, waiting through ``sleep``. ``timeout`` bounds each
    attempt: every socket operation, and reading the whole body. With ``prefetch``, a task
    fetches the next page while the caller handles the current one, never more than one page
    ahead: it is started, and given the event loop, as soon as the current page's cursor is
    decoded, before any model of the current page is built. ``timer`` is the monotonic clock
    used for token expiry. A listing ends with InvalidResponse after ``max_pages`` pages in one
    window, or 100 empty pages in a row, that still ask for more (``_pager.py``).
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
    ) -> None:
        super().__init__(
            base_url, client_id, client_secret, timeout=timeout, max_attempts=max_attempts,
            backoff_base=backoff_base, backoff_max=backoff_max, prefetch=prefetch,
            max_pages=max_pages,
        )
        self._sleep = sleep
        self.auth = ClientCredentialsAuth(
            self.authorize_url, client_id, client_secret, timer=timer, user_agent=self.user_agent
        )
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            auth=self.auth,
            transport=transport,
            timeout=self.timeout,
            headers={"Accept": "application/json", "User-Agent": self.user_agent},
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
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(
                        f"body still arriving after {self.timeout:g}s", request=request
                    )
            if response.is_success:
                return bytes(body)
            raise error_from_response(
                response.status_code, response.headers, bytes(body), self.auth.redact
            )
        finally:
            await response.aclose()

    async def _request(self, method: str, path: str, params: Params | None = None) -> bytes:
        """The body of a 2xx answer, retrying server and transport failures."""
        what = f"{method} {path}"
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._exchange(method, path, params)
            except RaiError as exc:
                error, cause = exc, None
            except httpx.RequestError as exc:
                error, cause = transport_error(exc), exc
            delay = self.retry_delay(attempt, error, what)
            if delay is None:
                raise error from cause
            await self._sleep(delay)

    async def _raw_pages(self, pager: Pager[Any]) -> AsyncGenerator[Page[Record], None]:
        pager.max_pages = self.max_pages

        async def fetch(params: Params) -> Page[Record]:
            return pager.decode(await self._request("GET", pager.path, params))

        if not self.prefetch:
            params: Params | None = pager.first()
            while params is not None:
                page = pager.deliver(await fetch(params))
                params = pager.after(page)
                yield page
            return
        # One task at a time: at most one page is ever fetched ahead.
        task: asyncio.Task[Page[Record]] | None = asyncio.ensure_future(fetch(pager.first()))
        try:
            while task is not None:
                page = await task  # a failed fetch raises here, where its page is due
                page = pager.deliver(page)
                params = pager.after(page)
                if params is None:
                    task = None
                else:
                    task = asyncio.ensure_future(fetch(params))
                    await _head_start(task)
                yield page
        finally:
            # The caller stopped early (or failed): cancel the page in flight without awaiting
            # it (this may run in a finaliser), and collect its outcome so nothing is logged.
            if task is not None:
                task.cancel()
                task.add_done_callback(_collect)

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

    # --- the API ---

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
        return parse_cohort(await self._request("GET", cohort_path(cohort_id)))

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

    # --- lifetime ---

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def _head_start(task: asyncio.Task[Page[Record]]) -> None:
    """Give the next page's fetch a few turns of the event loop before this page is handed over.

    Scheduling a task does not run it: without these turns the request would leave only when
    the consumer next awaits, after it has built models of and written the current page. httpx
    needs about three turns to put a request on a reused connection; the task then waits for
    the answer, and the remaining turns cost microseconds. A fetch that is still connecting
    continues whenever the consumer awaits.
    """
    for _ in range(_HEAD_START_TURNS):
        if task.done():
            return
        await asyncio.sleep(0)


def _collect(task: asyncio.Task[object]) -> None:
    if not task.cancelled():
        task.exception()
