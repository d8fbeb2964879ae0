"""The vendor's status page (interface B): read it, parse it, never guess.

:class:`StatusClient` fetches ``{status_url}/api/v2/components.json`` and turns it into a
:class:`StatusReport`: the global component's status, every region's status, and when it was read.
It never decides anything: whether a reading means "outage" is the watcher's business.

What the client promises, because a fail-open decision rests on it:

* A page that cannot be read is :class:`~failopen.exceptions.StatusUnavailable`: transport
  failures, the overall deadline passing (a slowly dripping answer included), a body over the
  size cap, a redirect to another origin, and every non-2xx answer. For non-2xx answers the error
  carries ``status_code`` and ``retry_after`` (seconds, from ``Retry-After``).
* A page that answers with anything but a well-formed components document is
  :class:`~failopen.exceptions.StatusParseError`: an empty body, not JSON (or JSON with duplicate
  keys), the wrong shape (no ``components`` list, a component without a string ``id`` or
  ``status``, a field of the wrong type), duplicate component ids, and no way to tell which
  component is the global one.
* An unknown status *value* is not an error: it is kept as it was sent, and the report says
  ``known=False``. It is not an outage: the caller decides what it means (failopen's watcher
  bypasses only on the values listed in ``bypass_on``).

The global component is the one whose id is configured (``FAILOPEN_GLOBAL_COMPONENT``); without
that, the single non-group component whose ``description`` is ``null`` (spec 2.5: regional
components carry their region label there). None, several, or a configured id that is not on the
page: a StatusParseError naming the ids that were seen.

With ``indicator_fallback=True`` a failed components request is retried against
``{status_url}/api/v2/status.json`` within what is left of the same deadline. Its
``status.indicator`` of ``none`` reads as ``operational``; any other value ``v`` reads as
``indicator:v`` (the spec does not say what other values mean, so failopen reports them and lets
the user list them in ``bypass_on``). A 429 is never followed by the fallback request, a
components request that used up the whole deadline leaves no time for one, and when the fallback
fails too the components error is raised.

No credentials are ever sent: no Authorization header, no user-info in the URL (refused at
construction), and cookies the page sets are dropped.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from importlib import metadata
from typing import Any, Literal

import httpx

from failopen import _http
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.exceptions import (
    ConfigError,
    FetchError,
    StatusError,
    StatusParseError,
    StatusUnavailable,
)

__all__ = [
    "COMPONENTS_PATH",
    "INDICATOR_PATH",
    "KNOWN_STATUSES",
    "OPERATIONAL",
    "Component",
    "StatusClient",
    "StatusReport",
    "parse_components",
    "parse_indicator",
]

logger = logging.getLogger("failopen.status")

OPERATIONAL = "operational"
#: The component status values of spec 3.2. Anything else is reported with ``known=False``.
KNOWN_STATUSES = frozenset(
    {OPERATIONAL, "degraded_performance", "partial_outage", "major_outage", "under_maintenance"}
)
COMPONENTS_PATH = "/api/v2/components.json"
INDICATOR_PATH = "/api/v2/status.json"

_MAX_IDS_SHOWN = 20

try:
    _VERSION = metadata.version("failopen")
except metadata.PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
    _VERSION = "0"
_HEADERS = {"User-Agent": f"failopen/{_VERSION} (status check)", "Accept": "application/json"}


@dataclass(frozen=True)
class Component:
    """One component of the status page, as the page described it."""

    id: str
    name: str
    status: str
    description: str | None
    group: bool
    group_id: str | None
    updated_at: str | None
    known: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "description": self.description,
            "group": self.group,
            "group_id": self.group_id,
            "updated_at": self.updated_at,
            "known": self.known,
        }


@dataclass(frozen=True)
class StatusReport:
    """One successful reading of the status page.

    ``regions`` are the components that are neither the global one nor groups; a region's label is
    its ``description``. ``global_component`` is None when the reading came from the indicator
    fallback (``source == "indicator"``), which knows nothing about regions.
    """

    global_status: str
    global_component: Component | None
    regions: tuple[Component, ...]
    fetched_at: float
    source: Literal["components", "indicator"]
    page_updated_at: str | None = None

    @property
    def known(self) -> bool:
        """True when the global status is one of the values spec 3.2 defines."""
        return self.global_status in KNOWN_STATUSES

    @property
    def operational(self) -> bool:
        """True when the global status is exactly ``operational``."""
        return self.global_status == OPERATIONAL

    def impaired_regions(self) -> tuple[Component, ...]:
        """Regions not reporting ``operational`` (unknown values included), for diagnosis."""
        return tuple(region for region in self.regions if region.status != OPERATIONAL)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as ``failopen status --json`` prints it."""
        return {
            "global_status": self.global_status,
            "known": self.known,
            "source": self.source,
            "fetched_at": self.fetched_at,
            "page_updated_at": self.page_updated_at,
            "global_component": (
                None if self.global_component is None else self.global_component.to_dict()
            ),
            "regions": [region.to_dict() for region in self.regions],
            "impaired_regions": [region.id for region in self.impaired_regions()],
        }


# -- parsing (no I/O) ------------------------------------------------------------------------


class _DuplicateKey(ValueError):
    pass


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # {"status": "operational", "status": "major_outage"} has no single meaning: refuse it.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(f"duplicate key {key[:64]!r}")
        result[key] = value
    return result


def _load(body: bytes, what: str) -> Any:
    if not body.strip():
        raise StatusParseError(f"{what}: empty body")
    try:
        return json.loads(body, object_pairs_hook=_reject_duplicates)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, nesting
        reason = f"{type(exc).__name__}: {exc}"
        raise StatusParseError(f"{what}: not a JSON document ({reason[:200]})") from None


def _optional(obj: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = obj.get(key)
    if value is not None and not isinstance(value, kind):
        raise StatusParseError(f"{where}: {key} is {type(value).__name__}, not {kind.__name__}")
    return value


def _show_ids(ids: Iterable[str]) -> str:
    ids = list(ids)
    shown = ", ".join(repr(i[:64]) for i in ids[:_MAX_IDS_SHOWN])
    if len(ids) > _MAX_IDS_SHOWN:
        shown += f", ... ({len(ids) - _MAX_IDS_SHOWN} more)"
    return f"[{shown}]"


def _component(raw: Any, index: int) -> tuple[Component, bool]:
    """The component, and whether its description is an explicit null (a global candidate)."""
    where = f"components.json: components[{index}]"
    if not isinstance(raw, dict):
        raise StatusParseError(f"{where} is {type(raw).__name__}, not an object")
    cid = raw.get("id")
    if not isinstance(cid, str) or not cid:
        raise StatusParseError(f"{where} has no id string")
    where = f"components.json: component {cid[:64]!r}"
    status = raw.get("status")
    if not isinstance(status, str):
        raise StatusParseError(f"{where}: status is missing or not a string")
    name = _optional(raw, "name", str, where)
    group = raw.get("group", False)
    if not isinstance(group, bool):
        raise StatusParseError(f"{where}: group is {type(group).__name__}, not a boolean")
    description = _optional(raw, "description", str, where)
    component = Component(
        id=cid,
        name=cid if name is None else name,
        status=status,
        description=description,
        group=group,
        group_id=_optional(raw, "group_id", str, where),
        updated_at=_optional(raw, "updated_at", str, where),
        known=status in KNOWN_STATUSES,
    )
    return component, ("description" in raw and description is None)


def _page_updated_at(document: dict[str, Any], what: str) -> str | None:
    page = document.get("page")
    if page is None:
        return None
    if not isinstance(page, dict):
        raise StatusParseError(f"{what}: page is {type(page).__name__}, not an object")
    value: str | None = _optional(page, "updated_at", str, f"{what}: page")
    return value


def parse_components(
    body: bytes, *, global_component: str | None = None, fetched_at: float
) -> StatusReport:
    """Parse a components document (spec 2.5) into a report. Raises StatusParseError.

    Unknown fields are ignored; unknown status values are kept (``known=False``).
    """
    document = _load(body, "components.json")
    if not isinstance(document, dict):
        raise StatusParseError(
            f"components.json is a JSON {type(document).__name__}, not an object"
        )
    raw_components = document.get("components")
    if not isinstance(raw_components, list):
        raise StatusParseError(
            "components.json has no components list "
            f"(found {type(raw_components).__name__})"
        )
    parsed = [_component(raw, index) for index, raw in enumerate(raw_components)]
    ids = [component.id for component, _ in parsed]
    duplicates = sorted(i for i, n in Counter(ids).items() if n > 1)
    if duplicates:
        raise StatusParseError(f"components.json repeats component ids {_show_ids(duplicates)}")

    if global_component is not None:
        chosen = [component for component, _ in parsed if component.id == global_component]
        if not chosen:
            raise StatusParseError(
                f"components.json: the configured global component {global_component[:64]!r} "
                f"is not on the page; component ids seen: {_show_ids(ids)}"
            )
    else:
        chosen = [component for component, null in parsed if null and not component.group]
        if len(chosen) != 1:
            found = f"{len(chosen)} {_show_ids(c.id for c in chosen)}" if chosen else "none"
            raise StatusParseError(
                "components.json: cannot tell the global component: it is the one non-group "
                f"component whose description is null, and there are {found}; component ids seen: "
                f"{_show_ids(ids)}; set FAILOPEN_GLOBAL_COMPONENT to the global component's id"
            )
    glob = chosen[0]
    return StatusReport(
        global_status=glob.status,
        global_component=glob,
        regions=tuple(c for c, _ in parsed if c is not glob and not c.group),
        fetched_at=fetched_at,
        source="components",
        page_updated_at=_page_updated_at(document, "components.json"),
    )


def parse_indicator(body: bytes, *, fetched_at: float) -> StatusReport:
    """Parse a status document (spec 4.8, ``status.indicator``) into a report without regions.

    ``none`` reads as ``operational``; any other value ``v`` as ``indicator:v``, which is not a
    known status. Raises StatusParseError.
    """
    document = _load(body, "status.json")
    if not isinstance(document, dict):
        raise StatusParseError(f"status.json is a JSON {type(document).__name__}, not an object")
    status = document.get("status")
    if not isinstance(status, dict):
        raise StatusParseError(f"status.json: status is {type(status).__name__}, not an object")
    indicator = status.get("indicator")
    if not isinstance(indicator, str) or not indicator:
        raise StatusParseError("status.json: status.indicator is missing or not a non-empty string")
    return StatusReport(
        global_status=OPERATIONAL if indicator == "none" else f"indicator:{indicator}",
        global_component=None,
        regions=(),
        fetched_at=fetched_at,
        source="indicator",
        page_updated_at=_page_updated_at(document, "status.json"),
    )


# -- the client ------------------------------------------------------------------------------


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
        url = httpx.URL(_http.check_url(status_url, setting="FAILOPEN_STATUS_URL"))
        if url.query or url.fragment:
            raise ConfigError(
                f"FAILOPEN_STATUS_URL: {status_url!r} must be the page's base address, "
                "without a query or fragment"
            )
        if global_component is not None and (
            not isinstance(global_component, str) or not global_component.strip()
        ):
            raise ConfigError("FAILOPEN_GLOBAL_COMPONENT: must be a non-empty component id")
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

    def _answer(self, fetched: _http.Fetched, url: str) -> bytes:
        code = fetched.status_code
        if not 200 <= code < 300:
            retry_after = _http.parse_retry_after(
                fetched.headers.get("retry-after"), now=self._clock.time()
            )
            raise StatusUnavailable(
                f"status page {url} answered HTTP {code}", status_code=code, retry_after=retry_after
            )
        return fetched.content

    def _components(self, fetched: _http.Fetched) -> StatusReport:
        body = self._answer(fetched, self.components_url)
        return parse_components(
            body, global_component=self.global_component, fetched_at=self._clock.time()
        )

    def _indicator(self, fetched: _http.Fetched) -> StatusReport:
        body = self._answer(fetched, self.indicator_url)
        return parse_indicator(body, fetched_at=self._clock.time())

    def _fallback_budget(self, error: StatusError, started: float) -> float | None:
        """Seconds left for the indicator request, or None when there must be none."""
        if not self.indicator_fallback:
            return None
        if isinstance(error, StatusUnavailable) and error.status_code == 429:
            return None  # asked to slow down: a second request would not be polite
        remaining = self.timeout - (time.monotonic() - started)
        return remaining if remaining > 0 else None

    def _log_fallback(self, error: StatusError, fallback: StatusError | None) -> None:
        if fallback is None:
            logger.info("components.json failed (%s); read status.json instead", error)
        else:
            logger.info(
                "components.json failed (%s) and status.json failed too (%s)", error, fallback
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

    def _get(self, client: httpx.Client, url: str, timeout: float) -> _http.Fetched:
        try:
            return _http.fetch(client, "GET", url, timeout=timeout, max_bytes=self.max_bytes)
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

    def close(self) -> None:
        """Release the connection pool. Later reads raise StatusUnavailable."""
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

    async def _aget(self, client: httpx.AsyncClient, url: str, timeout: float) -> _http.Fetched:
        try:
            return await _http.afetch(client, "GET", url, timeout=timeout, max_bytes=self.max_bytes)
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
