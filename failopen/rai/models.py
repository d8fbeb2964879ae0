"""Typed records of the session-intelligence API (spec section 2), tolerant of new fields.

Every field of the spec is an attribute. A field that is missing, or whose value does not have the
documented type, reads as ``None`` (arrays: an empty tuple): one odd record must not stop an
export. ``raw`` is the record exactly as received, unknown fields included (spec section 9), so
nothing is ever lost. Timestamps stay RFC 3339 strings, as the service sends them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["Cohort", "Session", "Verify", "Page"]

T = TypeVar("T")
R = TypeVar("R")


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    # bool is an int subclass; true is not a session count.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _strs(value: Any) -> tuple[str, ...]:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    return ()


def _ints(value: Any) -> tuple[int, ...]:
    if isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) for item in value
    ):
        return tuple(value)
    return ()


def _build(cls: type[R], values: dict[str, Any]) -> R:
    # A frozen dataclass's __init__ sets each field through object.__setattr__, which costs as
    # much as reading the record; from_dict has already typed every value, so fill __dict__.
    record = object.__new__(cls)
    record.__dict__.update(values)
    return record


def _record(d: Any, kind: str) -> dict[str, Any]:
    if not isinstance(d, Mapping):
        raise TypeError(f"a {kind} record must be a JSON object, not {type(d).__name__}")
    return d if isinstance(d, dict) else dict(d)


@dataclass(frozen=True)
class Verify:
    """Outcome of the challenge presented to a session (spec 2.3)."""

    security_level: str | None = None
    solved: bool | None = None
    verified: bool | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verify:
        """Build from a decoded JSON object; unknown fields stay in ``raw``."""
        raw = _record(d, "verify")
        get = raw.get
        return _build(cls, {
            "security_level": _str(get("security_level")),
            "solved": _bool(get("solved")),
            "verified": _bool(get("verified")),
            "raw": raw,
        })


@dataclass(frozen=True)
class Cohort:
    """Sessions retrospectively linked to one confirmed attack (spec 2.1)."""

    cohort_id: str | None = None
    public_key: str | None = None
    customer_name: str | None = None
    cohort_window_start: str | None = None
    cohort_window_end: str | None = None
    created_at: str | None = None
    session_count: int | None = None
    tagged_session_count: int | None = None
    anomaly_ids: tuple[int, ...] = ()
    telltale_ids: tuple[int, ...] = ()
    telltale_names: tuple[str, ...] = ()
    telltale_owner_categories: tuple[str, ...] = ()
    ticketing_ticket_id: str | None = None
    ticketing_ticket_url: str | None = None
    schema_version: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Cohort:
        """Build from a decoded JSON object; unknown fields stay in ``raw``."""
        raw = _record(d, "cohort")
        get = raw.get
        return _build(cls, {
            "cohort_id": _str(get("cohort_id")),
            "public_key": _str(get("public_key")),
            "customer_name": _str(get("customer_name")),
            "cohort_window_start": _str(get("cohort_window_start")),
            "cohort_window_end": _str(get("cohort_window_end")),
            "created_at": _str(get("created_at")),
            "session_count": _int(get("session_count")),
            "tagged_session_count": _int(get("tagged_session_count")),
            "anomaly_ids": _ints(get("anomaly_ids")),
            "telltale_ids": _ints(get("telltale_ids")),
            "telltale_names": _strs(get("telltale_names")),
            "telltale_owner_categories": _strs(get("telltale_owner_categories")),
            "ticketing_ticket_id": _str(get("ticketing_ticket_id")),
            "ticketing_ticket_url": _str(get("ticketing_ticket_url")),
            "schema_version": _str(get("schema_version")),
            "raw": raw,
        })


@dataclass(frozen=True)
class Session:
    """One request session associated with a cohort (spec 2.2)."""

    session_id: str | None = None
    session_created: str | None = None
    public_key: str | None = None
    cohort_id: str | None = None
    anomaly_id: int | None = None
    original_ticket_id: str | None = None
    attack_label: str | None = None
    client_theme: str | None = None
    render_type: str | None = None
    risk_score: float | None = None
    risk_band: str | None = None
    risk_category: str | None = None
    custom_risk_score: float | None = None
    suspicion_flags: tuple[str, ...] = ()
    tagged_by_telltale: bool | None = None
    telltale_names: tuple[str, ...] = ()
    verify: Verify | None = None
    schema_version: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Session:
        """Build from a decoded JSON object; unknown fields stay in ``raw``."""
        raw = _record(d, "session")
        get = raw.get
        verify = get("verify")
        return _build(cls, {
            "session_id": _str(get("session_id")),
            "session_created": _str(get("session_created")),
            "public_key": _str(get("public_key")),
            "cohort_id": _str(get("cohort_id")),
            "anomaly_id": _int(get("anomaly_id")),
            "original_ticket_id": _str(get("original_ticket_id")),
            "attack_label": _str(get("attack_label")),
            "client_theme": _str(get("client_theme")),
            "render_type": _str(get("render_type")),
            "risk_score": _float(get("risk_score")),
            "risk_band": _str(get("risk_band")),
            "risk_category": _str(get("risk_category")),
            "custom_risk_score": _float(get("custom_risk_score")),
            "suspicion_flags": _strs(get("suspicion_flags")),
            "tagged_by_telltale": _bool(get("tagged_by_telltale")),
            "telltale_names": _strs(get("telltale_names")),
            "verify": Verify.from_dict(verify) if isinstance(verify, Mapping) else None,
            "schema_version": _str(get("schema_version")),
            "raw": raw,
        })


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list endpoint: its records and the cursor to the next page."""

    items: list[T]
    next_page_token: str | None = None
    schema_version: str | None = None
    #: Raw pages only: each record's JSON text exactly as received, one line each (None when
    #: the answer was not compact JSON). An export writes these instead of encoding again.
    lines: list[str] | None = field(default=None, repr=False, compare=False)
