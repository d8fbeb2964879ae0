"""What the status client's sync and async twins share: everything but the I/O.

:class:`~failopen.providers.status.StatusClient` reads the page with a blocking or an async httpx
client; the settings checked at construction, the request options, what an answer means, the
global component it pins and when the indicator fallback may run are the same either way. They
live here, apart from the I/O (as httpx keeps its ``BaseClient``), so each twin reads as plain I/O
around the same steps.
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
from failopen.providers import exchange
from failopen.providers.status_documents import (
    Component,
    StatusReport,
    parse_components,
    parse_indicator,
)
from failopen.providers.status_url import COMPONENTS_PATH, check_status_url

__all__ = ["INDICATOR_PATH", "StatusClientBase"]

# The status client's logger, whichever of its modules writes the line.
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


class StatusClientBase:
    """The I/O-free half of :class:`~failopen.providers.status.StatusClient` (see there)."""

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
