"""The body of one list page, as the emulator sends it (split from ``rai_emulator.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from failopen.testing._rai_data import SCHEMA, CohortPlan, Query

__all__ = ["page_chunks"]


def page_chunks(
    query: Query,
    positions: Iterator[tuple[CohortPlan, int]],
    cursor: Callable[[tuple[int, int]], str],
    *,
    final_page_token: str,
    unknown_fields: bool,
    stall: Callable[[], object] | None = None,
) -> Iterator[bytes]:
    """The page of ``query`` from ``positions`` on; ``cursor`` signs the position after it.

    ``stall``, when given, runs after the first bytes (a body that stalls mid-way).
    """
    field = "cohorts" if query.kind == "list_cohorts" else "sessions"
    head = f'{{"{field}":['
    if stall is not None:
        yield head.encode()  # the answer starts promptly, then stalls mid-body
        head = ""
        stall()
    # A page (1,000 records at most, 0.65 MB) is rendered whole and sent in one write: the
    # emulator shares its GIL (and the machine) with the client under test, and each write of
    # a part would wait for the client to read the part before.
    records: list[str] = []
    following: tuple[CohortPlan, int] | None = None
    for emitted, (plan, j) in enumerate(positions):
        if emitted == query.page_size:
            following = (plan, j)
            break
        if query.kind == "list_cohorts":
            records.append(json.dumps(plan.record, separators=(",", ":")))
        else:
            records.append(plan.session_json(j))
    tail = "]"
    if following is not None:
        plan, j = following
        tail += f',"next_page_token":"{cursor((plan.index, j))}"'
    elif final_page_token == "empty":
        tail += ',"next_page_token":""'
    tail += f',"schema_version":"{SCHEMA}"'
    if unknown_fields:
        tail += ',"future_top_level":{"note":"tolerate me"}'
    yield (head + ",".join(records) + tail + "}").encode()
