"""The status page's documents, and the report they read as: pure parsing, no I/O.

:class:`~failopen.status.StatusClient` fetches ``components.json`` and ``status.json``; everything
a fetched body means lives here, apart from the HTTP, so the rules that a fail-open decision rests
on read and test as plain functions of bytes. Import the names from
:mod:`failopen.providers.status`, which re-exports them.

Strict about what decides, lenient about the rest:

* fatal (StatusParseError): not a JSON object, duplicate keys, no ``components`` list, duplicate
  component ids, a global component that cannot be told (GlobalComponentError, see
  :mod:`failopen.providers.global_component`), a global component without a status string;
* noted in ``StatusReport.odd`` and otherwise ignored: an entry that is not an object or has no
  id, a region whose status is not a string (left out of ``regions``), and any other field of
  the wrong type (``"group": "false"`` reads as false, a numeric ``updated_at`` as None);
* kept as sent: unknown status values (``known=False``), which nothing acts on.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from failopen.exceptions import GlobalComponentError, StatusParseError
from failopen.providers.global_component import Candidate, choose_global

__all__ = [
    "KNOWN_STATUSES",
    "OPERATIONAL",
    "Component",
    "ComponentListing",
    "StatusReport",
    "list_components",
    "parse_components",
    "parse_indicator",
]

OPERATIONAL = "operational"
#: The component status values of spec 3.2. Anything else is reported with ``known=False``.
KNOWN_STATUSES = frozenset(
    {OPERATIONAL, "degraded_performance", "partial_outage", "major_outage", "under_maintenance"}
)

_MAX_IDS_SHOWN = 20
_MAX_ODD = 50


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
    #: Quirks beside the point (a region without a status, a numeric ``updated_at``, ...): the
    #: reading still counts; these say what was read oddly.
    odd: tuple[str, ...] = ()
    #: How the global component was chosen: ``pinned``, ``id``, ``name``, ``guess`` (None for
    #: the indicator).
    chosen_by: str | None = None

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
            "odd": list(self.odd),
            "chosen_by": self.chosen_by,
        }


@dataclass(frozen=True)
class ComponentListing:
    """Every component of a page, and the global one's id (or why it cannot be told)."""

    components: tuple[Component, ...]
    global_id: str | None
    chosen_by: str | None
    error: str | None
    odd: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as ``failopen status --components --json`` prints it."""
        return {
            "components": [component.to_dict() for component in self.components],
            "global_component": self.global_id,
            "chosen_by": self.chosen_by,
            "error": self.error,
            "odd": list(self.odd),
        }


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


def _show_ids(ids: Iterable[str]) -> str:
    ids = list(ids)
    shown = ", ".join(repr(i[:64]) for i in ids[:_MAX_IDS_SHOWN])
    if len(ids) > _MAX_IDS_SHOWN:
        shown += f", ... ({len(ids) - _MAX_IDS_SHOWN} more)"
    return f"[{shown}]"


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


@dataclass
class _Entry:
    """One entry of ``components`` read leniently: the component, plus what the chooser needs."""

    component: Component
    status_ok: bool
    candidate: Candidate


def _group_flag(value: Any) -> tuple[bool, bool]:
    """(is a group, flag readable). ``"false"``/``"true"`` read as meant; anything else unsure."""
    if isinstance(value, bool):
        return value, True
    if value is None:
        return False, True  # absent: the spec's components are not groups
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true", True
    return True, False  # unreadable: treated as a group, which no rule ever elects


def _entry(raw: Any, index: int, odd: list[str]) -> _Entry | None:
    """Read one entry; quirks beside the point are noted in ``odd``, not raised."""
    if not isinstance(raw, dict):
        odd.append(f"components[{index}] is {_kind(raw)}, not an object; skipped")
        return None
    cid = raw.get("id")
    if not isinstance(cid, str) or not cid:
        odd.append(f"components[{index}] has no id string; skipped")
        return None

    def note(field: str, value: Any, expected: str) -> None:
        odd.append(f"component {cid[:64]!r}: {field} is {_kind(value)}, not {expected}")

    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        note("name", name, "a string")
        name = None
    status = raw.get("status")
    status_ok = isinstance(status, str)
    if not status_ok:
        note("status", status, "a string")
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        note("description", description, "a string or null")
        description = None
    raw_group = raw.get("group")
    group, readable = _group_flag(raw_group)
    if raw_group is not None and not isinstance(raw_group, bool):
        note("group", raw_group, "a boolean")
    group_id = raw.get("group_id")
    if group_id is not None and not isinstance(group_id, str):
        note("group_id", group_id, "a string or null")
        group_id = None
    updated_at = raw.get("updated_at")
    if updated_at is not None and not isinstance(updated_at, str):
        note("updated_at", updated_at, "an RFC 3339 string")
        updated_at = None
    component = Component(
        id=cid,
        name=cid if name is None else name,
        status=status if isinstance(status, str) else "",
        description=description,
        group=group,
        group_id=group_id,
        updated_at=updated_at,
        known=isinstance(status, str) and status in KNOWN_STATUSES,
    )
    candidate = Candidate(
        id=cid,
        name=component.name,
        description=description,
        null_description="description" in raw and raw["description"] is None,
        group=group or not readable,
        member=group_id is not None,
    )
    return _Entry(component, status_ok, candidate)


def _page_updated_at(document: dict[str, Any], what: str, odd: list[str]) -> str | None:
    # The page object decides nothing: an odd one is noted, never fatal.
    page = document.get("page")
    if page is None:
        return None
    if not isinstance(page, dict):
        odd.append(f"{what}: page is {_kind(page)}, not an object")
        return None
    value = page.get("updated_at")
    if value is not None and not isinstance(value, str):
        odd.append(f"{what}: page.updated_at is {_kind(value)}, not an RFC 3339 string")
        return None
    return value


def _entries(body: bytes) -> tuple[dict[str, Any], list[_Entry], list[str], bool]:
    """The document, its readable entries, the quirks seen, and whether every entry was read."""
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
    odd: list[str] = []
    entries = [e for i, raw in enumerate(raw_components) if (e := _entry(raw, i, odd)) is not None]
    ids = [e.component.id for e in entries]
    duplicates = sorted(i for i, n in Counter(ids).items() if n > 1)
    if duplicates:
        # Two components under one id: no reading of "the component with this id" is sound.
        raise StatusParseError(f"components.json repeats component ids {_show_ids(duplicates)}")
    if len(odd) > _MAX_ODD:  # a page of a million odd entries must not become a huge report
        odd[_MAX_ODD:] = [f"... and {len(odd) - _MAX_ODD} more"]
    return document, entries, odd, len(entries) == len(raw_components)


def parse_components(
    body: bytes,
    *,
    global_component: str | None = None,
    fetched_at: float,
    pinned: tuple[str, str] | None = None,
) -> StatusReport:
    """Parse a components document (spec 2.5) into a report. Raises StatusParseError.

    ``global_component`` is FAILOPEN_GLOBAL_COMPONENT (an id, or an exact unique name);
    ``pinned`` the (id, name) chosen by an earlier reading, which wins over both (see
    :mod:`failopen.providers.global_component`). Strict about what decides (the global
    component's id and status), lenient about the rest: a region with a null status, a numeric
    ``updated_at``, a ``"group": "false"`` or a missing optional field is listed in ``odd`` and
    the reading counts. Unknown fields are ignored; unknown status values are kept
    (``known=False``).
    """
    document, entries, odd, complete = _entries(body)
    choice = choose_global(
        [e.candidate for e in entries], configured=global_component, pinned=pinned,
        complete=complete,
    )
    glob = next(e for e in entries if e.component.id == choice.id)
    if not glob.status_ok:
        raise StatusParseError(
            f"components.json: the global component {choice.id[:64]!r} has no status string"
        )
    regions = []
    for entry in entries:
        component = entry.component
        if entry is glob or entry.candidate.group:
            continue
        if entry.status_ok:
            regions.append(component)  # an odd region without a status is already in odd
    return StatusReport(
        global_status=glob.component.status,
        global_component=glob.component,
        regions=tuple(regions),
        fetched_at=fetched_at,
        source="components",
        page_updated_at=_page_updated_at(document, "components.json", odd),
        odd=tuple(odd),
        chosen_by=choice.how,
    )


def list_components(
    body: bytes, *, global_component: str | None = None, pinned: tuple[str, str] | None = None
) -> ComponentListing:
    """Every component on the page (groups included), and which one is global, or why none is.

    For ``failopen status --components``: a page whose global component cannot be told is still
    listed (that is when the list is needed). Raises StatusParseError only for a page that is not
    a components document at all.
    """
    _, entries, odd, complete = _entries(body)
    try:
        choice = choose_global(
            [e.candidate for e in entries], configured=global_component, pinned=pinned,
            complete=complete,
        )
    except GlobalComponentError as exc:
        return ComponentListing(tuple(e.component for e in entries), None, None, str(exc),
                                tuple(odd))
    return ComponentListing(tuple(e.component for e in entries), choice.id, choice.how, None,
                            tuple(odd))


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
        page_updated_at=_page_updated_at(document, "status.json", []),
    )
