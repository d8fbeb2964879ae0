"""The vendor's status page (interface B): read it, parse it, never guess.

:class:`StatusClient` fetches ``{status_url}/api/v2/components.json`` and turns it into a
:class:`StatusReport`: the global component's status, every region's status, and when it was read.
It never decides anything: whether a reading means "outage" is the watcher's business.

What the client promises, because a fail-open decision rests on it:

* A page that cannot be read is :class:`~failopen.exceptions.StatusUnavailable`: transport
  failures, the overall deadline passing (a slowly dripping answer included), a body over the
  size cap, a redirect to another origin, and every non-2xx answer. For non-2xx answers the error
  carries ``status_code`` and ``retry_after`` (seconds, from ``Retry-After``).
* A page that answers with anything but a components document is
  :class:`~failopen.exceptions.StatusParseError`: an empty body, not JSON (or JSON with duplicate
  keys), no ``components`` list, duplicate component ids, a global component without a status
  string. Quirks beside the point (a region with a null status, a numeric ``updated_at``,
  ``"group": "false"``) do not spoil a reading: they are listed in ``StatusReport.odd`` and
  logged once per change.
* An unknown status *value* is not an error: it is kept as it was sent, and the report says
  ``known=False``. It is not an outage: the caller decides what it means (failopen's watcher
  bypasses only on the values listed in ``bypass_on``).

Which component is global (:mod:`failopen.providers.global_component`): the one
``FAILOPEN_GLOBAL_COMPONENT`` names (an id, or an exact unique name), else a guess made only when
the page has the documented shape exactly. The first choice is pinned by id for the life of the
client and logged once at INFO with its id and name; a pinned component that leaves the page makes
the page unreadable. Whenever the choice cannot be made the reading is a
:class:`~failopen.exceptions.GlobalComponentError` listing the components as ``id (name)``.

With ``indicator_fallback=True`` a failed components request is retried against
``{status_url}/api/v2/status.json`` within what is left of the same deadline. Its
``status.indicator`` of ``none`` reads as ``operational``; any other value ``v`` reads as
``indicator:v`` (the spec does not say what other values mean, so failopen reports them and lets
the user list them in ``bypass_on``). A 429 is never followed by the fallback request, a
components request that used up the whole deadline leaves no time for one, and when the fallback
fails too the components error is raised. A GlobalComponentError is never followed by it either:
the indicator is the worst status of every component, regions included, so reading it when the
global component cannot be told would turn a regional outage into a bypass.

No credentials are ever sent: no Authorization header, no user-info in the URL (refused at
construction), and cookies the page sets are dropped.

The parsing itself (no I/O) lives in :mod:`failopen.providers.status_documents`; its names are
re-exported here. What the sync and async twins share besides the I/O (settings, request options,
answers, the pinned component, the fallback's budget) is :mod:`failopen.providers.status_base`.
"""

from __future__ import annotations

import os
import threading
import time

import httpx

from failopen.exceptions import FetchError, StatusError
from failopen.providers import exchange
from failopen.providers.status_base import INDICATOR_PATH, StatusClientBase
from failopen.providers.status_documents import (
    KNOWN_STATUSES,
    OPERATIONAL,
    Component,
    ComponentListing,
    StatusReport,
    list_components,
    parse_components,
    parse_indicator,
)
from failopen.providers.status_url import COMPONENTS_PATH, check_status_url

__all__ = [
    "COMPONENTS_PATH",
    "INDICATOR_PATH",
    "KNOWN_STATUSES",
    "OPERATIONAL",
    "Component",
    "ComponentListing",
    "StatusClient",
    "StatusReport",
    "check_status_url",
    "list_components",
    "parse_components",
    "parse_indicator",
]


class StatusClient(StatusClientBase):
    """Reads the status page: :meth:`fetch` (sync) or :meth:`afetch` (async).

    ``status_url`` is the page's base address (with or without a trailing slash); it must be https
    unless the host is loopback, and carry no credentials, query or fragment (ConfigError
    otherwise). ``timeout`` is one overall deadline per reading, fallback included; ``max_bytes``
    caps each response body. ``transport``/``async_transport`` replace the network (e.g.
    ``FakeStatusPage().transport()``), ``clock`` stamps ``fetched_at``. Use as a (async) context
    manager, or call :meth:`close` / :meth:`aclose`.
    """

    # Sync.

    def _sync_client(self) -> httpx.Client:
        if self._pid != os.getpid():
            # Forked: the parent's pooled sockets (and maybe its held lock) are not ours.
            self._lock = threading.Lock()
            self._client = None
            self._pid = os.getpid()
        with self._lock:
            self._check_open()
            if self._client is None:
                self._client = httpx.Client(transport=self._transport, **self._options())
            return self._client

    def _get(self, client: httpx.Client, url: str, timeout: float) -> exchange.Fetched:
        try:
            return exchange.fetch(client, "GET", url, timeout=timeout, max_bytes=self.max_bytes)
        except FetchError as exc:
            raise self._unreadable(url, exc) from exc

    def fetch(self) -> StatusReport:
        """Read the page once. Raises StatusUnavailable or StatusParseError, never guesses."""
        client = self._sync_client()
        started = time.monotonic()
        try:
            return self._components(self._get(client, self.components_url, self.timeout))
        except StatusError as exc:
            error = exc
        remaining = self._fallback_budget(error, started)
        if remaining is None:
            raise error
        try:
            report = self._indicator(self._get(client, self.indicator_url, remaining))
        except StatusError as exc:
            self._log_fallback(error, exc)
        else:
            self._log_fallback(error, None)
            return report
        raise error

    def fetch_components(self) -> ComponentListing:
        """List every component of the page and which is global (or why none can be told).

        For diagnosis (``failopen status --components``): reads components.json once, never the
        fallback, and pins nothing. Raises StatusUnavailable, or StatusParseError for a page that
        is not a components document at all.
        """
        client = self._sync_client()
        body = self._answer(self._get(client, self.components_url, self.timeout),
                            self.components_url)
        return list_components(body, global_component=self.global_component, pinned=self._pinned)

    def close(self) -> None:
        """Release the sync connection pool. Later reads raise StatusUnavailable.

        If :meth:`afetch` was used, await :meth:`aclose` as well, on the loop that used it: an
        async pool belongs to its event loop and cannot be closed from here.
        """
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> StatusClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Async.

    def _async_client(self) -> httpx.AsyncClient:
        with self._lock:
            self._check_open()
            if self._aclient is None:
                self._aclient = httpx.AsyncClient(
                    transport=self._async_transport, **self._options()
                )
            return self._aclient

    async def _aget(self, client: httpx.AsyncClient, url: str, timeout: float) -> exchange.Fetched:
        try:
            return await exchange.afetch(
                client, "GET", url, timeout=timeout, max_bytes=self.max_bytes
            )
        except FetchError as exc:
            raise self._unreadable(url, exc) from exc

    async def afetch(self) -> StatusReport:
        """The async twin of :meth:`fetch`."""
        client = self._async_client()
        started = time.monotonic()
        try:
            return self._components(await self._aget(client, self.components_url, self.timeout))
        except StatusError as exc:
            error = exc
        remaining = self._fallback_budget(error, started)
        if remaining is None:
            raise error
        try:
            report = self._indicator(await self._aget(client, self.indicator_url, remaining))
        except StatusError as exc:
            self._log_fallback(error, exc)
        else:
            self._log_fallback(error, None)
            return report
        raise error

    async def aclose(self) -> None:
        """Release both connection pools. Later reads raise StatusUnavailable."""
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
            aclient, self._aclient = self._aclient, None
        if client is not None:
            client.close()
        if aclient is not None:
            await aclient.aclose()

    async def __aenter__(self) -> StatusClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
