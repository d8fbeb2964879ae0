from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from _rai_fake import FakeRai, envelope, make_client, page

from failopen.rai import InvalidResponse, NotFound, Page, ServerError

START = datetime(2024, 1, 1, tzinfo=timezone.utc)


def paged(key: str, pages: list[list[dict[str, Any]]], last_token: Any = "") -> Any:
    """Serve ``pages`` in order: page i carries token "p{i+1}", the last one ``last_token``."""

    def data(request: httpx.Request) -> httpx.Response:
        token = request.url.params.get("page_token")
        index = 0 if token is None else int(token[1:])
        body: dict[str, Any] = {key: pages[index], "schema_version": "rai-v1"}
        if index + 1 < len(pages):
            body["next_page_token"] = f"p{index + 1}"
        elif last_token is not None:
            body["next_page_token"] = last_token
        return httpx.Response(200, json=body)

    return data


def cohorts(*ids: str) -> list[dict[str, Any]]:
    return [{"cohort_id": i} for i in ids]


@pytest.mark.parametrize("last_token", ["", None, "absent"])
def test_follows_the_cursor_with_the_same_filters(last_token: Any) -> None:
    data = paged("cohorts", [cohorts("a", "b"), cohorts("c"), cohorts("d")],
                 last_token=None if last_token == "absent" else last_token)
    fake = FakeRai(data)
    client, _ = make_client(fake, prefetch=False)
    got = [c.cohort_id for c in client.iter_cohorts(
        START, START + timedelta(days=1), ["PK-1", "PK-2"], telltale_id=5, page_size=2)]
    assert got == ["a", "b", "c", "d"]
    first = fake.params[0]
    assert "page_token" not in dict(first)
    assert fake.params[1] == [*first, ("page_token", "p1")]
    assert fake.params[2] == [*first, ("page_token", "p2")]
    assert len(fake.requests) == 3


def test_page_level_iteration_exposes_the_cursor() -> None:
    fake = FakeRai(paged("sessions", [[{"session_id": "s1"}], [{"session_id": "s2"}]]))
    client, _ = make_client(fake)
    pages = list(client.iter_session_pages(START, START + timedelta(hours=1), ["PK"]))
    assert [type(p) for p in pages] == [Page, Page]
    assert [p.next_page_token for p in pages] == ["p1", None]
    assert [p.schema_version for p in pages] == ["rai-v1", "rai-v1"]
    assert [[s.session_id for s in p.items] for p in pages] == [["s1"], ["s2"]]


def test_cohort_session_pages_repeat_only_the_page_size() -> None:
    fake = FakeRai(paged("sessions", [[{"session_id": "s1"}], [{"session_id": "s2"}]]))
    client, _ = make_client(fake)
    pages = list(client.iter_cohort_session_pages("coh_1", page_size=1))
    assert len(pages) == 2
    assert fake.params == [[("page_size", "1")], [("page_size", "1"), ("page_token", "p1")]]
    assert {r.url.path for r in fake.requests} == {"/api/rai/v1/cohorts/coh_1/sessions"}


@pytest.mark.parametrize("prefetch", [True, False])
def test_a_token_returned_forever_is_an_error_not_a_loop(prefetch: bool) -> None:
    fake = FakeRai(lambda r: page("cohorts", cohorts("x"), token="same"))
    client, _ = make_client(fake, prefetch=prefetch)
    seen = []
    with pytest.raises(InvalidResponse, match="already returned"):
        for cohort in client.iter_cohorts(START, START + timedelta(days=1), ["PK"]):
            seen.append(cohort.cohort_id)
    assert seen == ["x"]
    assert len(fake.requests) == 2


def test_a_token_cycle_is_an_error() -> None:
    tokens = {None: "A", "A": "B", "B": "A"}
    fake = FakeRai(lambda r: page("cohorts", [], token=tokens[r.url.params.get("page_token")]))
    client, _ = make_client(fake, prefetch=False)
    with pytest.raises(InvalidResponse):
        list(client.iter_cohorts(START, START + timedelta(days=1), ["PK"]))
    assert len(fake.requests) == 3


# --- windows longer than 30 days ---------------------------------------------------------------


def windowed(records: list[dict[str, Any]], stamp: str, key: str, *, inclusive: bool) -> Any:
    """Serve the records whose ``stamp`` falls in [from, to] (or [from, to))."""

    def data(request: httpx.Request) -> httpx.Response:
        lo, hi = request.url.params["from"], request.url.params["to"]
        hits = [r for r in records if lo <= r[stamp] and (r[stamp] <= hi if inclusive
                                                          else r[stamp] < hi)]
        return page(key, hits)

    return data


def test_a_long_window_is_split_into_consecutive_30_day_windows() -> None:
    fake = FakeRai(lambda r: page("cohorts", []))
    client, _ = make_client(fake)
    list(client.iter_cohorts(START, START + timedelta(days=75), ["PK"], page_size=10))
    windows = [(dict(p)["from"], dict(p)["to"]) for p in fake.params]
    assert windows == [
        ("2024-01-01T00:00:00Z", "2024-01-31T00:00:00Z"),
        ("2024-01-31T00:00:00Z", "2024-03-01T00:00:00Z"),
        ("2024-03-01T00:00:00Z", "2024-03-16T00:00:00Z"),
    ]
    assert all(("page_size", "10") in p and ("public_key", "PK") in p for p in fake.params)


def test_exactly_30_days_is_one_window() -> None:
    fake = FakeRai(lambda r: page("cohorts", []))
    client, _ = make_client(fake)
    list(client.iter_cohorts(START, START + timedelta(days=30), ["PK"]))
    assert len(fake.requests) == 1


@pytest.mark.parametrize("inclusive", [True, False])
def test_records_on_a_window_boundary_are_yielded_once(inclusive: bool) -> None:
    boundary = "2024-01-31T00:00:00Z"
    records = [
        {"session_id": "s1", "cohort_id": "c1", "session_created": "2024-01-10T00:00:00Z"},
        {"session_id": "s2", "cohort_id": "c1", "session_created": boundary},
        {"session_id": "s2", "cohort_id": "c2", "session_created": boundary},  # other cohort
        {"session_id": "s3", "cohort_id": "c2", "session_created": "2024-02-10T00:00:00Z"},
    ]
    fake = FakeRai(windowed(records, "session_created", "sessions", inclusive=inclusive))
    client, _ = make_client(fake)
    got = [(s.session_id, s.cohort_id) for s in
           client.iter_sessions(START, START + timedelta(days=45), ["PK"])]
    assert got == [("s1", "c1"), ("s2", "c1"), ("s2", "c2"), ("s3", "c2")]
    assert len(fake.requests) == 2


def test_a_cohort_overlapping_three_windows_is_yielded_once() -> None:
    long_cohort = {"cohort_id": "long"}

    def data(request: httpx.Request) -> httpx.Response:
        own = request.url.params["from"][:10]
        return page("cohorts", [long_cohort, {"cohort_id": f"c-{own}"}])

    fake = FakeRai(data)
    client, _ = make_client(fake)
    pages = list(client.iter_cohort_pages(START, START + timedelta(days=90), ["PK"]))
    assert [[c.cohort_id for c in p.items] for p in pages] == [
        ["long", "c-2024-01-01"], ["c-2024-01-31"], ["c-2024-03-01"]]


def test_tokens_may_repeat_across_windows() -> None:
    def data(request: httpx.Request) -> httpx.Response:
        token = request.url.params.get("page_token")
        own = request.url.params["from"][:10]
        return page("cohorts", [{"cohort_id": f"{own}-{token}"}], token=None if token else "t1")

    fake = FakeRai(data)
    client, _ = make_client(fake)
    got = [c.cohort_id for c in client.iter_cohorts(START, START + timedelta(days=40), ["PK"])]
    assert got == ["2024-01-01-None", "2024-01-01-t1", "2024-01-31-None", "2024-01-31-t1"]


# --- prefetch ---------------------------------------------------------------------------------


class Recorder:
    """A paged service that notes when each page is requested, and can fail one page."""

    def __init__(self, pages: int, fail_at: int | None = None,
                 failure: httpx.Response | None = None) -> None:
        self.pages = pages
        self.fail_at = fail_at
        self.failure = failure or envelope(404, "not_found")
        self.requested: list[int] = []
        self.arrived = threading.Condition()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        token = request.url.params.get("page_token")
        index = 0 if token is None else int(token)
        with self.arrived:
            self.requested.append(index)
            self.arrived.notify_all()
        if index == self.fail_at:
            return self.failure
        nxt = str(index + 1) if index + 1 < self.pages else ""
        return page("cohorts", [{"cohort_id": f"c{index}"}], token=nxt)

    def wait_for(self, index: int, timeout: float = 5.0) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: index in self.requested, timeout)


def test_prefetch_fetches_the_next_page_while_the_caller_works_but_no_further() -> None:
    service = Recorder(pages=5)
    client, _ = make_client(FakeRai(service))
    seen = []
    for i, cohort in enumerate(client.iter_cohorts(START, START + timedelta(days=1), ["PK"])):
        seen.append(cohort.cohort_id)
        if i + 1 < 5:
            assert service.wait_for(i + 1), f"page {i + 1} was not prefetched during page {i}"
        time.sleep(0.02)  # give a runaway prefetcher the chance to go further
        assert max(service.requested) == min(i + 1, 4), "more than one page ahead"
    assert seen == ["c0", "c1", "c2", "c3", "c4"]
    assert service.requested == [0, 1, 2, 3, 4]


def test_without_prefetch_nothing_is_fetched_ahead() -> None:
    service = Recorder(pages=3)
    client, _ = make_client(FakeRai(service), prefetch=False)
    for i, _cohort in enumerate(client.iter_cohorts(START, START + timedelta(days=1), ["PK"])):
        time.sleep(0.02)
        assert service.requested == list(range(i + 1))


@pytest.mark.parametrize("prefetch", [True, False])
@pytest.mark.parametrize(
    ("failure", "cls"), [(envelope(404, "not_found"), NotFound),
                         (envelope(500, "internal"), ServerError)])
def test_a_failed_page_raises_where_it_is_consumed(
    prefetch: bool, failure: httpx.Response, cls: type[Exception]
) -> None:
    service = Recorder(pages=5, fail_at=2, failure=failure)
    client, _ = make_client(FakeRai(service), prefetch=prefetch, max_attempts=2)
    consumed = []
    pages = client.iter_cohort_pages(START, START + timedelta(days=1), ["PK"])
    consumed.append(next(pages))
    if prefetch:
        assert service.wait_for(1)
    consumed.append(next(pages))  # page 1 is fine even though page 2 is failing meanwhile
    if prefetch:
        assert service.wait_for(2)
        time.sleep(0.02)
    with pytest.raises(cls):
        next(pages)
    assert [p.items[0].cohort_id for p in consumed] == ["c0", "c1"]
    assert 3 not in service.requested


def test_stopping_early_drops_the_prefetch_thread() -> None:
    service = Recorder(pages=100)
    client, _ = make_client(FakeRai(service))
    pages = client.iter_cohort_pages(START, START + timedelta(days=1), ["PK"])
    next(pages)
    assert service.wait_for(1)
    pages.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
        t.name.startswith("failopen.rai.prefetch") for t in threading.enumerate()
    ):
        time.sleep(0.01)
    assert not any(t.name.startswith("failopen.rai.prefetch") for t in threading.enumerate())
    assert max(service.requested) == 1


def test_breaking_out_of_the_item_loop_closes_the_pages() -> None:
    service = Recorder(pages=100)
    client, _ = make_client(FakeRai(service))
    before = set(threading.enumerate())
    items = client.iter_cohorts(START, START + timedelta(days=1), ["PK"])
    for _cohort in items:
        break
    assert service.wait_for(1)
    prefetchers = [t for t in set(threading.enumerate()) - before
                   if t.name.startswith("failopen.rai.prefetch")]
    assert prefetchers, "no prefetch thread was running"
    items.close()  # unclosed, the worker would wait for the next page's request forever
    for thread in prefetchers:
        thread.join(timeout=5)
    assert not any(thread.is_alive() for thread in prefetchers)
    assert max(service.requested) == 1
