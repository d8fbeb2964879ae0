"""The vendor's verify call: is this token good?

:class:`HttpVerifier` sends a token to the configured vendor's verify endpoint
(``FAILOPEN_VERIFY_URL``, or the vendor's own) within one overall deadline
(``FAILOPEN_VERIFY_TIMEOUT``) and maps the answer to an outcome. What the request looks like and
what each answer means is the vendor adapter's (:mod:`failopen.providers.registry`; the spec's
vendor by default, whose rules are :mod:`failopen.providers.verify_answers`); the HTTP, the
deadline, the one retry a vendor may allow, and the paced logs are here.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
import uuid
import weakref
from typing import Protocol, TypeAlias, cast, runtime_checkable

import httpx

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.exceptions import ConfigError, FetchError
from failopen.providers.base import Expectation, Provider, VerifyCall
from failopen.providers.enforcement import Enforcement
from failopen.providers.exchange import Fetched, afetch, fetch
from failopen.providers.urls import check_url
from failopen.providers.verify_answers import (
    _PRINTABLE_ASCII,
    MAX_TOKEN_LENGTH,
    VerifyOutcome,
    VerifyResult,
    _from_fetch_error,
    check_token,
    classify,
)
from failopen.providers.verify_log import CREDENTIALS_LOG_INTERVAL, VerifyLog
from failopen.secret import Secret

__all__ = [
    "CREDENTIALS_LOG_INTERVAL",
    "ContextVerifier",
    "VerifyOutcome",
    "VerifyResult",
    "Verifier",
    "HttpVerifier",
    "check_token",
    "classify",
    "MAX_TOKEN_LENGTH",
    "averify_in_context",
    "verify_in_context",
]

# A retry (where the vendor allows one) goes out only with this share of the deadline left:
# sooner, it could not finish anyway.
_RETRY_MIN_SHARE = 0.25
_ENFORCEMENT = Enforcement()

_USER_AGENT = "failopen"
_MAX_IN_FLIGHT = 100  # concurrent async verify calls per event loop; the rest queue in order


@runtime_checkable
class Verifier(Protocol):
    """Anything that can verify an enforcement token, sync and async."""

    def verify(self, token: str) -> VerifyResult:
        """The vendor's verdict on ``token``; never raises for a bad or missing answer."""
        ...

    async def averify(self, token: str) -> VerifyResult:
        """The async twin of :meth:`verify`."""
        ...


class ContextVerifier(Verifier, Protocol):
    """A Verifier that also sends the client's address and checks the route's action
    (:class:`HttpVerifier`; it says so with ``accepts_context = True``)."""

    def verify(self, token: str, *, remote_ip: str | None = None,
               action: str | None = None) -> VerifyResult:
        """The vendor's verdict on ``token`` for a client at ``remote_ip``."""
        ...

    async def averify(self, token: str, *, remote_ip: str | None = None,
                      action: str | None = None) -> VerifyResult:
        """The async twin of :meth:`verify`."""
        ...


_AsyncClients: TypeAlias = weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, asyncio.Semaphore]
]


class HttpVerifier:
    """Verifies tokens with the vendor's verify endpoint over HTTP; never raises on bad answers.

    ``provider`` is the vendor's adapter (the spec's vendor by default); ``public_key`` its site
    key, sent where the vendor takes one; ``min_score`` the lowest score admitted where answers
    carry one. ``transport``/``async_transport`` replace the network (e.g.
    ``FakeVerifyAPI().transport()``); ``clock`` paces the ERROR log about rejected credentials;
    ``lane`` names the worker pool of the sync calls (``verify``; the probe's own is ``probe``).
    """

    #: :meth:`verify` takes ``remote_ip`` and ``action`` (a Verifier of your own need not).
    accepts_context = True

    def __init__(
        self,
        verify_url: str,
        private_key: str | Secret,
        *,
        timeout: float = 3.0,
        require_verified: bool = False,
        max_bytes: int = 65_536,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock = SYSTEM_CLOCK,
        lane: str = "verify",
        provider: Provider | None = None,
        public_key: str | None = None,
        min_score: float = 0.5,
    ) -> None:
        self.verify_url = check_url(verify_url, setting="FAILOPEN_VERIFY_URL")
        self.provider = provider if provider is not None else _ENFORCEMENT
        self.public_key = public_key
        self._expect = Expectation(min_score=min_score, require_verified=require_verified)
        # ``probe``: the watcher's own verify probe, in its own worker pool (failopen.engine.probe).
        self._lane = lane
        if isinstance(private_key, Secret):  # Config.private_key, passed as it is
            private_key = private_key.reveal()
        if not isinstance(private_key, str) or not private_key:
            raise ConfigError("FAILOPEN_PRIVATE_KEY: the vendor private key is required")
        if not _PRINTABLE_ASCII.fullmatch(private_key) or private_key != private_key.strip():
            # Typically a trailing newline from a secrets file; never echo the key itself.
            raise ConfigError(
                "FAILOPEN_PRIVATE_KEY: has surrounding whitespace or characters outside "
                "printable ASCII (a trailing newline from a secrets file?)"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            math.isfinite(timeout) and timeout > 0
        ):
            raise ConfigError(
                f"FAILOPEN_VERIFY_TIMEOUT: must be a positive number of seconds, got {timeout!r}"
            )
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ConfigError(f"max_bytes: must be a positive integer, got {max_bytes!r}")
        self._private_key = private_key
        self.timeout = float(timeout)
        self.require_verified = require_verified
        self.max_bytes = max_bytes
        self._transport = transport
        self._async_transport = async_transport
        self._clock = clock
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._client_pid = 0
        # One (client, in-flight cap) per event loop, read and written as one tuple.
        self._aclients: _AsyncClients = weakref.WeakKeyDictionary()
        self._aclients_pid = os.getpid()
        self._log = VerifyLog(self.provider, self.verify_url, clock)
        if private_key in self.provider.test_secrets:
            self._log.test_secret()

    def __repr__(self) -> str:
        vendor = "" if self.provider is _ENFORCEMENT else f"vendor={self.provider.name!r}, "
        return f"HttpVerifier({vendor}verify_url={self.verify_url!r})"

    # -- clients --------------------------------------------------------------------------------

    def _sync_client(self) -> httpx.Client:
        # A client inherited through fork shares its sockets with the parent: start afresh.
        client = self._client
        if client is None or self._client_pid != os.getpid():
            with self._lock:
                if self._client is None or self._client_pid != os.getpid():
                    self._client = httpx.Client(
                        transport=self._transport, headers=self._headers()
                    )
                    self._client_pid = os.getpid()
                client = self._client
        return client

    def _async_client(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        """This loop's client and its in-flight cap, made on first use.

        Connections belong to the loop that opened them, so each loop gets its own client (and
        its own ``_MAX_IN_FLIGHT`` cap), kept for as long as the loop: an app running a loop per
        thread opens one client per loop, not one per call.
        """
        loop = asyncio.get_running_loop()
        aclients = self._aclients
        if self._aclients_pid == os.getpid():
            entry = aclients.get(loop)
            if entry is not None:
                return entry
        with self._lock:
            if self._aclients_pid != os.getpid():
                # Inherited through fork: those clients share sockets with the parent. Drop them
                # unclosed; the parent still owns them.
                self._aclients = weakref.WeakKeyDictionary()
                self._aclients_pid = os.getpid()
            entry = self._aclients.get(loop)
            if entry is None:
                # A client of a closed loop can never be used or closed again, and may hold its
                # loop alive (pooled streams, a semaphore's waiters): forget it.
                for stale in [other for other in self._aclients if other.is_closed()]:
                    del self._aclients[stale]
                entry = (
                    httpx.AsyncClient(
                        transport=self._async_transport, headers=self._headers(),
                        limits=httpx.Limits(max_connections=_MAX_IN_FLIGHT),
                    ),
                    asyncio.Semaphore(_MAX_IN_FLIGHT),
                )
                self._aclients[loop] = entry
        return entry

    @staticmethod
    def _headers() -> dict[str, str]:
        return {"User-Agent": _USER_AGENT, "Accept": "application/json"}

    def close(self) -> None:
        """Release the sync client's connections (a later call opens new ones)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._client_pid == os.getpid():
            client.close()

    async def aclose(self) -> None:
        """Release the running loop's async client (a later call on this loop opens a new one).

        Call it on each event loop that made calls, before that loop ends; clients of other loops
        are left alone. A client of a loop that closed without it is dropped when another loop
        next makes a client, and its sockets wait for the garbage collector.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._aclients_pid != os.getpid():  # inherited through fork: the parent's
                self._aclients = weakref.WeakKeyDictionary()
                self._aclients_pid = os.getpid()
            entry = self._aclients.pop(loop, None)
        if entry is not None:
            await entry[0].aclose()

    def __enter__(self) -> HttpVerifier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> HttpVerifier:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the call -------------------------------------------------------------------------------

    def verify(self, token: str, *, remote_ip: str | None = None,
               action: str | None = None) -> VerifyResult:
        """Ask the vendor about ``token``; every failure becomes a result, never an exception.

        ``remote_ip`` (the client's address) goes to vendors that take it; ``action`` is the one
        the route expects (a token minted for another is invalid)."""
        early = check_token(token, self.provider.max_token_length)
        if early is not None:
            return self._finish(early)
        call, expect = self._call(token, remote_ip, action)
        secrets = (token, self._private_key)
        deadline = time.monotonic() + self.timeout
        retried = False
        while True:
            try:
                fetched = fetch(
                    self._sync_client(), "POST", call.url, timeout=self._left(deadline),
                    max_bytes=self.max_bytes, json=call.json, data=call.data,
                    headers=dict(call.headers or {}), lane=self._lane,
                )
            except FetchError as exc:
                result = _from_fetch_error(exc, secrets)
            else:
                result = self._classify(fetched, expect, secrets)
            if retried or not self._retry_due(result, deadline):
                return self._finish(result)
            retried = True

    async def averify(self, token: str, *, remote_ip: str | None = None,
                      action: str | None = None) -> VerifyResult:
        """The async twin of :meth:`verify`."""
        early = check_token(token, self.provider.max_token_length)
        if early is not None:
            return self._finish(early)
        call, expect = self._call(token, remote_ip, action)
        secrets = (token, self._private_key)
        client, semaphore = self._async_client()
        started = time.monotonic()
        deadline = started + self.timeout
        try:
            # Callers beyond the cap wait here, inside the deadline: httpx's own pool queue slows
            # down superlinearly with thousands of waiters, an asyncio.Semaphore does not.
            await asyncio.wait_for(semaphore.acquire(), self.timeout)
        except asyncio.TimeoutError:
            # Our own queue, whose length a caller controls: never evidence about the vendor.
            return self._finish(VerifyResult(
                VerifyOutcome.OVERLOADED,
                f"overloaded: no free connection within {self.timeout:g}s"))
        retried = False
        try:
            while True:
                try:
                    fetched = await afetch(
                        client, "POST", call.url, timeout=self._left(deadline),
                        max_bytes=self.max_bytes, json=call.json, data=call.data,
                        headers=dict(call.headers or {}),
                    )
                except FetchError as exc:
                    result = _from_fetch_error(exc, secrets)
                else:
                    result = self._classify(fetched, expect, secrets)
                if retried or not self._retry_due(result, deadline):
                    return self._finish(result)
                retried = True
        finally:
            semaphore.release()

    def _call(self, token: str, remote_ip: str | None,
              action: str | None) -> tuple[VerifyCall, Expectation]:
        """The request for ``token`` and what its answer must show; a retry sends the same."""
        call = self.provider.call(
            token, secret=self._private_key, verify_url=self.verify_url,
            public_key=self.public_key, remote_ip=remote_ip, action=action,
            attempt=str(uuid.uuid4()),
        )
        expect = self._expect
        if action is not None and self.provider.checks_action:
            expect = Expectation(expect.min_score, action, expect.require_verified)
        elif action is not None:
            self._log.action_ignored(action)
        return call, expect

    def _classify(self, fetched: Fetched, expect: Expectation,
                  secrets: tuple[str, ...]) -> VerifyResult:
        if self.provider is _ENFORCEMENT:  # the default: its classification, called directly
            return classify(fetched, require_verified=expect.require_verified, secrets=secrets)
        try:
            return self.provider.classify(fetched, expect=expect, secrets=secrets)
        except Exception as exc:  # an answer an adapter could not read: a result, paced
            return VerifyResult(VerifyOutcome.UNAVAILABLE,
                                f"{self.provider.title}'s answer could not be read "
                                f"({type(exc).__name__})", fetched.status_code)

    def _left(self, deadline: float) -> float:
        return max(deadline - time.monotonic(), 0.001)

    def _retry_due(self, result: VerifyResult, deadline: float) -> bool:
        """True where the vendor makes a retry safe (an idempotency key), the answer was lost
        or failed, and enough of the deadline is left for another try (callers retry once)."""
        return self.provider.retries and result.outcome is VerifyOutcome.UNAVAILABLE \
            and deadline - time.monotonic() >= self.timeout * _RETRY_MIN_SHARE

    def _finish(self, result: VerifyResult) -> VerifyResult:
        self._log.record(result)
        return result


def verify_in_context(verifier: Verifier, token: str, *, remote_ip: str | None,
                      action: str | None) -> VerifyResult:
    """``verifier``'s verdict, with the client's address and the route's action where it takes
    them (an :class:`HttpVerifier`; a Verifier of one's own is called with the token alone)."""
    if getattr(verifier, "accepts_context", False):
        return cast(ContextVerifier, verifier).verify(token, remote_ip=remote_ip, action=action)
    return verifier.verify(token)


async def averify_in_context(verifier: Verifier, token: str, *, remote_ip: str | None,
                             action: str | None) -> VerifyResult:
    """The async twin of :func:`verify_in_context`."""
    if getattr(verifier, "accepts_context", False):
        return await cast(ContextVerifier, verifier).averify(token, remote_ip=remote_ip,
                                                             action=action)
    return await verifier.averify(token)
