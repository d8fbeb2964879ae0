"""A faithful local emulator of the session-intelligence API (interface A of the vendor spec).

Every endpoint, filter, limit and error code of spec sections 4.2-4.6, 5, 7 and 8, with data
computed from ``(seed, index)`` on demand: record *i* is a pure function of the seed, so a million
sessions cost no memory and two emulators with the same seed serve the same records.

Choices where the spec is silent (documented here so tests and users can rely on them):

* Default ``page_size`` is 100 (:data:`DEFAULT_PAGE_SIZE`).
* Time windows are half-open ``[from, to)``; ``to`` must be after ``from`` and at most 30 days
  later. A cohort is in a window when its ``cohort_window_start`` is (or, with
  ``cohort_filter="created_at"``, its ``created_at``: the spec does not say which, so a client
  can be tested against both); a session when its ``session_created`` is. So consecutive windows
  never return the same record twice. The listing order is the same in both modes.
* Ordering is by time: cohorts by window start, sessions by creation (cohort windows never
  overlap, so this is also cohort by cohort).
* Unknown query parameters are ignored on every endpoint, as the filters of other endpoints are on
  list-cohort-sessions: the spec's error lists have no code for them.
* Page tokens are signed and bound to the endpoint, the path's cohort and every filter (public keys
  compared as a set); ``page_size`` may change between pages. An empty ``page_token`` is absent.
* The last page carries ``next_page_token: ""`` (or no field: ``final_page_token="absent"``).
* A wrong method on a known path, and any unknown path, answer 404 ``not_found``.
* Played time (``live=True``, ``_rai_time.py``): a cohort is served from its ``created_at`` on,
  some days late; cohorts added while it runs (:meth:`RaiEmulator.add_cohort`) likewise, and
  listed after the generated ones whatever their window (so not in time order).

The records are generated in ``_rai_data.py``; requests are parsed and validated, and page tokens
signed, in ``_rai_requests.py``; a page's body is rendered in ``_rai_pages.py``; this module
answers: auth, faults, counters, pages, serving.
"""

from __future__ import annotations

import functools
import hmac
import json
import secrets
import threading
from collections import Counter, deque
from collections.abc import Collection, Iterator, Sequence
from typing import Any, Literal

import httpx

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.testing._rai_control import RaiControls
from failopen.testing._rai_data import Query
from failopen.testing._rai_faults import RaiFaults
from failopen.testing._rai_pages import page_chunks
from failopen.testing._rai_requests import (
    DEFAULT_PAGE_SIZE,
    ENDPOINTS,
    HTTP_STATUS,
    MAX_WINDOW,
    ApiError,
    cohort_sessions_query,
    issue_page_token,
    list_query,
    read_page_token,
    route,
)
from failopen.testing._rai_time import MAX_SPAN_DAYS, PlayedDataset, cohort_times, resolve_time
from failopen.testing._server import FakeRequest, LoopbackServer, Reply, as_transport
from failopen.testing.control import with_control

__all__ = ["RaiEmulator", "DEFAULT_PAGE_SIZE", "MAX_WINDOW", "ENDPOINTS"]


class RaiEmulator(RaiFaults):
    """The session-intelligence API, served from lazily generated deterministic data.

    Serve it in-process with :meth:`transport` or on a socket with :meth:`serve`; read the counters
    (``requests``, ``authorize_calls``, ``data_requests``, ``error_counts``) and ``history`` to
    check what a client did. Fault injection: ``fail_every`` (every Nth data request answers 500
    ``internal``), ``latency`` (seconds before each answer), ``slow_pages`` (seconds a list page's
    body stalls after its first bytes), :meth:`inject_error`, :meth:`expire_tokens`,
    :meth:`expire_page_tokens`, ``forbidden_endpoints`` and ``page_token_ttl``. New data:
    :meth:`add_cohorts` (later cohorts appear), :meth:`hide_cohorts` and :meth:`reveal_cohorts`
    (a cohort created late inside an old window), :meth:`add_cohort`. ``live=True`` plays time
    (``_rai_time.py``); ``serve(control=True)`` adds ``/_control`` (``_rai_control.py``).
    """

    def __init__(
        self,
        *,
        client_id: str = "test-client",
        client_secret: str = "test-secret",
        public_keys: Sequence[str] = ("pk_live_test",),
        cohorts: int = 12,
        sessions_per_cohort: int | tuple[int, int] = (20, 80),
        seed: int = 0,
        start: str | None = None,  # RFC 3339 or now-2d; default 2024-05-01T00:00:00Z
        span_days: float = 20.0,
        token_ttl: int = 3600,
        page_token_ttl: float | None = None,
        clock: Clock = SYSTEM_CLOCK,
        fail_every: int | None = None,
        latency: float = 0.0,
        slow_pages: float = 0.0,
        forbidden_endpoints: Collection[str] = (),
        unknown_fields: bool = False,
        final_page_token: Literal["empty", "absent"] = "empty",
        history_size: int = 1000,
        live: bool = False,
        cohort_filter: Literal["window_start", "created_at"] = "window_start",
    ) -> None:
        if not 0 < span_days <= MAX_SPAN_DAYS:  # also refuses nan
            raise ValueError(f"span_days: above 0 and at most {MAX_SPAN_DAYS}, not {span_days}")
        now_ms = int(clock.time() * 1000)
        if start is None and live:  # played time: the span ends now
            start_ms = resolve_time(f"now-{round(span_days * 86_400)}s", now_ms, "start")
        else:
            start_ms = resolve_time(start or "2024-05-01T00:00:00Z", now_ms, "start")
        if isinstance(sessions_per_cohort, int):
            sessions_per_cohort = (sessions_per_cohort, sessions_per_cohort)
        low, high = sessions_per_cohort
        if not public_keys or cohorts < 0 or not 0 <= low <= high or span_days <= 0:
            raise ValueError("need public keys, cohorts >= 0, 0 <= sessions low <= high, span > 0")
        if fail_every is not None and fail_every < 1:
            raise ValueError("fail_every must be >= 1 or None")
        unknown = set(forbidden_endpoints) - set(ENDPOINTS)
        if unknown:
            raise ValueError(f"forbidden_endpoints: unknown {sorted(unknown)}; use {ENDPOINTS}")
        if cohort_filter not in ("window_start", "created_at"):
            raise ValueError(f"cohort_filter: {cohort_filter!r}; use window_start or created_at")
        self.client_id = client_id
        self.client_secret = client_secret
        self.public_keys = tuple(public_keys)
        self.cohort_count = cohorts
        self.seed = seed
        self.token_ttl = token_ttl
        self.page_token_ttl = page_token_ttl
        self.fail_every = fail_every
        self.latency = latency
        self.slow_pages = slow_pages
        self.forbidden_endpoints = frozenset(forbidden_endpoints)
        self.final_page_token = final_page_token
        self._clock = clock
        self._data = PlayedDataset(
            public_keys=self.public_keys, cohorts=cohorts, sessions_per_cohort=(low, high),
            seed=seed, start_ms=start_ms, span_days=span_days, unknown_fields=unknown_fields,
            live=live, now_ms=lambda: int(clock.time() * 1000),
            cohort_filter=cohort_filter,
        )  # fmt: skip
        self._plans = self._data.plans  # bounded: plans of cohorts, never records
        self._key_of = {key: i for i, key in enumerate(self.public_keys)}
        self._lock = threading.Lock()
        self._tokens: dict[str, float] = {}
        self._page_secret = secrets.token_bytes(16)
        self._stopping = threading.Event()
        self._injected: list[tuple[str, str | None]] = []
        self._cut: list[tuple[str | None, str]] = []
        self._instance = secrets.token_hex(3)
        self.requests = 0
        self.authorize_calls = 0
        self.data_requests = 0
        self.error_counts: Counter[str] = Counter()
        self.history: deque[FakeRequest] = deque(maxlen=history_size)
        #: The server of the latest :meth:`serve`, None until then.
        self.server: LoopbackServer | None = None

    # -- data ------------------------------------------------------------------------------

    @property
    def unknown_fields(self) -> bool:
        """Whether records and pages carry fields the spec does not list (tolerance tests)."""
        return self._data.unknown_fields

    @unknown_fields.setter
    def unknown_fields(self, value: bool) -> None:
        """Turn the extra, unlisted fields on or off for answers from now on, cohorts already
        served included."""
        self._data.rerender(value)

    @property
    def timeline(self) -> PlayedDataset:
        """Its cohorts in time: ``live``, ``now_ms()``, ``listed_now()`` (``_rai_time.py``)."""
        return self._data

    @property
    def total_sessions(self) -> int:
        """Sessions across all cohorts."""
        return self._data.total_sessions

    @property
    def data_window(self) -> tuple[str, str]:
        """``(from, to)`` covering every cohort window (may be longer than 30 days)."""
        return self._data.data_window

    def cohort_ids(self) -> list[str]:
        """Every cohort id, in the order the API lists them."""
        return self._data.cohort_ids()

    def cohort_record(self, cohort_id: str) -> dict[str, Any]:
        """The record ``GET /cohorts/{cohort_id}`` serves (KeyError when there is none)."""
        return self._data.cohort_record(cohort_id)

    def iter_session_records(self, cohort_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every session (of one cohort, or of all), decoded from exactly what the API serves."""
        return self._data.iter_session_records(cohort_id)

    # -- fault controls --------------------------------------------------------------------

    def expire_tokens(self) -> None:
        """Invalidate every access token issued so far (the next data request gets 401)."""
        with self._lock:
            self._tokens.clear()

    def expire_page_tokens(self) -> None:
        """Invalidate every page token issued so far (the next use gets invalid_page_token)."""
        self._page_secret = secrets.token_bytes(16)

    def add_cohorts(self, count: int) -> list[str]:
        """Create ``count`` new cohorts after the existing ones (new attacks found); their ids."""
        if count < 0:
            raise ValueError("count must be >= 0")
        with self._lock:
            first = self._data.cohort_count
            self._data.cohort_count += count
            self.cohort_count = self._data.cohort_count
        return [self._data.plan(c).record["cohort_id"] for c in range(first, first + count)]

    def add_cohort(
        self, window_start: str, *, window_end: str | None = None,
        created_at: str | None = None, sessions: int = 50,
    ) -> dict[str, Any]:
        """One cohort in ``[window_start, window_end)`` (1 h), served from ``created_at`` on (now
        or the window's end); times RFC 3339 or ``now-3d``; its record (ValueError: why not)."""
        cohort = cohort_times(window_start, window_end, created_at, sessions, self._data.now_ms())
        with self._lock:
            index = self._data.add(cohort)
            self.cohort_count = self._data.cohort_count
        return json.loads(json.dumps(self._data.plan(index).record))  # type: ignore[no-any-return]

    def hide_cohorts(self, indexes: Collection[int]) -> None:
        """Act as if cohorts ``indexes`` were not created yet: not listed, not found."""
        with self._lock:
            self._data.hidden.update(indexes)

    def reveal_cohorts(self, indexes: Collection[int] | None = None) -> None:
        """Create hidden cohorts now (all when ``indexes`` is None), inside their old windows."""
        with self._lock:
            if indexes is None:
                self._data.hidden.clear()
            else:
                self._data.hidden.difference_update(indexes)

    # -- serving ---------------------------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        """An in-process httpx transport (sync and async clients) answering like the API."""
        return as_transport(self.handler)

    def serve(
        self, *, host: str = "127.0.0.1", port: int = 0, control: bool = False
    ) -> LoopbackServer:
        """A started loopback server for the emulator, also kept as :attr:`server`; ``stop()``
        also ends pending waits. ``control=True``: ``/_control`` too, for loopback clients."""
        self.server = _EmulatorServer(self, host=host, port=port, control=control).start()
        return self.server

    @property
    def url(self) -> str:
        """Base URL of the latest :meth:`serve`; RuntimeError before."""
        if self.server is None:
            raise RuntimeError("RaiEmulator is not served: call serve() first")
        return self.server.url

    @property
    def base_url(self) -> str:
        """The client's ``base_url`` (``FAILOPEN_RAI_BASE_URL``): the same as :attr:`url`."""
        return self.url

    def handler(self, request: FakeRequest) -> Reply:
        """Answer one request (a :data:`failopen.testing._server.Handler`)."""
        with self._lock:
            self.requests += 1
            serial = self.requests
            self.history.append(request)
        request_id = f"req_{self._instance}{serial:08x}{secrets.token_hex(4)}"
        if self.latency > 0:
            self._clock.wait(self._stopping, self.latency)
        endpoint, cohort_id = route(request.method, request.path)
        try:
            if endpoint is None:
                raise ApiError("not_found", f"no route for {request.method} {request.path}")
            self._count(endpoint)
            if endpoint == "authorize":
                return self._authorize(request, request_id)
            self._authenticate(request)
            if endpoint in self.forbidden_endpoints:
                raise ApiError("forbidden", "the client has no right to this endpoint")
            if endpoint == "get_cohort":
                reply = _json_reply(self._data.plan(self._lookup(cohort_id)).record, request_id)
            else:
                if endpoint == "list_cohort_sessions":
                    query = cohort_sessions_query(request.query, self._lookup(cohort_id))
                else:
                    query = list_query(endpoint, request.query, self._key_of, self._data.index_of)
                reply = self._page(query, request.query.get("page_token", [""]), request_id)
        except ApiError as exc:
            return self._error(exc.code, exc.message, request_id)
        return self._maybe_cut(endpoint, reply)

    def _count(self, endpoint: str) -> None:
        with self._lock:
            injected = next(
                (i for i, (_, ep) in enumerate(self._injected) if ep in (None, endpoint)), None
            )
            code = self._injected.pop(injected)[0] if injected is not None else None
            if endpoint == "authorize":
                self.authorize_calls += 1
            else:
                self.data_requests += 1
                if code is None and self.fail_every and self.data_requests % self.fail_every == 0:
                    code = "internal"
        if code is not None:
            raise ApiError(code, "injected fault" if code != "internal" else "internal error")

    def _error(self, code: str, message: str, request_id: str) -> Reply:
        with self._lock:
            self.error_counts[code] += 1
        status = HTTP_STATUS[code]
        reply = _json_reply(
            {"error": {"code": code, "message": message, "request_id": request_id}},
            request_id, status,
        )  # fmt: skip
        if status == 401:
            reply.headers.append(("WWW-Authenticate", 'Bearer realm="rai"'))
        return reply

    def _authorize(self, request: FakeRequest, request_id: str) -> Reply:
        if not request.headers.get("content-type", "").startswith("application/json"):
            raise ApiError("invalid_request", "the body must be application/json")
        try:
            body = request.json()
        except ValueError:
            raise ApiError("invalid_request", "the body is not valid JSON") from None
        if not isinstance(body, dict) or not all(
            isinstance(body.get(f), str) and body[f] for f in ("client_id", "client_secret")
        ):
            raise ApiError("invalid_request", "client_id and client_secret are required strings")
        if not (
            hmac.compare_digest(body["client_id"].encode(), self.client_id.encode())
            and hmac.compare_digest(body["client_secret"].encode(), self.client_secret.encode())
        ):
            raise ApiError("unauthorized", "invalid client credentials")
        token = "rai_at_" + secrets.token_urlsafe(24)
        with self._lock:
            self._tokens[token] = self._clock.monotonic() + self.token_ttl
        body = {"access_token": token, "expires_in": self.token_ttl, "token_type": "Bearer"}
        return _json_reply(body, request_id)

    def _authenticate(self, request: FakeRequest) -> None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError("unauthorized", "missing bearer access token")
        with self._lock:
            expiry = self._tokens.get(token.strip())
            if expiry is not None and self._clock.monotonic() >= expiry:
                del self._tokens[token.strip()]
                raise ApiError("unauthorized", "the access token has expired")
        if expiry is None:
            raise ApiError("unauthorized", "invalid access token")

    def _lookup(self, cohort_id: str | None) -> int:
        index = self._data.index_of(cohort_id or "")
        if index is None:
            raise ApiError("not_found", "no such cohort in the caller's scope")
        return index

    # -- list pages ------------------------------------------------------------------------

    def _page(self, query: Query, token_values: list[str], request_id: str) -> Reply:
        if len(token_values) > 1:
            raise ApiError("invalid_page_token", "page_token given more than once")
        start = (0, 0)
        if token_values[0]:
            start = read_page_token(self._page_secret, token_values[0], query,
                                    self._clock.monotonic(), self.page_token_ttl)  # fmt: skip
        stall = None
        if self.slow_pages > 0:
            stall = functools.partial(self._clock.wait, self._stopping, self.slow_pages)
        body = page_chunks(
            query, self._data.positions(query, start), functools.partial(self._page_token, query),
            final_page_token=self.final_page_token, unknown_fields=self.unknown_fields,
            stall=stall,
        )  # fmt: skip
        headers = [("Content-Type", "application/json"), ("X-Request-Id", request_id)]
        return Reply(200, body, headers)

    def _page_token(self, query: Query, position: tuple[int, int]) -> str:
        return issue_page_token(self._page_secret, query, position, self._clock.monotonic())


def _json_reply(data: Any, request_id: str, status: int = 200) -> Reply:
    return Reply.json(data, status, headers=[("X-Request-Id", request_id)])


class _EmulatorServer(LoopbackServer):
    """A loopback server whose stop also cuts short the emulator's simulated latency."""

    def __init__(self, emulator: RaiEmulator, *, host: str, port: int, control: bool) -> None:
        handler = emulator.handler
        super().__init__(with_control(handler, RaiControls(emulator)) if control else handler,
                         host=host, port=port)  # fmt: skip
        self._emulator = emulator

    def start(self) -> LoopbackServer:
        self._emulator._stopping.clear()
        return super().start()

    def stop(self) -> None:
        self._emulator._stopping.set()
        super().stop()
