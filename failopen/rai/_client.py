"""The blocking client; its twin is ``_async_client.py``, the decisions live in ``_base.py``."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from types import TracebackType
from typing import TypeVar

import httpx

from failopen.rai._arguments import Instant, Params, cohort_path
from failopen.rai._base import BaseClient, error_from_response, parse_cohort, transport_error
from failopen.rai._pager import Pager, cohort_sessions_pager, cohorts_pager, sessions_pager
from failopen.rai.auth import ClientCredentialsAuth
from failopen.rai.exceptions import RaiError
from failopen.rai.models import Cohort, Page, Session

__all__ = ["Client"]

T = TypeVar("T")


class Client(BaseClient):
    """Blocking client of the session-intelligence API (spec interface A).

    Tokens are fetched and cached by :class:`~failopen.rai.auth.ClientCredentialsAuth`. Server
    errors and transport failures are retried up to ``max_attempts`` attempts in all, with
    exponential backoff and full jitter, waiting through ``sleep``. ``timeout`` bounds each
    attempt: every socket operation, and reading the whole body. With ``prefetch``, a background
    thread fetches the next page while the caller handles the current one (never more than one
    page ahead). ``timer`` is the monotonic clock used for token expiry.
    """

    def __init__(
        self,
        base_url: str,
        client_id: str,
        client_secret: str,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
        max_attempts: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        prefetch: bool = True,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            base_url, client_id, client_secret, timeout=timeout, max_attempts=max_attempts,
            backoff_base=backoff_base, backoff_max=backoff_max, prefetch=prefetch,
        )
        self._sleep = sleep
        self.auth = ClientCredentialsAuth(
            self.authorize_url, client_id, client_secret, timer=timer, user_agent=self.user_agent
        )
        self._http = httpx.Client(
            base_url=self.base_url,
            auth=self.auth,
            transport=transport,
            timeout=self.timeout,
            headers={"Accept": "application/json", "User-Agent": self.user_agent},
            follow_redirects=False,
        )

    # --- plumbing ---

    def _exchange(self, method: str, path: str, params: Params | None) -> bytes:
        deadline = time.monotonic() + self.timeout
        request = self._http.build_request(
            method, path, params=None if params is None else tuple(params)
        )
        response = self._http.send(request, stream=True)
        try:
            body = bytearray()
            for chunk in response.iter_bytes():
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
            response.close()

    def _request(self, method: str, path: str, params: Params | None = None) -> bytes:
        """The body of a 2xx answer, retrying server and transport failures."""
        what = f"{method} {path}"
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._exchange(method, path, params)
            except RaiError as exc:
                error, cause = exc, None
            except httpx.RequestError as exc:
                error, cause = transport_error(exc), exc
            delay = self.retry_delay(attempt, error, what)
            if delay is None:
                raise error from cause
            self._sleep(delay)

    def _pages(self, pager: Pager[T]) -> Generator[Page[T], None, None]:
        def fetch(params: Params) -> Page[T]:
            return pager.parse(self._request("GET", pager.path, params))

        first = pager.first()
        if not self.prefetch:
            params: Params | None = first
            while params is not None:
                page = fetch(params)
                delivered = pager.deliver(page)
                params = pager.after(page)
                yield delivered
            return
        # One worker and one future at a time: at most one page is ever fetched ahead.
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="failopen.rai.prefetch")
        future: Future[Page[T]] | None = executor.submit(fetch, first)
        try:
            while future is not None:
                page = future.result()  # a failed fetch raises here, where its page is due
                delivered = pager.deliver(page)
                params = pager.after(page)
                future = None if params is None else executor.submit(fetch, params)
                yield delivered
        finally:
            # The caller stopped early (or failed): drop the page in flight, never wait for it.
            if future is not None:
                future.cancel()
            executor.shutdown(wait=False, cancel_futures=True)

    def _items(self, pages: Generator[Page[T], None, None]) -> Iterator[T]:
        with closing(pages):
            for page in pages:
                yield from page.items

    # --- the API ---

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
    ) -> Iterator[Page[Cohort]]:
        """Pages of cohorts of the keys in [start, end]; windows over 30 days are split."""
        return self._pages(cohorts_pager(
            start, end, public_keys, cohort_id=cohort_id, anomaly_id=anomaly_id,
            telltale_id=telltale_id, min_session_count=min_session_count, page_size=page_size,
        ))

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
    ) -> Iterator[Cohort]:
        """Cohorts of the keys in [start, end], following the cursor (spec 4.3)."""
        return self._items(self._pages(cohorts_pager(
            start, end, public_keys, cohort_id=cohort_id, anomaly_id=anomaly_id,
            telltale_id=telltale_id, min_session_count=min_session_count, page_size=page_size,
        )))

    def get_cohort(self, cohort_id: str) -> Cohort:
        """One cohort by id (spec 4.4)."""
        return parse_cohort(self._request("GET", cohort_path(cohort_id)))

    def iter_cohort_session_pages(
        self, cohort_id: str, *, page_size: int | None = None
    ) -> Iterator[Page[Session]]:
        """Pages of the sessions of one cohort."""
        return self._pages(cohort_sessions_pager(cohort_id, page_size=page_size))

    def iter_cohort_sessions(
        self, cohort_id: str, *, page_size: int | None = None
    ) -> Iterator[Session]:
        """The sessions of one cohort, following the cursor (spec 4.5)."""
        return self._items(self._pages(cohort_sessions_pager(cohort_id, page_size=page_size)))

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
    ) -> Iterator[Page[Session]]:
        """Pages of sessions across cohorts; windows over 30 days are split."""
        return self._pages(sessions_pager(
            start, end, public_keys, cohort_id=cohort_id, anomaly_id=anomaly_id,
            telltale_id=telltale_id, page_size=page_size,
        ))

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
    ) -> Iterator[Session]:
        """Sessions across cohorts of the keys in [start, end], following the cursor (spec 4.6)."""
        return self._items(self._pages(sessions_pager(
            start, end, public_keys, cohort_id=cohort_id, anomaly_id=anomaly_id,
            telltale_id=telltale_id, page_size=page_size,
        )))

    # --- lifetime ---

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
