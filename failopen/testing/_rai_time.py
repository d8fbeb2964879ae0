"""The emulator playing time: a cohort exists only from its ``created_at`` on.

``RaiEmulator(live=True)`` (``failopen emulate rai --live``) generates its cohorts over a span
that ends now unless told otherwise, and serves a cohort (listed, found, its sessions) only once
its clock has passed the cohort's ``created_at``, as a vendor that finds attacks after the fact
does. One generated cohort in five is *late*: created two to five days after its window starts
(the others 1 to 24 hours after their window ends, as in the default mode). Cohorts added while
the emulator runs (:meth:`PlayedDataset.add`) follow the same rule in either mode; the generated
cohorts of the default mode are served whatever the clock says, as before.

Times are RFC 3339 or relative to the emulator's now: ``now``, ``now-3d``, ``now+90m``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from failopen._internal.durations import parse_duration
from failopen.testing._rai_data import CohortPlan, Dataset, Query, format_rfc3339, parse_rfc3339

__all__ = ["MAX_ADDED", "MAX_SESSIONS", "MAX_SPAN_DAYS", "AddedCohort", "PlayedDataset",
           "cohort_times", "resolve_time"]

#: Most cohorts added to one emulator while it runs (each is kept: a few integers).
MAX_ADDED = 10_000
#: Most sessions in one added cohort (generated on demand, never stored).
MAX_SESSIONS = 1_000_000
#: Longest span of generated data, in days.
MAX_SPAN_DAYS = 3660
_DAY_MS = 86_400_000
_LATEST_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z: a record's year has four digits
_RELATIVE = re.compile(r"now\s*(?:([+-])\s*(\S+))?", re.IGNORECASE)
_SPREAD = 0x9E3779B97F4A7C15  # odd: spreads a cohort's hash over the late/on-time pick


def resolve_time(text: Any, now_ms: int, where: str) -> int:
    """Milliseconds of an RFC 3339 time or ``now[+-DURATION]``, whole seconds, 1970 to 9999;
    ValueError starting with ``where`` says what to write instead."""
    if not isinstance(text, str):
        raise ValueError(f"{where}: a time like 2024-05-01T00:00:00Z or now-3d, not {text!r}")
    relative = _RELATIVE.fullmatch(text.strip())
    if relative is None:
        ms = parse_rfc3339(text.strip())
        if ms is None:
            raise ValueError(f"{where}: {text[:60]!r} is neither an RFC 3339 date-time like "
                             "2024-05-01T00:00:00Z nor now, now-3d, now+2h")
    else:
        sign, amount = relative.groups()
        try:
            offset = 0.0 if amount is None else parse_duration(amount, zero=True)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}"[:200]) from None
        # Past 10,000 years the offset is refused before its milliseconds overflow a float.
        ms = -1 if offset > _LATEST_MS / 1000 else now_ms + round(offset * 1000) * (
            -1 if sign == "-" else 1)
    if not 0 <= ms <= _LATEST_MS:
        raise ValueError(f"{where}: {text[:60]!r} is outside 1970-01-01 to 9999-12-31")
    return ms // 1000 * 1000


@dataclass(frozen=True)
class AddedCohort:
    """Where an added cohort sits in time (milliseconds) and how many sessions it has."""

    start_ms: int
    end_ms: int
    created_ms: int
    sessions: int


def cohort_times(
    window_start: Any, window_end: Any, created_at: Any, sessions: Any, now_ms: int
) -> AddedCohort:
    """A cohort to add, checked: its window 1 s to 30 days (default 1 h), created at or after
    its window's end (default: now, or the window's end when later), 0 to
    :data:`MAX_SESSIONS` sessions. ValueError names the field and what to change."""
    if isinstance(sessions, bool) or not isinstance(sessions, int):
        raise ValueError(f"sessions: a whole number from 0 to {MAX_SESSIONS}, not {sessions!r}")
    if not 0 <= sessions <= MAX_SESSIONS:
        raise ValueError(f"sessions: from 0 to {MAX_SESSIONS}, not {sessions}")
    start = resolve_time(window_start, now_ms, "window_start")
    end = start + 3_600_000
    if window_end is not None:
        end = resolve_time(window_end, now_ms, "window_end")
    if not 1000 <= end - start <= 30 * _DAY_MS:
        raise ValueError("window_end: 1 second to 30 days after window_start")
    created = max(now_ms // 1000 * 1000, end)
    if created_at is not None:
        created = resolve_time(created_at, now_ms, "created_at")
    if created < end:
        raise ValueError(f"created_at: not before window_end ({format_rfc3339(end, fraction=False)}"
                         "): a cohort is created once its window has ended")
    return AddedCohort(start, end, created, sessions)


class PlayedDataset(Dataset):
    """A :class:`Dataset` whose cohorts exist from their ``created_at`` on (see the module)."""

    def __init__(self, *, live: bool, now_ms: Callable[[], int], **dataset: Any) -> None:
        super().__init__(**dataset)
        if dataset["start_ms"] + dataset["span_days"] * _DAY_MS > _LATEST_MS:
            raise ValueError("start: the data would end after 9999-12-31; start earlier or "
                             "shorten span_days")
        self.live = live
        self.now_ms = now_ms
        self._added: dict[int, AddedCohort] = {}

    def add(self, cohort: AddedCohort) -> int:
        """Create ``cohort`` after the existing ones (the caller serialises adds); its index."""
        if len(self._added) >= MAX_ADDED:
            raise ValueError(f"an emulator takes at most {MAX_ADDED} cohorts added while it "
                             "runs; start another one for more")
        index = self.cohort_count
        self._added[index] = cohort
        self.cohort_count += 1
        return index

    def unborn(self, plan: CohortPlan) -> bool:
        """Whether ``plan``'s cohort is not created yet (and so neither listed nor found)."""
        return (self.live or plan.index in self._added) and plan.created_at_ms > self.now_ms()

    def listed_now(self) -> tuple[int, int | None]:
        """How many cohorts are served now, and the next ``created_at`` to come (ms) if any."""
        listed, upcoming = 0, None
        for c in range(self.cohort_count):
            plan = self.plan(c)
            if c in self.hidden:
                continue
            if not self.unborn(plan):
                listed += 1
            elif upcoming is None or plan.created_at_ms < upcoming:
                upcoming = plan.created_at_ms
        return listed, upcoming

    def index_of(self, cohort_id: str) -> int | None:
        index = super().index_of(cohort_id)
        return None if index is None or self.unborn(self.plan(index)) else index

    def _matching_cohorts(self, query: Query, first: int) -> Iterator[CohortPlan]:
        for plan in super()._matching_cohorts(query, first):
            if not self.unborn(plan):
                yield plan

    def _place(
        self, c: int, h: int, start_ms: int, length_ms: int, count: int, created_ms: int
    ) -> tuple[int, int, int, int]:
        added = self._added.get(c)
        if added is not None:
            return added.start_ms, added.end_ms - added.start_ms, added.sessions, added.created_ms
        spread = (h ^ c) * _SPREAD & (1 << 64) - 1
        if self.live and spread % 5 == 0:  # late: found days after the attack began
            late = start_ms + 2 * _DAY_MS + (spread >> 16) % (3 * 86_400) * 1000
            created_ms = max(late, start_ms + length_ms + 3_600_000)
        return start_ms, length_ms, count, created_ms

    @property
    def data_window(self) -> tuple[str, str]:
        """``(from, to)`` covering every cohort window, added ones too."""
        first, end = super().data_window
        if not self._added:
            return first, end
        last = next((c for c in range(self.cohort_count - 1, -1, -1) if c not in self._added),
                    None)  # the windows of generated cohorts grow with their index
        starts = [a.start_ms for a in self._added.values()]
        ends = [a.end_ms for a in self._added.values()]
        if last is not None:
            starts.append(parse_rfc3339(first) or 0)
            ends.append(self.plan(last).end_ms)
        return (format_rfc3339(min(starts), fraction=False),
                format_rfc3339(max(ends) + 1000, fraction=False))
