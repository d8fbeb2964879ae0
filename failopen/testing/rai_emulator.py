"""A faithful local emulator of the session-intelligence API (interface A of the vendor spec).

Every endpoint, filter, limit and error code of spec sections 4.2-4.6, 5, 7 and 8, with data
computed from ``(seed, index)`` on demand: record *i* is a pure function of the seed, so a million
sessions cost no memory and two emulators with the same seed serve the same records.

Choices where the spec is silent (documented here so tests and users can rely on them):

* Default ``page_size`` is 100 (:data:`DEFAULT_PAGE_SIZE`).
* Time windows are half-open ``[from, to)``; ``to`` must be after ``from`` and at most 30 days
  later. A cohort is in a window when its ``cohort_window_start`` is; a session when its
  ``session_created`` is. So consecutive windows never return the same record twice.
* Ordering is by time: cohorts by window start, sessions by creation (cohort windows never
  overlap, so this is also cohort by cohort).
* Unknown query parameters are ignored on every endpoint, as the filters of other endpoints are on
  list-cohort-sessions: the spec's error lists have no code for them.
* Page tokens are signed and bound to the endpoint, the path's cohort and every filter (public keys
  compared as a set); ``page_size`` may change between pages. An empty ``page_token`` is absent.
* The last page carries ``next_page_token: ""`` (or no field: ``final_page_token="absent"``).
* A wrong method on a known path, and any unknown path, answer 404 ``not_found``.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal
from urllib.parse import unquote

import cachetools
import httpx

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.testing._server import FakeRequest, LoopbackServer, Reply, as_transport

__all__ = ["RaiEmulator", "DEFAULT_PAGE_SIZE", "MAX_WINDOW", "ENDPOINTS"]

DEFAULT_PAGE_SIZE = 100
"""Records per page when the request has no ``page_size`` (the spec does not give one)."""

MAX_WINDOW = timedelta(days=30)
"""Longest ``to - from`` the list endpoints accept."""

ENDPOINTS = ("authorize", "list_cohorts", "get_cohort", "list_cohort_sessions", "list_sessions")
"""Endpoint names used by ``forbidden_endpoints``, ``inject_error`` and the counters."""

_PREFIX = "/api/rai/v1"
_SCHEMA = "rai-v1"
_M64 = (1 << 64) - 1
_M48 = (1 << 48) - 1
_ODD48 = (0xD1B54A32D193, 0x9E3779B97F4B)  # odd multipliers permute the integers mod 2**48
_INV48 = tuple(pow(k, -1, 1 << 48) for k in _ODD48)
_ODD64 = 0x9E3779B97F4A7C15
_CHUNK_RECORDS = 200
_HTTP_STATUS = {
    "invalid_request": 400, "invalid_page_size": 400, "invalid_page_token": 400,
    "invalid_window": 400, "invalid_filter": 400, "missing_public_key": 400,
    "unauthorized": 401, "forbidden": 403, "forbidden_public_key": 403, "not_found": 404,
    "internal": 500,
}  # fmt: skip
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})"
)
_COHORT_ID = re.compile(r"coh_([0-9a-f]{12})")
_TELLTALES = (
    (4101, "headless_automation_fingerprint", "threat_research"),
    (4102, "credential_stuffing_velocity", "threat_research"),
    (4117, "residential_proxy_rotation", "threat_research"),
    (4123, "solver_farm_timing", "customer_success"),
    (4131, "emulated_device_sensors", "threat_research"),
    (4140, "token_replay_pattern", "customer_success"),
    (4152, "scripted_signup_burst", "data_science"),
    (4166, "account_takeover_sequence", "data_science"),
)
_FLAGS = ("automation_framework", "ip_reputation", "high_velocity", "device_reuse",
          "proxy_detected", "emulator_detected")  # fmt: skip
_FLAG_SETS = tuple(
    json.dumps([f for bit, f in enumerate(_FLAGS) if mask >> bit & 1]) for mask in range(64)
)
_VERIFY = tuple(
    json.dumps({"security_level": level, "solved": solved, "verified": verified})
    for level in ("default", "enhanced")
    for solved, verified in ((True, True), (True, False), (False, False))
)
_CUSTOMERS = ("Acme Retail", "Globex Financial", "Initech Travel", "Umbrella Games")
_FUTURE = {"future_field": {"note": "added by a later rai-v1 revision"}}


def _mix(x: int) -> int:
    """splitmix64: a fast, well-spread hash of one integer."""
    x = (x + _ODD64) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _permute48(x: int) -> int:
    """A bijection on 48-bit integers, so cohort ids look opaque yet decode to their index."""
    x = (x + 0x2545F4914F6C & _M48) * _ODD48[0] & _M48
    return (x ^ x >> 24) * _ODD48[1] & _M48


def _unpermute48(y: int) -> int:
    y = y * _INV48[1] & _M48
    return ((y ^ y >> 24) * _INV48[0] - 0x2545F4914F6C) & _M48


def _rfc3339(ms: int, *, fraction: bool) -> str:
    t = time.gmtime(ms // 1000)
    text = f"{t[0]:04d}-{t[1]:02d}-{t[2]:02d}T{t[3]:02d}:{t[4]:02d}:{t[5]:02d}"
    return f"{text}.{ms % 1000:03d}Z" if fraction else text + "Z"


def _parse_rfc3339(value: str) -> int | None:
    """Milliseconds since the epoch, or None when ``value`` is not an RFC 3339 date-time."""
    m = _RFC3339.fullmatch(value)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    zone = m.group(8)
    offset = timedelta(0)
    if zone not in ("Z", "z"):
        sign = -1 if zone[0] == "-" else 1
        offset = sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=timezone(offset))
    except ValueError:
        return None
    return int(moment.timestamp()) * 1000 + int((m.group(7) or "0").ljust(3, "0")[:3])


class _ApiError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class _Cohort:
    """Everything about one cohort, and how to render its sessions cheaply."""

    index: int
    key_index: int
    start_ms: int
    length_ms: int
    session_count: int
    tagged_count: int
    tag_mult: int
    tag_offset: int
    anomaly_ids: tuple[int, ...]
    telltale_ids: tuple[int, ...]
    hash_base: int
    id_key: int
    record: dict[str, Any]
    template: str  # one session as %-format JSON; cohort-wide parts already in place
    tagged_names: str
    custom_scores: bool

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.length_ms

    def created_ms(self, j: int) -> int:
        """Creation time of session ``j``: strictly increasing in j whenever the window allows."""
        n = self.session_count
        step = max(1, self.length_ms // n)
        jitter = _mix(self.hash_base ^ j) % step if step > 1 else 0
        return self.start_ms + (j * self.length_ms) // n + jitter

    def session_json(self, j: int) -> str:
        h = _mix(self.hash_base ^ j)
        n = self.session_count
        step = max(1, self.length_ms // n)
        created = self.start_ms + (j * self.length_ms) // n + (h % step if step > 1 else 0)
        tagged = (j * self.tag_mult + self.tag_offset) % n < self.tagged_count
        bot = tagged or (h >> 20) & 3 != 0
        score = 800 + (h >> 24) % 200 if tagged else 300 + (h >> 24) % 690
        mask = (h >> 34) & 63 | (1 if tagged else 0)
        verify_pick = (h >> 40) % 20
        custom = (h >> 44) % 1000
        return self.template % (
            ((self.index << 32 | j) * _ODD64 ^ self.id_key) & _M64,
            _rfc3339(created, fraction=True),
            self.anomaly_ids[j % len(self.anomaly_ids)],
            f"0.{score:03d}",
            "bot" if bot else "human",
            f"{custom // 10}.{custom % 10}" if self.custom_scores else "null",
            _FLAG_SETS[mask],
            "true" if tagged else "false",
            self.tagged_names if tagged else "[]",
            "null" if verify_pick == 0 else _VERIFY[verify_pick % len(_VERIFY)],
        )


@dataclass(frozen=True)
class _Query:
    """A validated list request: what it selects and where the page starts."""

    kind: str
    keys: frozenset[int] | None
    from_ms: int
    to_ms: int
    cohort: int | None  # an index; -1 when the filter names no existing cohort
    anomaly_id: int | None
    telltale_id: int | None
    min_session_count: int | None
    page_size: int
    digest: str


class RaiEmulator:
    """The session-intelligence API, served from lazily generated deterministic data.

    Serve it in-process with :meth:`transport` or on a socket with :meth:`serve`; read the counters
    (``requests``, ``authorize_calls``, ``data_requests``, ``error_counts``) and ``history`` to
    check what a client did. Fault injection: ``fail_every`` (every Nth data request answers 500
    ``internal``), ``latency`` (seconds before each answer), ``slow_pages`` (seconds a list page's
    body stalls after its first bytes), :meth:`inject_error`, :meth:`expire_tokens`,
    :meth:`expire_page_tokens`, ``forbidden_endpoints`` and ``page_token_ttl``.
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
        start: str = "2024-05-01T00:00:00Z",
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
    ) -> None:
        start_ms = _parse_rfc3339(start)
        if start_ms is None:
            raise ValueError(f"start: {start!r} is not an RFC 3339 date-time")
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
        self.unknown_fields = unknown_fields
        self.final_page_token = final_page_token
        self._clock = clock
        self._sessions_range = (low, high)
        self._start_ms = start_ms // 1000 * 1000
        self._slot_ms = int(span_days * 86_400) // max(cohorts, 1) * 1000
        self._id_key = _mix(seed ^ 0x5E551075)
        self._key_of = {key: i for i, key in enumerate(self.public_keys)}
        self._lock = threading.Lock()
        self._tokens: dict[str, float] = {}
        self._page_secret = secrets.token_bytes(16)
        self._plans: cachetools.LRUCache[int, _Cohort] = cachetools.LRUCache(maxsize=4096)
        self._stopping = threading.Event()
        self._injected: list[tuple[str, str | None]] = []
        self._instance = secrets.token_hex(3)
        self.requests = 0
        self.authorize_calls = 0
        self.data_requests = 0
        self.error_counts: Counter[str] = Counter()
        self.history: deque[FakeRequest] = deque(maxlen=history_size)

    # -- data ------------------------------------------------------------------------------

    def _cohort(self, index: int) -> _Cohort:
        with self._lock:
            plan = self._plans.get(index)
        if plan is None:
            plan = self._build_cohort(index)
            with self._lock:
                self._plans[index] = plan
        return plan

    def _build_cohort(self, c: int) -> _Cohort:
        h = _mix(self.seed * 1_000_003 + c)
        h2 = _mix(h)
        key_index = c % len(self.public_keys)
        public_key = self.public_keys[key_index]
        slot_s = max(self._slot_ms // 1000, 4)
        start_ms = self._start_ms + c * self._slot_ms + (h % (slot_s // 4 or 1)) * 1000
        length_ms = (slot_s // 2 + (h >> 16) % (slot_s // 4 or 1)) * 1000
        low, high = self._sessions_range
        count = low + (h >> 32) % (high - low + 1)
        tagged = 0 if count == 0 else max(1, count * (30 + (h2 % 61)) // 100)
        tag_mult = next((p for p in (7919, 104729, 1299709, 15485863) if count % p), 1)
        pool = max(3, self.cohort_count // 4)
        first = h2 >> 8 & 0xFFFF
        anomalies = [70001 + first % pool]
        if h2 >> 24 & 1:
            anomalies.append(70001 + (first + 1 + (h2 >> 25) % (pool - 1)) % pool)
        picks = [_TELLTALES[(h2 >> 32) % len(_TELLTALES)]]
        if h2 >> 40 & 1:
            picks.append(_TELLTALES[((h2 >> 32) + 1 + (h2 >> 41) % 7) % len(_TELLTALES)])
        cohort_id = f"coh_{_permute48(c ^ self.seed):012x}"
        ticket = 880000 + (h2 >> 48) % 100000
        names = [name for _, name, _ in picks]
        record: dict[str, Any] = {
            "cohort_id": cohort_id,
            "public_key": public_key,
            "customer_name": _CUSTOMERS[key_index % len(_CUSTOMERS)]
            + ("" if key_index < len(_CUSTOMERS) else f" {key_index}"),
            "cohort_window_start": _rfc3339(start_ms, fraction=False),
            "cohort_window_end": _rfc3339(start_ms + length_ms, fraction=False),
            "created_at": _rfc3339(
                start_ms + length_ms + (3600 + (h2 >> 20) % 82800) * 1000, fraction=False
            ),
            "session_count": count,
            "tagged_session_count": tagged,
            "anomaly_ids": anomalies,
            "telltale_ids": [tid for tid, _, _ in picks],
            "telltale_names": names,
            "telltale_owner_categories": sorted({owner for _, _, owner in picks}),
            "ticketing_ticket_id": str(ticket),
            "ticketing_ticket_url": f"https://support.example.com/tickets/{ticket}",
            "schema_version": _SCHEMA,
        }
        if self.unknown_fields:
            record.update(_FUTURE)

        def lit(value: Any) -> str:
            return json.dumps(value).replace("%", "%%")

        extra = "," + lit(_FUTURE)[1:-1] if self.unknown_fields else ""
        template = (
            '{"session_id":"ses_%016x","session_created":"%s","public_key":' + lit(public_key)
            + ',"cohort_id":' + lit(cohort_id) + ',"anomaly_id":%d,"original_ticket_id":'
            + lit(str(ticket - 1 - (h >> 48) % 5000))
            + ',"attack_label":"retroactive_attack","client_theme":"default",'
            '"render_type":"browser","risk_score":%s,"risk_band":"high","risk_category":"%s",'
            '"custom_risk_score":%s,"suspicion_flags":%s,"tagged_by_telltale":%s,'
            '"telltale_names":%s,"verify":%s,"schema_version":"' + _SCHEMA + '"' + extra + "}"
        )  # fmt: skip
        return _Cohort(
            index=c, key_index=key_index, start_ms=start_ms, length_ms=length_ms,
            session_count=count, tagged_count=tagged, tag_mult=tag_mult,
            tag_offset=(h2 >> 4) % max(count, 1), anomaly_ids=tuple(anomalies),
            telltale_ids=tuple(tid for tid, _, _ in picks), hash_base=_mix(h ^ 0x5E551075),
            id_key=self._id_key,
            record=record, template=template, tagged_names=json.dumps(names),
            custom_scores=key_index == 0,
        )  # fmt: skip

    def _index_of(self, cohort_id: str) -> int | None:
        m = _COHORT_ID.fullmatch(cohort_id)
        if m is None:
            return None
        index = _unpermute48(int(m.group(1), 16)) ^ (self.seed & _M48)
        return index if index < self.cohort_count else None

    @property
    def total_sessions(self) -> int:
        """Sessions across all cohorts."""
        return sum(self._cohort(c).session_count for c in range(self.cohort_count))

    @property
    def data_window(self) -> tuple[str, str]:
        """``(from, to)`` covering every cohort window (may be longer than 30 days)."""
        last = self._cohort(self.cohort_count - 1).end_ms if self.cohort_count else self._start_ms
        return _rfc3339(self._start_ms, fraction=False), _rfc3339(last + 1000, fraction=False)

    def cohort_ids(self) -> list[str]:
        """Every cohort id, in the order the API lists them."""
        return [self._cohort(c).record["cohort_id"] for c in range(self.cohort_count)]

    def cohort_record(self, cohort_id: str) -> dict[str, Any]:
        """The record ``GET /cohorts/{cohort_id}`` serves (KeyError when there is none)."""
        index = self._index_of(cohort_id)
        if index is None:
            raise KeyError(cohort_id)
        return json.loads(json.dumps(self._cohort(index).record))  # type: ignore[no-any-return]

    def iter_session_records(self, cohort_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every session (of one cohort, or of all), decoded from exactly what the API serves."""
        indexes: Iterable[int] = range(self.cohort_count)
        if cohort_id is not None:
            index = self._index_of(cohort_id)
            indexes = () if index is None else (index,)
        for c in indexes:
            plan = self._cohort(c)
            for j in range(plan.session_count):
                yield json.loads(plan.session_json(j))

    # -- fault controls --------------------------------------------------------------------

    def expire_tokens(self) -> None:
        """Invalidate every access token issued so far (the next data request gets 401)."""
        with self._lock:
            self._tokens.clear()

    def expire_page_tokens(self) -> None:
        """Invalidate every page token issued so far (the next use gets invalid_page_token)."""
        self._page_secret = secrets.token_bytes(16)

    def inject_error(self, code: str, *, times: int = 1, endpoint: str | None = None) -> None:
        """Answer the next ``times`` requests (to ``endpoint``, or any) with error ``code``."""
        if code not in _HTTP_STATUS:
            raise ValueError(f"unknown error code {code!r}; use one of {sorted(_HTTP_STATUS)}")
        if endpoint is not None and endpoint not in ENDPOINTS:
            raise ValueError(f"unknown endpoint {endpoint!r}; use one of {ENDPOINTS}")
        with self._lock:
            self._injected.extend([(code, endpoint)] * times)

    # -- serving ---------------------------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        """An in-process httpx transport (sync and async clients) answering like the API."""
        return as_transport(self.handler)

    def serve(self, *, host: str = "127.0.0.1", port: int = 0) -> LoopbackServer:
        """A started loopback server for the emulator; ``stop()`` also ends pending waits."""
        return _EmulatorServer(self, host=host, port=port).start()

    def handler(self, request: FakeRequest) -> Reply:
        """Answer one request (a :data:`failopen.testing._server.Handler`)."""
        with self._lock:
            self.requests += 1
            serial = self.requests
            self.history.append(request)
        request_id = f"req_{self._instance}{serial:08x}{secrets.token_hex(4)}"
        if self.latency > 0:
            self._clock.wait(self._stopping, self.latency)
        endpoint, cohort_id = _route(request.method, request.path)
        try:
            if endpoint is None:
                raise _ApiError("not_found", f"no route for {request.method} {request.path}")
            self._count(endpoint)
            if endpoint == "authorize":
                return self._authorize(request, request_id)
            self._authenticate(request)
            if endpoint in self.forbidden_endpoints:
                raise _ApiError("forbidden", "the client has no right to this endpoint")
            if endpoint == "get_cohort":
                return _json_reply(self._cohort(self._lookup(cohort_id)).record, request_id)
            if endpoint == "list_cohort_sessions":
                query = self._cohort_sessions_query(request, self._lookup(cohort_id))
            else:
                query = self._list_query(endpoint, request)
            return self._page(query, request.query.get("page_token", [""]), request_id)
        except _ApiError as exc:
            return self._error(exc.code, exc.message, request_id)

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
            raise _ApiError(code, "injected fault" if code != "internal" else "internal error")

    def _error(self, code: str, message: str, request_id: str) -> Reply:
        with self._lock:
            self.error_counts[code] += 1
        status = _HTTP_STATUS[code]
        reply = _json_reply(
            {"error": {"code": code, "message": message, "request_id": request_id}},
            request_id, status,
        )  # fmt: skip
        if status == 401:
            reply.headers.append(("WWW-Authenticate", 'Bearer realm="rai"'))
        return reply

    def _authorize(self, request: FakeRequest, request_id: str) -> Reply:
        if not request.headers.get("content-type", "").startswith("application/json"):
            raise _ApiError("invalid_request", "the body must be application/json")
        try:
            body = request.json()
        except ValueError:
            raise _ApiError("invalid_request", "the body is not valid JSON") from None
        if not isinstance(body, dict) or not all(
            isinstance(body.get(f), str) and body[f] for f in ("client_id", "client_secret")
        ):
            raise _ApiError("invalid_request", "client_id and client_secret are required strings")
        if not (
            hmac.compare_digest(body["client_id"].encode(), self.client_id.encode())
            and hmac.compare_digest(body["client_secret"].encode(), self.client_secret.encode())
        ):
            raise _ApiError("unauthorized", "invalid client credentials")
        token = "rai_at_" + secrets.token_urlsafe(24)
        with self._lock:
            self._tokens[token] = self._clock.monotonic() + self.token_ttl
        body = {"access_token": token, "expires_in": self.token_ttl, "token_type": "Bearer"}
        return _json_reply(body, request_id)

    def _authenticate(self, request: FakeRequest) -> None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _ApiError("unauthorized", "missing bearer access token")
        with self._lock:
            expiry = self._tokens.get(token.strip())
            if expiry is not None and self._clock.monotonic() >= expiry:
                del self._tokens[token.strip()]
                raise _ApiError("unauthorized", "the access token has expired")
        if expiry is None:
            raise _ApiError("unauthorized", "invalid access token")

    def _lookup(self, cohort_id: str | None) -> int:
        index = self._index_of(cohort_id or "")
        if index is None:
            raise _ApiError("not_found", "no such cohort in the caller's scope")
        return index

    # -- list requests ---------------------------------------------------------------------

    def _cohort_sessions_query(self, request: FakeRequest, index: int) -> _Query:
        size = _page_size(request.query)
        digest = _digest(("list_cohort_sessions", index))
        return _Query("list_cohort_sessions", None, -(1 << 62), 1 << 62, index, None, None, None,
                      size, digest)  # fmt: skip

    def _list_query(self, endpoint: str, request: FakeRequest) -> _Query:
        q = request.query
        size = _page_size(q)
        bounds = []
        for name in ("from", "to"):
            values = q.get(name, [])
            if len(values) != 1:
                raise _ApiError("invalid_window", f"exactly one {name!r} is required")
            ms = _parse_rfc3339(values[0])
            if ms is None:
                raise _ApiError("invalid_window", f"{name!r} is not an RFC 3339 date-time")
            bounds.append(ms)
        from_ms, to_ms = bounds
        if to_ms <= from_ms:
            raise _ApiError("invalid_window", "'to' must be after 'from'")
        if to_ms - from_ms > MAX_WINDOW // timedelta(milliseconds=1):
            raise _ApiError("invalid_window", "the window is longer than 30 days")
        keys = {k for k in q.get("public_key", []) if k}
        if not keys:
            raise _ApiError("missing_public_key", "at least one public_key is required")
        allowed = {"cohort_id", "anomaly_id", "telltale_id"}
        if endpoint == "list_cohorts":
            allowed.add("min_session_count")
        filters: dict[str, str] = {}
        for name in allowed:
            given = q.get(name)
            if given is None:
                continue
            if len(given) != 1 or not given[0]:
                raise _ApiError("invalid_filter", f"{name!r} takes one non-empty value")
            filters[name] = given[0]
        numbers: dict[str, int | None] = {}
        for name in ("anomaly_id", "telltale_id", "min_session_count"):
            raw = filters.get(name)
            if raw is not None and not re.fullmatch(r"[0-9]{1,18}", raw):
                raise _ApiError("invalid_filter", f"{name!r} must be a non-negative integer")
            numbers[name] = None if raw is None else int(raw)
        unowned = keys - self._key_of.keys()
        if unowned:
            raise _ApiError("forbidden_public_key", "the caller does not own every public_key")
        cohort: int | None = None
        if "cohort_id" in filters:
            found = self._index_of(filters["cohort_id"])
            cohort = -1 if found is None else found
        digest = _digest((endpoint, from_ms, to_ms, sorted(keys), sorted(filters.items())))
        return _Query(
            endpoint, frozenset(self._key_of[k] for k in keys), from_ms, to_ms, cohort,
            numbers["anomaly_id"], numbers["telltale_id"], numbers["min_session_count"], size,
            digest,
        )  # fmt: skip

    def _matching_cohorts(self, query: _Query, first: int) -> Iterator[_Cohort]:
        if query.cohort is not None:
            indexes: Iterable[int] = (query.cohort,) if query.cohort >= first else ()
        else:
            indexes = range(first, self.cohort_count)
        for c in indexes:
            if c < 0 or (query.keys is not None and c % len(self.public_keys) not in query.keys):
                continue
            plan = self._cohort(c)
            if plan.start_ms >= query.to_ms or (
                query.kind == "list_cohorts" and plan.start_ms < query.from_ms
            ):
                continue
            if query.kind == "list_sessions" and plan.end_ms < query.from_ms:
                continue
            if query.anomaly_id is not None and query.anomaly_id not in plan.anomaly_ids:
                continue
            if query.telltale_id is not None and query.telltale_id not in plan.telltale_ids:
                continue
            if query.min_session_count is not None and plan.session_count < query.min_session_count:
                continue
            yield plan

    def _positions(self, query: _Query, start: tuple[int, int]) -> Iterator[tuple[_Cohort, int]]:
        if query.kind == "list_cohorts":
            for plan in self._matching_cohorts(query, start[0]):
                yield plan, 0
            return
        for plan in self._matching_cohorts(query, start[0]):
            n = plan.session_count
            lo = bisect.bisect_left(range(n), query.from_ms, key=plan.created_ms)
            hi = bisect.bisect_left(range(n), query.to_ms, key=plan.created_ms)
            if plan.index == start[0]:
                lo = max(lo, start[1])
            step = 1
            if query.anomaly_id is not None and len(plan.anomaly_ids) > 1:
                step = len(plan.anomaly_ids)
                lo += (plan.anomaly_ids.index(query.anomaly_id) - lo) % step
            for j in range(lo, hi, step):
                yield plan, j

    def _page(self, query: _Query, token_values: list[str], request_id: str) -> Reply:
        if len(token_values) > 1:
            raise _ApiError("invalid_page_token", "page_token given more than once")
        start = self._read_page_token(token_values[0], query) if token_values[0] else (0, 0)
        positions = self._positions(query, start)
        return Reply(
            200,
            self._page_body(query, positions),
            [("Content-Type", "application/json"), ("X-Request-Id", request_id)],
        )

    def _page_body(
        self, query: _Query, positions: Iterator[tuple[_Cohort, int]]
    ) -> Iterator[bytes]:
        field = "cohorts" if query.kind == "list_cohorts" else "sessions"
        head = f'{{"{field}":['
        if self.slow_pages > 0:
            yield head.encode()  # the answer starts promptly, then stalls mid-body
            head = ""
            self._clock.wait(self._stopping, self.slow_pages)
        sep = ""
        batch: list[str] = []
        following: tuple[_Cohort, int] | None = None
        for emitted, (plan, j) in enumerate(positions):
            if emitted == query.page_size:
                following = (plan, j)
                break
            if query.kind == "list_cohorts":
                batch.append(json.dumps(plan.record, separators=(",", ":")))
            else:
                batch.append(plan.session_json(j))
            if len(batch) == _CHUNK_RECORDS:
                yield (head + sep + ",".join(batch)).encode()
                head, sep, batch = "", ",", []
        if not batch:
            sep = ""
        tail = "]"
        if following is not None:
            plan, j = following
            tail += f',"next_page_token":"{self._page_token(query, (plan.index, j))}"'
        elif self.final_page_token == "empty":
            tail += ',"next_page_token":""'
        tail += f',"schema_version":"{_SCHEMA}"'
        if self.unknown_fields:
            tail += ',"future_top_level":{"note":"tolerate me"}'
        yield (head + sep + ",".join(batch) + tail + "}").encode()

    def _page_token(self, query: _Query, position: tuple[int, int]) -> str:
        payload = f"{query.kind}|{query.digest}|{position[0]}|{position[1]}|"
        payload += f"{self._clock.monotonic():.3f}"
        mac = hmac.new(self._page_secret, payload.encode(), hashlib.sha256).digest()[:12]
        return base64.urlsafe_b64encode(payload.encode() + b"|" + mac).decode().rstrip("=")

    def _read_page_token(self, token: str, query: _Query) -> tuple[int, int]:
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            payload, mac = raw[:-13], raw[-12:]
            expected = hmac.new(self._page_secret, payload, hashlib.sha256).digest()[:12]
            if not hmac.compare_digest(mac, expected):
                raise ValueError("bad signature")
            kind, digest, c, j, issued = payload.decode().split("|")
            position = (int(c), int(j))
            issued_at = float(issued)
        except ValueError:
            raise _ApiError("invalid_page_token", "the page token is malformed") from None
        if kind != query.kind or digest != query.digest:
            raise _ApiError(
                "invalid_page_token", "the page token belongs to a different request"
            )
        ttl = self.page_token_ttl
        if ttl is not None and self._clock.monotonic() - issued_at > ttl:
            raise _ApiError("invalid_page_token", "the page token has expired")
        return position


def _route(method: str, path: str) -> tuple[str | None, str | None]:
    if not path.startswith(_PREFIX + "/"):
        return None, None
    parts = path[len(_PREFIX) + 1 :].split("/")
    if parts == ["authorize"]:
        return ("authorize" if method == "POST" else None), None
    if method != "GET":
        return None, None
    if parts == ["cohorts"]:
        return "list_cohorts", None
    if parts == ["sessions"]:
        return "list_sessions", None
    if len(parts) in (2, 3) and parts[0] == "cohorts" and parts[1]:
        if len(parts) == 2:
            return "get_cohort", unquote(parts[1])
        if parts[2] == "sessions":
            return "list_cohort_sessions", unquote(parts[1])
    return None, None


def _page_size(query: dict[str, list[str]]) -> int:
    values = query.get("page_size")
    if values is None:
        return DEFAULT_PAGE_SIZE
    if len(values) != 1 or not re.fullmatch(r"[0-9]{1,4}", values[0]):
        raise _ApiError("invalid_page_size", "page_size must be one integer from 1 to 1000")
    size = int(values[0])
    if not 1 <= size <= 1000:
        raise _ApiError("invalid_page_size", "page_size must be from 1 to 1000")
    return size


def _digest(parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def _json_reply(data: Any, request_id: str, status: int = 200) -> Reply:
    return Reply.json(data, status, headers=[("X-Request-Id", request_id)])


class _EmulatorServer(LoopbackServer):
    """A loopback server whose stop also cuts short the emulator's simulated latency."""

    def __init__(self, emulator: RaiEmulator, *, host: str, port: int) -> None:
        super().__init__(emulator.handler, host=host, port=port)
        self._emulator = emulator

    def start(self) -> LoopbackServer:
        self._emulator._stopping.clear()
        return super().start()

    def stop(self) -> None:
        self._emulator._stopping.set()
        super().stop()
