"""The status page's documents, and the report they read as: pure parsing, no I/O.

:class:`~failopen.status.StatusClient` fetches ``components.json`` and ``status.json``; everything
a fetched body means lives here, apart from the HTTP, so the rules that a fail-open decision rests
on (duplicate keys and ids refused, unknown status values kept with ``known=False``, the global
component found or a StatusParseError naming the ids seen) read and test as plain functions of
bytes. Import the names from :mod:`failopen.status`, which re-exports them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from failopen.exceptions import StatusParseError

__all__ = [
    "KNOWN_STATUSES",
    "OPERATIONAL",
    "Component",
    "StatusReport",
    "parse_components",
    "parse_indicator",
]

OPERATIONAL = "operational"
#: The component status values of spec 3.2. Anything else is reported with ``known=False``.
KNOWN_STATUSES = frozenset(
    {OPERATIONAL, "degraded_performance", "partial_outage", "major_outage", "under_maintenance"}
)

_MAX_IDS_SHOWN = 20


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
