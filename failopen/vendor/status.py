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

Which component is global (:mod:`failopen.vendor.global_component`): the one
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

The parsing itself (no I/O) lives in :mod:`failopen.vendor.status_documents`; its names are
re-exported here.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
from http.cookiejar import CookieJar, DefaultCookiePolicy
from importlib import metadata
from typing import Any

import httpx

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.exceptions import (
    ConfigError,
    FetchError,
    GlobalComponentError,
    StatusError,
    StatusUnavailable,
)
from failopen.vendor import exchange
from failopen.vendor.status_documents import (
    KNOWN_STATUSES,
    OPERATIONAL,
    Component,
    ComponentListing,
    StatusReport,
    list_components,
    parse_components,
    parse_indicator,
)
from failopen.vendor.status_url import COMPONENTS_PATH, check_status_url

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

logger = logging.getLogger("failopen.status")

INDICATOR_PATH = "/api/v2/status.json"

try:
    _VERSION = metadata.version("failopen")
except metadata.PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
    _VERSION = "0"
_HEADERS = {"User-Agent": f"failopen/{_VERSION} (status check)", "Accept": "application/json"}


def _no_cookies() -> CookieJar:
    # An empty allow-list refuses every cookie, so nothing the page sets is ever sent back.
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


class StatusClient:
    """Reads the status page: :meth:`fetch` (sync) or :meth:`afetch` (async).

    ``status_url`` is the page's base address (with or without a trailing slash); it must be https
    unless the host is loopback, and carry no credentials, query or fragment (ConfigError
    otherwise). ``timeout`` is one overall deadline per reading, fallback included; ``max_bytes``
    caps each response body. ``transport``/``async_transport`` replace the network (e.g.
    ``FakeStatusPage().transport()``), ``clock`` stamps ``fetched_at``. Use as a (async) context
    manager, or call :meth:`close` / :meth:`aclose`.
    """

    def __init__(
        self,
        status_url: str,
        *,
        global_component: str | None = None,
        timeout: float = 5.0,
        max_bytes: int = 1_048_576,
        indicator_fallback: bool = False,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        url = httpx.URL(check_status_url(status_url))
        if global_component is not None and (
            not isinstance(global_component, str) or not global_component.strip()
        ):
            raise ConfigError(
                "FAILOPEN_GLOBAL_COMPONENT: must be a non-empty component id or exact name"
            )
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ConfigError(f"status timeout: {timeout!r} must be a positive number of seconds")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ConfigError(f"status max_bytes: {max_bytes!r} must be a positive integer")
        base = url.path.rstrip("/")
        self.status_url = str(url)
        self.components_url = str(url.copy_with(path=base + COMPONENTS_PATH))
        self.indicator_url = str(url.copy_with(path=base + INDICATOR_PATH))
        self.global_component = global_component
        self.timeout = float(timeout)
        self.max_bytes = max_bytes
        self.indicator_fallback = indicator_fallback
        self._transport = transport
        self._async_transport = async_transport
        self._clock = clock
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None
        self._closed = False
        # The global component chosen by the first good reading: (id, name), kept for life,
        # and how it was chosen (reports keep saying so).
        self._pinned: tuple[str, str] | None = None
        self._pinned_how: str | None = None
        self._pin_lock = threading.Lock()
        self._last_odd: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return (
            f"StatusClient({self.status_url!r}, global_component={self.global_component!r}, "
            f"timeout={self.timeout:g}, indicator_fallback={self.indicator_fallback})"
        )

    # I/O-free steps shared by the sync and async twins.

    def _options(self) -> dict[str, Any]:
        return {
            "headers": _HEADERS,
            "cookies": _no_cookies(),
            "follow_redirects": False,  # _http follows same-origin redirects itself
            "timeout": self.timeout,
            # A fresh connection per poll (one every poll_interval: cheap) lets the deadline cut
            # a poll whose headers drip in, instead of leaving a worker reading on behind it.
            "limits": httpx.Limits(max_keepalive_connections=0),
        }

    def _check_open(self) -> None:
        if self._closed:
            raise StatusUnavailable("the status client is closed")

    def _unreadable(self, url: str, exc: FetchError) -> StatusUnavailable:
        return StatusUnavailable(f"status page {url} could not be read: {exc}")

    def _answer(self, fetched: exchange.Fetched, url: str) -> bytes:
        code = fetched.status_code
        if not 200 <= code < 300:
            retry_after = exchange.parse_retry_after(
                fetched.headers.get("retry-after"), now=self._clock.time()
            )
            raise StatusUnavailable(
                f"status page {url} answered HTTP {code}", status_code=code, retry_after=retry_after
            )
        return fetched.content

    @property
    def pinned(self) -> tuple[str, str] | None:
        """(id, name) of the global component this client chose and keeps, None before."""
        return self._pinned

    def _components(self, fetched: exchange.Fetched) -> StatusReport:
        body = self._answer(fetched, self.components_url)
        if self._pinned is None:
            with self._pin_lock:  # the first readings race to choose: one choice, logged once
                if self._pinned is None:
                    report = self._parse(body, None)
                    glob = report.global_component
                    assert glob is not None  # a components reading always has one
                    self._pinned_how = report.chosen_by
                    self._pinned = (glob.id, glob.name)
                    self._log_pin(glob, report.chosen_by)
                    self._log_odd(report.odd)
                    return report
        report = dataclasses.replace(self._parse(body, self._pinned), chosen_by=self._pinned_how)
        self._log_odd(report.odd)
        return report

    def _parse(self, body: bytes, pinned: tuple[str, str] | None) -> StatusReport:
        return parse_components(
            body, global_component=self.global_component, pinned=pinned,
            fetched_at=self._clock.time(),
        )

    def _log_pin(self, glob: Component, how: str | None) -> None:
        if how == "guess":
            why = ("guessed: the page has the documented shape (one component with description "
                   f"null, every other labelled with its region); set FAILOPEN_GLOBAL_COMPONENT="
                   f"{glob.id} to make it explicit")
        else:
            why = f"FAILOPEN_GLOBAL_COMPONENT matched its {how}"
        logger.info(
            "global component %s (%s), status %s: %s; pinned for the life of this process",
            glob.id, glob.name, glob.status, why,
            extra={"event": "failopen.global_component_pinned", "component_id": glob.id,
                   "component_name": glob.name, "global_status": glob.status,
                   "chosen_by": how},
        )

    def _log_odd(self, odd: tuple[str, ...]) -> None:
        if odd == self._last_odd:
            return
        self._last_odd = odd
        if odd:
            logger.warning(
                "status page: %d fields read oddly (the reading still counts; the global "
                "component's id and status were read): %s", len(odd), "; ".join(odd[:20]),
                extra={"event": "failopen.status_odd_fields", "odd_fields": list(odd[:20])},
            )
        else:
            logger.info("status page: no more oddly read fields",
                        extra={"event": "failopen.status_odd_fields", "odd_fields": []})

    def _indicator(self, fetched: exchange.Fetched) -> StatusReport:
        body = self._answer(fetched, self.indicator_url)
        return parse_indicator(body, fetched_at=self._clock.time())

    def _fallback_budget(self, error: StatusError, started: float) -> float | None:
        """Seconds left for the indicator request, or None when there must be none."""
        if not self.indicator_fallback or isinstance(error, GlobalComponentError):
            return None
        if isinstance(error, StatusUnavailable) and error.status_code == 429:
            return None  # asked to slow down: a second request would not be polite
        remaining = self.timeout - (time.monotonic() - started)
        return remaining if remaining > 0 else None

    def _log_fallback(self, error: StatusError, fallback: StatusError | None) -> None:
        if fallback is None:
            logger.info("components.json failed (%s); read status.json instead", error,
                        extra={"event": "failopen.status_fallback", "error": str(error),
                               "fallback_error": None})
        else:
            logger.info(
                "components.json failed (%s) and status.json failed too (%s)", error, fallback,
                extra={"event": "failopen.status_fallback", "error": str(error),
                       "fallback_error": str(fallback)},
            )

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
