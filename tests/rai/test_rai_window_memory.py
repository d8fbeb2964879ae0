"""A listing over more than 30 days (issue 32, item 7): the ids held to drop the records two
windows share stay a handful, however many records the windows hold.

Windows share their boundary instant, so a record stamped there may come back in both. Only the
records that could come back are remembered: those stamped at or after their window's end (any
of a cohort's times, whichever the service filters on), or with no readable time. Remembering
every id of a window made ``rai sessions --parallel 1`` over 31 days peak at 295 MB for 1M
sessions, against 46 MB over 30 days (tests/benchmarks/bench_rai_memory.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from _rai_fake import FakeRai, make_client, page

from failopen.rai._pager import cohorts_pager, sessions_pager

START = datetime(2024, 1, 1, tzinfo=timezone.utc)
BOUNDARY = "2024-01-31T00:00:00Z"  # START + 30 days: where the first window ends


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _session(i: int, stamp: str) -> dict[str, Any]:
    return {"session_id": f"s{i}", "cohort_id": "c", "session_created": stamp, "pad": "x" * 50}


def _service(records: list[dict[str, Any]], field: str, key: str, page_size: int = 100) -> Any:
    """Records whose ``field`` is in [from, to] (both ends: the boundary's are sent twice)."""

    def data(request: httpx.Request) -> httpx.Response:
        lo, hi = request.url.params["from"], request.url.params["to"]
        hits = [r for r in records if lo <= r[field] <= hi]
        at = int(request.url.params.get("page_token", "0"))
        token = str(at + page_size) if at + page_size < len(hits) else ""
        return page(key, hits[at : at + page_size], token=token)

    return data


@pytest.mark.parametrize("slim", [True, False])
def test_a_listing_over_31_days_holds_only_the_ids_at_the_boundary(slim: bool) -> None:
    # 3,000 sessions 21 minutes apart over 44 days, and 3 more stamped at the boundary.
    records = [_session(i, _stamp(START + timedelta(minutes=21 * i + 7))) for i in range(3000)]
    records += [_session(3000 + i, BOUNDARY) for i in range(3)]
    records.sort(key=lambda r: r["session_created"])
    client, _ = make_client(FakeRai(_service(records, "session_created", "sessions")))
    pager = sessions_pager(START, START + timedelta(days=45), ["PK"], cohort_id=None,
                           anomaly_id=None, telltale_id=None, page_size=100)  # fmt: skip
    got, held = [], []
    for p in client.export_pages(pager, slim=slim):
        got += [r["session_id"] for r in p.items]
        held.append(pager.remembered)
    assert sorted(got) == sorted(r["session_id"] for r in records)  # each once
    assert len(held) > 30 and max(held) <= 3  # the three at the boundary, never a window's ids


def test_a_cohort_is_remembered_by_whichever_time_reaches_the_boundary() -> None:
    # Filtered on created_at here; the other cohorts' window times are far from the boundary.
    def cohort(i: int, created: str) -> dict[str, Any]:
        return {"cohort_id": f"c{i}", "cohort_window_start": "2024-01-02T00:00:00Z",
                "cohort_window_end": "2024-01-02T01:00:00Z", "created_at": created}  # fmt: skip

    records = [cohort(i, _stamp(START + timedelta(hours=7 * i + 1))) for i in range(150)]
    records.append(cohort(999, BOUNDARY))
    records.sort(key=lambda r: r["created_at"])
    client, _ = make_client(FakeRai(_service(records, "created_at", "cohorts", page_size=10)))
    pager = cohorts_pager(START, START + timedelta(days=45), ["PK"], cohort_id=None,
                          anomaly_id=None, telltale_id=None, min_session_count=None,
                          page_size=10)  # fmt: skip
    got, held = [], []
    for p in client.export_pages(pager, slim=True):
        got += [r["cohort_id"] for r in p.items]
        held.append(pager.remembered)
    assert sorted(got) == sorted(r["cohort_id"] for r in records)
    assert max(held) == 1
