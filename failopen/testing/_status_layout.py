"""What a fake status page is made of: its components, groups and page object, and how
Statuspage numbers and ranks them (:class:`~failopen.testing.FakeStatusPage` serves them)."""

from __future__ import annotations

import collections
import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from failopen.providers.global_component import is_region_label

__all__ = [
    "GLOBAL_ID", "PAGE_ID", "PageComponent", "PageInfo", "check_layout", "positions",
    "region_layout", "rfc3339", "severity",
]

PAGE_ID = "fakepage0001"
GLOBAL_ID = "fakeglobal00"

# Worst last: a group reports its worst member, the page (built from components) its worst one.
_SEVERITY = {
    "operational": 0, "under_maintenance": 1, "degraded_performance": 3, "partial_outage": 4,
    "major_outage": 5,
}
_UNKNOWN_SEVERITY = 2  # a value outside spec 3.2: something is wrong, how badly is not said


def severity(status: str) -> int:
    """How bad ``status`` is, for the worst of several (groups, the page's indicator)."""
    return _SEVERITY.get(status, _UNKNOWN_SEVERITY)


def rfc3339(timestamp: float) -> str:
    """``timestamp`` as Statuspage writes times: UTC, milliseconds, ``Z``."""
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class PageComponent:
    """One component of a page built from a list; a group when it has ``members`` (ids)."""

    id: str
    name: str
    description: str | None = None
    group_id: str | None = None  # the group it belongs to, which lists it in its members
    members: tuple[str, ...] = ()
    showcase: bool = False
    start_date: str | None = None

    @property
    def group(self) -> bool:
        """True for a group component (its status is the worst of its members')."""
        return bool(self.members)


@dataclass(frozen=True)
class PageInfo:
    """The ``page`` object every document carries."""

    id: str = PAGE_ID
    name: str = "Fake vendor status"
    url: str = "https://status.example.com"


def region_layout(regions: Sequence[str] | str, created: float) -> list[PageComponent]:
    """The spec's shape: the global component, then one component per region label."""
    labels = [regions] if isinstance(regions, str) else list(regions)
    if any(not isinstance(label, str) or not label for label in labels):
        raise ValueError("region labels are non-empty strings")
    prose = [label for label in labels if not is_region_label(label)]
    if prose:
        # A page with prose descriptions is not the documented shape, and failopen would
        # rightly refuse to guess its global component: say so here, not in a test failure.
        raise ValueError(
            f"region labels are short labels like 'us-east-1' or 'EU (Frankfurt)' (at most "
            f"32 characters and three words, no commas); not {prose[0]!r}"
        )
    if len(set(labels)) != len(labels):
        raise ValueError(f"region labels repeat: {labels!r}")
    day = rfc3339(created)[:10]
    layout = [PageComponent(GLOBAL_ID, "Global", showcase=True, start_date=day)]
    layout.extend(
        PageComponent(f"fakeregion{n:02d}", f"Region {label}", label, showcase=True, start_date=day)
        for n, label in enumerate(labels, start=1)
    )
    return layout


def check_layout(layout: Sequence[PageComponent], global_id: str) -> None:
    """Refuse a list a real page could not serve: ValueError (TypeError) saying what is wrong."""
    by_id: dict[str, PageComponent] = {}
    for item in layout:
        if not isinstance(item, PageComponent):
            raise TypeError(f"components are PageComponent, not {type(item).__name__}")
        if not item.id or item.id in by_id:
            raise ValueError(f"component ids are non-empty and unique: {item.id!r}")
        by_id[item.id] = item
    for item in layout:
        for member in item.members:
            if member not in by_id or by_id[member].group_id != item.id:
                raise ValueError(f"group {item.id!r} lists {member!r}, which is not a component "
                                 "whose group_id names the group")
        if item.group_id is not None and item.id not in by_id.get(
                item.group_id, PageComponent("", "")).members:
            raise ValueError(f"{item.id!r} names group {item.group_id!r}, which does not list it")
    if global_id not in by_id or by_id[global_id].group:
        raise ValueError(f"global_id {global_id!r} is not a (non-group) component of the page")


def positions(layout: Sequence[PageComponent]) -> dict[str, int]:
    """Positions as Statuspage numbers them: from 1 within each group, and at the top."""
    counters: collections.Counter[str | None] = collections.Counter()
    numbered = {}
    for item in layout:
        counters[item.group_id] += 1
        numbered[item.id] = counters[item.group_id]
    return numbered
