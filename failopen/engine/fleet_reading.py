"""A status reading published to a fleet's Redis store, and its strict parser.

The leader (or a process that confirmed an outage for a request) writes it under
``<prefix>reading``; every other member reads it with its sync. Anything failopen did not write is
a :class:`~failopen.exceptions.StoreError`, never a reading. ``page`` says which status page and
global component it was read from (:mod:`failopen.engine.fleet_identity`): a reading of another
page, or one without (an older failopen), is parsed but never acted on.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from failopen.engine.fleet_identity import stored_hash
from failopen.exceptions import StoreError
from failopen.providers.status_documents import KNOWN_STATUSES, Component, StatusReport

__all__ = ["FleetReading", "Kind", "parse_reading"]

_FUTURE_SKEW = 60.0  # a reading dated further ahead than this is garbage, not a fresh reading
_MAX_REGIONS = 200
_MAX_TEXT = 200
_MAX_READING = 128 * 1024

Kind = Literal["watcher", "confirmed"]


class FleetReading:
    """A status reading published to the fleet."""

    __slots__ = ("at", "by", "id", "kind", "page", "report")

    def __init__(self, id: str, by: str, at: float, kind: Kind, report: StatusReport,
                 page: str | None = None) -> None:
        self.id, self.by, self.at, self.kind, self.report = id, by, at, kind, report
        #: The hash of the status page and global component it was read from (None: unknown).
        self.page = page

    def to_json(self) -> str:
        """The stored form."""
        report = self.report
        return json.dumps({
            "id": self.id, "by": self.by, "at": self.at, "kind": self.kind, "page": self.page,
            "global_status": report.global_status, "source": report.source,
            "regions": [{"id": r.id, "name": r.name, "status": r.status,
                         "description": r.description} for r in report.regions[:_MAX_REGIONS]],
        }, sort_keys=True)


def _text(data: dict[str, Any], key: str, *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise StoreError(f"the published status reading has no usable {key!r}")
    return value


def parse_reading(raw: Any, *, now: float) -> FleetReading | None:
    """The published reading (None: none yet); StoreError for anything failopen did not write."""
    if raw is None:
        return None
    if len(raw) > _MAX_READING:
        raise StoreError("the published status reading is larger than failopen writes")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError, TypeError, UnicodeDecodeError):
        raise StoreError("the published status reading is not JSON") from None
    if not isinstance(data, dict):
        raise StoreError("the published status reading is not an object")
    at = data.get("at")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) \
            or not 0 < at <= now + _FUTURE_SKEW:
        # A reading dated in the future would never grow old: refused, never trusted.
        raise StoreError("the published status reading has no usable time")
    kind = data.get("kind")
    if kind not in ("watcher", "confirmed"):
        raise StoreError("the published status reading has no usable kind")
    source = data.get("source")
    regions_data = data.get("regions")
    if source not in ("components", "indicator") or not isinstance(regions_data, list) \
            or len(regions_data) > _MAX_REGIONS:
        raise StoreError("the published status reading is malformed")
    regions = []
    for item in regions_data:
        if not isinstance(item, dict):
            raise StoreError("the published status reading is malformed")
        status = _text(item, "status")
        regions.append(Component(
            id=_text(item, "id"), name=_text(item, "name"), status=status,
            description=_text(item, "description", optional=True), group=False, group_id=None,
            updated_at=None, known=status in KNOWN_STATUSES,
        ))
    report = StatusReport(global_status=_text(data, "global_status"), global_component=None,
                          regions=tuple(regions), fetched_at=float(at), source=source)
    return FleetReading(_text(data, "id"), _text(data, "by"), float(at), kind, report,
                        page=stored_hash(data.get("page")))
