"""The emulator's data: every cohort and session a pure function of ``(seed, index)``.

Nothing is stored but a bounded cache of cohort plans: session *j* of cohort *i* is rendered from
the plan on demand, so a million sessions cost no memory and two datasets with the same seed hold
the same records. Also here: which records a list query selects, in the API's order.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import cachetools

__all__ = ["SCHEMA", "CohortPlan", "Dataset", "Query", "format_rfc3339", "parse_rfc3339"]

SCHEMA = "rai-v1"
_M64 = (1 << 64) - 1
_M48 = (1 << 48) - 1
_ODD48 = (0xD1B54A32D193, 0x9E3779B97F4B)  # odd multipliers permute the integers mod 2**48
_INV48 = tuple(pow(k, -1, 1 << 48) for k in _ODD48)
_ODD64 = 0x9E3779B97F4A7C15
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


# Tables for the hot path of session_json (a page of 1,000 sessions is rendered per request, on
# the emulator's one GIL, next to the client under test): lookups instead of formatting.
_MINUTES = tuple(f"{m // 60:02d}:{m % 60:02d}:" for m in range(1440))
_SECONDS = tuple(f"{s:02d}." for s in range(60))
_MILLIS = tuple(f"{k:03d}Z" for k in range(1000))
_SCORES = tuple(f"0.{k:03d}" for k in range(1000))
_TENTHS = tuple(f"{k // 10}.{k % 10}" for k in range(1000))


@functools.lru_cache(maxsize=256)
def _date(day: int) -> str:
    t = time.gmtime(day * 86_400)
    return f"{t[0]:04d}-{t[1]:02d}-{t[2]:02d}T"


def _stamp_ms(ms: int) -> str:
    """``format_rfc3339(ms, fraction=True)``, by table."""
    seconds, millis = divmod(ms, 1000)
    day, second = divmod(seconds, 86_400)
    minute, second = divmod(second, 60)
    return _date(day) + _MINUTES[minute] + _SECONDS[second] + _MILLIS[millis]


def format_rfc3339(ms: int, *, fraction: bool) -> str:
    """Milliseconds since the epoch as RFC 3339 UTC, with or without milliseconds."""
    t = time.gmtime(ms // 1000)
    text = f"{t[0]:04d}-{t[1]:02d}-{t[2]:02d}T{t[3]:02d}:{t[4]:02d}:{t[5]:02d}"
    return f"{text}.{ms % 1000:03d}Z" if fraction else text + "Z"


def parse_rfc3339(value: str) -> int | None:
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


@dataclass(frozen=True)
class CohortPlan:
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
    created_at_ms: int  # the record's created_at: played time lists the cohort from then on

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
        """Session ``j`` of the cohort, exactly as the API serves it."""
        h = _mix(self.hash_base ^ j)
        n = self.session_count
        step = self.length_ms // n
        created = self.start_ms + (j * self.length_ms) // n + (h % step if step > 1 else 0)
        tagged = (j * self.tag_mult + self.tag_offset) % n < self.tagged_count
        verify_pick = (h >> 40) % 20
        return self.template % (
            ((self.index << 32 | j) * _ODD64 ^ self.id_key) & _M64,
            _stamp_ms(created),
            self.anomaly_ids[j % len(self.anomaly_ids)],
            _SCORES[800 + (h >> 24) % 200] if tagged else _SCORES[300 + (h >> 24) % 690],
            "bot" if tagged or (h >> 20) & 3 != 0 else "human",
            _TENTHS[(h >> 44) % 1000] if self.custom_scores else "null",
            _FLAG_SETS[(h >> 34) & 63 | (1 if tagged else 0)],
            "true" if tagged else "false",
            self.tagged_names if tagged else "[]",
            "null" if verify_pick == 0 else _VERIFY[verify_pick % len(_VERIFY)],
        )


@dataclass(frozen=True)
class Query:
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


class Dataset:
    """The cohorts and sessions an emulator serves, generated lazily and deterministically."""

    def __init__(
        self,
        *,
        public_keys: tuple[str, ...],
        cohorts: int,
        sessions_per_cohort: tuple[int, int],
        seed: int,
        start_ms: int,
        span_days: float,
        unknown_fields: bool,
        cohort_filter: str = "window_start",
    ) -> None:
        self.public_keys = public_keys
        #: What list cohorts' from/to select on: "window_start" or "created_at" (spec: silent).
        self.cohort_filter = cohort_filter
        self.cohort_count = cohorts
        self.seed = seed
        self.unknown_fields = unknown_fields
        self._sessions_range = sessions_per_cohort
        self._start_ms = start_ms // 1000 * 1000
        self._slot_ms = int(span_days * 86_400) // max(cohorts, 1) * 1000
        self._id_key = _mix(seed ^ 0x5E551075)
        self._pool = max(3, cohorts // 4)  # fixed at creation: cohorts added later stay the same
        #: Indexes of cohorts the service does not have yet (not listed, not found).
        self.hidden: set[int] = set()
        self._lock = threading.Lock()
        self.plans: cachetools.LRUCache[int, CohortPlan] = cachetools.LRUCache(maxsize=4096)
        self.generation = 0  # of the rendering: rerender() moves it on

    def plan(self, index: int) -> CohortPlan:
        """Cohort ``index``, from the cache or built anew (a pure function of seed and index)."""
        with self._lock:
            plan = self.plans.get(index)
            generation = self.generation
        if plan is None:
            plan = self._build(index)
            with self._lock:
                if generation == self.generation:  # not one built across a rerender()
                    self.plans[index] = plan
        return plan

    def rerender(self, unknown_fields: bool) -> None:
        """Records with or without the unlisted fields from now on, cohorts served already too
        (a plan holds its rendered record: the cached ones are dropped)."""
        with self._lock:
            self.unknown_fields = unknown_fields
            self.generation += 1
            self.plans.clear()

    def _place(
        self, c: int, h: int, start_ms: int, length_ms: int, count: int, created_ms: int
    ) -> tuple[int, int, int, int]:
        """Cohort ``c``'s window start, length, sessions and created_at: as generated here;
        played time (``_rai_time.py``) makes some late and places added cohorts."""
        return start_ms, length_ms, count, created_ms

    def _build(self, c: int) -> CohortPlan:
        h = _mix(self.seed * 1_000_003 + c)
        h2 = _mix(h)
        key_index = c % len(self.public_keys)
        public_key = self.public_keys[key_index]
        slot_s = max(self._slot_ms // 1000, 4)
        start_ms = self._start_ms + c * self._slot_ms + (h % (slot_s // 4 or 1)) * 1000
        length_ms = (slot_s // 2 + (h >> 16) % (slot_s // 4 or 1)) * 1000
        low, high = self._sessions_range
        count = low + (h >> 32) % (high - low + 1)
        created_ms = start_ms + length_ms + (3600 + (h2 >> 20) % 82800) * 1000
        start_ms, length_ms, count, created_ms = self._place(c, h2, start_ms, length_ms, count,
                                                             created_ms)  # fmt: skip
        tagged = 0 if count == 0 else max(1, count * (30 + (h2 % 61)) // 100)
        tag_mult = next((p for p in (7919, 104729, 1299709, 15485863) if count % p), 1)
        pool = self._pool
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
            "cohort_window_start": format_rfc3339(start_ms, fraction=False),
            "cohort_window_end": format_rfc3339(start_ms + length_ms, fraction=False),
            "created_at": format_rfc3339(created_ms, fraction=False),
            "session_count": count,
            "tagged_session_count": tagged,
            "anomaly_ids": anomalies,
            "telltale_ids": [tid for tid, _, _ in picks],
            "telltale_names": names,
            "telltale_owner_categories": sorted({owner for _, _, owner in picks}),
            "ticketing_ticket_id": str(ticket),
            "ticketing_ticket_url": f"https://support.example.com/tickets/{ticket}",
            "schema_version": SCHEMA,
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
            '"telltale_names":%s,"verify":%s,"schema_version":"' + SCHEMA + '"' + extra + "}"
        )  # fmt: skip
        return CohortPlan(
            index=c, key_index=key_index, start_ms=start_ms, length_ms=length_ms,
            session_count=count, tagged_count=tagged, tag_mult=tag_mult,
            tag_offset=(h2 >> 4) % max(count, 1), anomaly_ids=tuple(anomalies),
            telltale_ids=tuple(tid for tid, _, _ in picks), hash_base=_mix(h ^ 0x5E551075),
            id_key=self._id_key,
            record=record, template=template, tagged_names=json.dumps(names),
            custom_scores=key_index == 0, created_at_ms=created_ms,
        )  # fmt: skip

    def index_of(self, cohort_id: str) -> int | None:
        """The index of a cohort id, or None when there is no such cohort."""
        m = _COHORT_ID.fullmatch(cohort_id)
        if m is None:
            return None
        index = _unpermute48(int(m.group(1), 16)) ^ (self.seed & _M48)
        return index if index < self.cohort_count and index not in self.hidden else None

    @property
    def total_sessions(self) -> int:
        """Sessions across all cohorts."""
        return sum(self.plan(c).session_count for c in range(self.cohort_count))

    @property
    def data_window(self) -> tuple[str, str]:
        """``(from, to)`` covering every cohort window (may be longer than 30 days)."""
        last = self.plan(self.cohort_count - 1).end_ms if self.cohort_count else self._start_ms
        first = format_rfc3339(self._start_ms, fraction=False)
        return first, format_rfc3339(last + 1000, fraction=False)

    def cohort_ids(self) -> list[str]:
        """Every cohort id, in the order the API lists them."""
        return [self.plan(c).record["cohort_id"] for c in range(self.cohort_count)]

    def cohort_record(self, cohort_id: str) -> dict[str, Any]:
        """The record ``GET /cohorts/{cohort_id}`` serves (KeyError when there is none)."""
        index = self.index_of(cohort_id)
        if index is None:
            raise KeyError(cohort_id)
        return json.loads(json.dumps(self.plan(index).record))  # type: ignore[no-any-return]

    def iter_session_records(self, cohort_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every session (of one cohort, or of all), decoded from exactly what the API serves."""
        indexes: Iterable[int] = range(self.cohort_count)
        if cohort_id is not None:
            index = self.index_of(cohort_id)
            indexes = () if index is None else (index,)
        for c in indexes:
            plan = self.plan(c)
            for j in range(plan.session_count):
                yield json.loads(plan.session_json(j))

    # -- list queries ----------------------------------------------------------------------

    def _matching_cohorts(self, query: Query, first: int) -> Iterator[CohortPlan]:
        if query.cohort is not None:
            indexes: Iterable[int] = (query.cohort,) if query.cohort >= first else ()
        else:
            indexes = range(first, self.cohort_count)
        for c in indexes:
            if c < 0 or (query.keys is not None and c % len(self.public_keys) not in query.keys):
                continue
            if c in self.hidden:
                continue
            plan = self.plan(c)
            if query.kind == "list_cohorts" and self.cohort_filter == "created_at":
                created = parse_rfc3339(plan.record["created_at"])
                if created is None or not query.from_ms <= created < query.to_ms:
                    continue
            elif plan.start_ms >= query.to_ms or (
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

    def positions(
        self, query: Query, start: tuple[int, int]
    ) -> Iterator[tuple[CohortPlan, int]]:
        """``(cohort, session index)`` of each record ``query`` selects, from ``start`` on."""
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
