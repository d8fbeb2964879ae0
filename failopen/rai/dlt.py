"""A dlt source for interface A: cohorts and their sessions into any dlt destination.

The [dlt] extra. Two resources, both ``write_disposition="merge"``:

* ``cohorts`` (primary key ``cohort_id``): each run lists the last 30 days of cohorts (the API's
  reach, as ``failopen rai sync`` does: a cohort created late inside an old window is still
  listed) and yields only those not delivered before;
* ``sessions`` (primary key ``session_id``, merge key ``cohort_id``): a transformer fetching the
  sessions of each new cohort.

Why not ``dlt.sources.incremental`` on ``created_at``: the spec does not say whether the
listing filters on a cohort's window or on its ``created_at``, so a cursor on either loses late
cohorts. The incremental state is the sync's instead: the delivered cohort ids, each with a forget
time 60 days after the run (twice the reach), kept in dlt's source state. dlt saves that state
with the load package it belongs to, so an extract that fails leaves the state where it was and
the next run fetches those cohorts again; the merge keys make such a repeat (and a package dlt
loads again after a crash) replace rows instead of adding them.

This module alone imports dlt, and only when :func:`rai_source` is called.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from datetime import datetime, timezone
from typing import Any

from failopen.rai._arguments import (
    MAX_WINDOW,
    format_rfc3339,
    parse_rfc3339,
)
from failopen.rai._client import Client
from failopen.rai._state import FORGET_AFTER
from failopen.rai.sync import listed_cohorts

__all__ = ["rai_source", "SOURCE_NAME"]

#: The dlt source's name: its state lives under it in the pipeline.
SOURCE_NAME = "failopen_rai"

Record = dict[str, Any]

logger = logging.getLogger("failopen.rai")


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def rai_source(
    client: Client,
    public_keys: Sequence[str],
    *,
    page_size: int = 1000,
    now: Callable[[], datetime] = _utc_now,
) -> Any:
    """The dlt source (a ``DltSource``) of the keys' cohorts and sessions, through ``client``.

    ``now`` (injectable) ends each run's listing; it starts 30 days before. The caller owns
    ``client`` (close it after ``pipeline.run``). Raises ImportError naming the extra when dlt
    is not installed.
    """
    try:
        import dlt
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError('failopen.rai.dlt needs dlt: pip install "failopen[dlt]"') from exc
    keys = list(public_keys)
    if not keys:
        raise ValueError("rai_source needs at least one public key")

    @dlt.resource(name="cohorts", write_disposition="merge", primary_key="cohort_id")
    def cohorts() -> Iterator[Record]:
        state = dlt.current.source_state().setdefault("rai", {})
        delivered: dict[str, str] = state.setdefault("delivered", {})
        until = now()
        forget = format_rfc3339(until + FORGET_AFTER)
        start = until - MAX_WINDOW
        through = state.get("through")
        if (
            isinstance(through, str)
            and until - parse_rfc3339(through, name="dlt state") > MAX_WINDOW
        ):
            # As the sync's exit 6: what appeared after the last run and left the 30-day
            # listing since could not be loaded; the run goes on with what is listed.
            logger.warning(
                "failopen.rai.dlt: the last run listed up to %s, more than 30 days ago: cohorts "
                "that appeared in between may be missing (check them in the vendor's console)",
                through,
            )
        for public_key in keys:
            for cohort_id, record in listed_cohorts(client, public_key, start, until, page_size):
                if cohort_id in delivered:
                    continue
                # Marked now, saved by dlt only with this run's package: a failed extract
                # forgets the mark with the rows.
                delivered[cohort_id] = forget
                yield record
        # Ids past their forget time are older than anything a 30-day listing returns.
        for cohort_id in [c for c, at in delivered.items()
                          if parse_rfc3339(at, name="dlt state") <= until]:  # fmt: skip
            del delivered[cohort_id]
        state["through"] = format_rfc3339(until)

    # verify: a struct, null in most sessions: one JSON column, not columns guessed per load.
    @dlt.transformer(data_from=cohorts, name="sessions", write_disposition="merge",
                     primary_key="session_id", merge_key="cohort_id",
                     columns={"verify": {"data_type": "json"}})  # fmt: skip
    def sessions(cohort: Record) -> Iterator[list[Record]]:
        cohort_id = cohort["cohort_id"]
        pages = client.iter_cohort_session_pages(cohort_id, page_size=page_size, raw=True)
        with closing(pages):
            for page in pages:
                # The spec puts cohort_id in each session; set it anyway, as the merge key.
                yield [{**item, "cohort_id": cohort_id} for item in page.items]

    @dlt.source(name=SOURCE_NAME)
    def source() -> Any:
        return cohorts, sessions

    return source()
