"""Raw page iteration, and the order of work per page: the next request leaves before models
of the current page are built, sync and async, and the export builds no models at all."""

from __future__ import annotations

import argparse
import functools
import json
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from _rai_fake import FakeRai, envelope, make_async_client, make_client, page

from failopen.rai import Client, Cohort, InvalidResponse, NotFound, Page, Session
from failopen.rai import cli as rai_cli
from failopen.testing.rai_emulator import RaiEmulator

START = datetime(2024, 5, 1, tzinfo=timezone.utc)
END = START + timedelta(days=7)
EXTRA = {"future_field": {"nested": [1, 2]}, "risk_score": "not a number"}


def sessions(index: int) -> list[dict[str, Any]]:
    return [{"session_id": f"s{index}-{k}", "cohort_id": "c", **EXTRA} for k in range(2)]


class Service:
    """Serves ``n`` pages of sessions and logs each request next to the consumer's events."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n = n
        self.fail_at = fail_at
        self.log: list[tuple[str, int]] = []
        self.arrived = threading.Condition()

    def note(self, event: str, index: int) -> None:
        with self.arrived:
            self.log.append((event, index))
            self.arrived.notify_all()

    def requested(self) -> list[int]:
        with self.arrived:
            return [i for event, i in self.log if event == "request"]

    def wait_for_request(self, index: int) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: ("request", index) in self.log, 5.0)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        token = request.url.params.get("page_token")
        index = 0 if token is None else int(token)
        self.note("request", index)
        if index == self.fail_at:
            return envelope(404, "not_found")
        return page("sessions", sessions(index), token=str(index + 1) if index + 1 < self.n else "")


def logging_builds(
    monkeypatch: pytest.MonkeyPatch, service: Service, before: Callable[[int], None] | None = None
) -> None:
    """Session.from_dict notes ("build", page) for the first record of each page."""
    real = Session.from_dict

    def from_dict(d: Mapping[str, Any]) -> Session:
        index, k = (int(part) for part in d["session_id"][1:].split("-"))
        if k == 0:
            if before is not None:
                before(index)
            service.note("build", index)
        return real(d)

    monkeypatch.setattr(Session, "from_dict", from_dict)


def refuse_models(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(d: Mapping[str, Any]) -> Any:
        raise AssertionError("a model was built")

    monkeypatch.setattr(Session, "from_dict", refuse)
    monkeypatch.setattr(Cohort, "from_dict", refuse)


def expected_order(n: int) -> list[tuple[str, int]]:
    """Request 0, then per page i: request i+1, build i, consumed i."""
    order = [("request", 0)]
    for i in range(n):
        order += [("request", i + 1)] if i + 1 < n else []
        order += [("build", i), ("consumed", i)]
    return order


# --- raw pages ---------------------------------------------------------------------------------


@pytest.mark.parametrize("prefetch", [True, False])
def test_raw_pages_hold_the_records_exactly_as_received(
    prefetch: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = make_client(FakeRai(Service(3)), prefetch=prefetch)
    refuse_models(monkeypatch)
    pages = list(client.iter_session_pages(START, END, ["PK"], raw=True))
    assert [type(p) for p in pages] == [Page, Page, Page]
    assert [p.items for p in pages] == [sessions(0), sessions(1), sessions(2)]
    assert [p.next_page_token for p in pages] == ["1", "2", None]
    assert {p.schema_version for p in pages} == {"rai-v1"}


def test_raw_pages_of_every_list_method() -> None:
    def data(request: httpx.Request) -> httpx.Response:
        key = "cohorts" if request.url.path.endswith("/cohorts") else "sessions"
        return page(key, [{"cohort_id": "c1", "session_id": "s1", **EXTRA}])

    client, _ = make_client(FakeRai(data))
    cohort_pages = list(client.iter_cohort_pages(START, END, ["PK"], raw=True))
    cohort_session_pages = list(client.iter_cohort_session_pages("c1", raw=True))
    assert cohort_pages[0].items == [{"cohort_id": "c1", "session_id": "s1", **EXTRA}]
    assert cohort_session_pages[0].items == cohort_pages[0].items


def test_models_are_built_from_the_same_records_by_default() -> None:
    client, _ = make_client(FakeRai(Service(2)))
    raw = list(client.iter_session_pages(START, END, ["PK"], raw=True))
    default = list(client.iter_session_pages(START, END, ["PK"]))
    explicit = list(client.iter_session_pages(START, END, ["PK"], raw=False))
    assert all(isinstance(s, Session) for p in default for s in p.items)
    assert [[s.raw for s in p.items] for p in default] == [p.items for p in raw]
    assert default == explicit
    assert default[0].items[0].risk_score is None  # typed; the raw record keeps the string


@pytest.mark.parametrize("inclusive", [True, False])
def test_raw_pages_drop_records_repeated_across_windows(inclusive: bool) -> None:
    boundary = "2024-05-31T00:00:00Z"
    records: list[dict[str, Any]] = [
        {"session_id": "s1", "cohort_id": "c1", "session_created": "2024-05-10T00:00:00Z"},
        {"session_id": "s2", "cohort_id": "c1", "session_created": boundary},
        {"session_id": "s2", "cohort_id": "c2", "session_created": boundary},
        {"session_id": 7, "cohort_id": "c2", "session_created": boundary},  # no usable id
    ]

    def data(request: httpx.Request) -> httpx.Response:
        lo, hi = request.url.params["from"], request.url.params["to"]
        return page("sessions", [r for r in records if lo <= r["session_created"] and (
            r["session_created"] <= hi if inclusive else r["session_created"] < hi)])

    client, _ = make_client(FakeRai(data))
    got = [r for p in client.iter_session_pages(START, START + timedelta(days=45), ["PK"],
                                                raw=True) for r in p.items]
    kept = records if not inclusive else [*records, records[3]]  # an id-less record is kept
    assert got == kept


@pytest.mark.parametrize("raw", [True, False])
def test_a_record_that_is_not_an_object_is_an_invalid_response(raw: bool) -> None:
    answer = httpx.Response(200, json={"sessions": [{"session_id": "s"}, 3]})
    client, _ = make_client(FakeRai(lambda r: answer))
    with pytest.raises(InvalidResponse, match="a session record must be a JSON object, not int"):
        list(client.iter_session_pages(START, END, ["PK"], raw=raw))


def test_a_failed_raw_page_raises_where_it_is_consumed() -> None:
    service = Service(5, fail_at=2)
    client, _ = make_client(FakeRai(service), max_attempts=1)
    pages = client.iter_session_pages(START, END, ["PK"], raw=True)
    first, second = next(pages), next(pages)
    assert service.wait_for_request(2)
    with pytest.raises(NotFound):
        next(pages)
    assert [first.items, second.items] == [sessions(0), sessions(1)]
    assert 3 not in service.requested()


def test_closing_raw_pages_early_stops_the_prefetch() -> None:
    service = Service(100)
    client, _ = make_client(FakeRai(service))
    pages = client.iter_session_pages(START, END, ["PK"], raw=True)
    next(pages)
    assert service.wait_for_request(1)
    pages.close()
    assert service.requested() == [0, 1]


# --- the next request leaves before this page is built or consumed -----------------------------


def test_the_next_request_is_sent_before_models_of_the_current_page_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = 4
    service = Service(n)

    def request_first(index: int) -> None:
        # Under the old order (models built on the fetching thread, then the next request),
        # request index+1 would never come while page index is being built.
        if index + 1 < n:
            assert service.wait_for_request(index + 1), f"page {index + 1} was not requested"
        assert max(service.requested()) == min(index + 1, n - 1), "more than one page ahead"

    logging_builds(monkeypatch, service, before=request_first)
    client, _ = make_client(FakeRai(service))
    for i, _page in enumerate(client.iter_session_pages(START, END, ["PK"])):
        service.note("consumed", i)
    assert service.log == expected_order(n)


def test_the_next_raw_request_is_sent_while_the_consumer_holds_the_page() -> None:
    service = Service(4)
    client, _ = make_client(FakeRai(service))
    for i, _page in enumerate(client.iter_session_pages(START, END, ["PK"], raw=True)):
        if i + 1 < 4:
            assert service.wait_for_request(i + 1)
        assert max(service.requested()) == min(i + 1, 3)
        service.note("consumed", i)
    assert [e for e in service.log if e[0] == "request"] == [("request", i) for i in range(4)]


@pytest.mark.anyio
async def test_async_sends_the_next_request_before_building_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = 4
    service = Service(n)
    logging_builds(monkeypatch, service)
    client, _ = make_async_client(FakeRai(service))
    i = 0
    async for _page in client.iter_session_pages(START, END, ["PK"]):
        service.note("consumed", i)  # no await before this: the request went out on its own
        i += 1
    assert service.log == expected_order(n)


@pytest.mark.anyio
async def test_async_raw_pages_send_the_next_request_before_handing_over_a_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = Service(4)
    client, _ = make_async_client(FakeRai(service))
    refuse_models(monkeypatch)
    got: list[list[dict[str, Any]]] = []
    async for raw_page in client.iter_session_pages(START, END, ["PK"], raw=True):
        index = len(got)
        assert service.requested() == list(range(min(index + 2, 4)))
        got.append(raw_page.items)
    assert got == [sessions(i) for i in range(4)]


@pytest.mark.anyio
async def test_async_raw_pages_of_cohorts_and_cohort_sessions() -> None:
    def data(request: httpx.Request) -> httpx.Response:
        key = "cohorts" if request.url.path.endswith("/cohorts") else "sessions"
        return page(key, [{"cohort_id": "c1", **EXTRA}])

    client, _ = make_async_client(FakeRai(data))
    cohorts = [p.items async for p in client.iter_cohort_pages(START, END, ["PK"], raw=True)]
    members = [p.items async for p in client.iter_cohort_session_pages("c1", raw=True)]
    assert cohorts == members == [[{"cohort_id": "c1", **EXTRA}]]


# --- the export --------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("verb", ["sessions", "cohorts", "cohort-sessions"])
def test_the_export_builds_no_models(
    fmt: str, verb: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    emulator = RaiEmulator(unknown_fields=True, cohorts=4, sessions_per_cohort=30)
    first_cohort = emulator.cohort_ids()[0]
    monkeypatch.setenv("FAILOPEN_RAI_CLIENT_ID", emulator.client_id)
    monkeypatch.setenv("FAILOPEN_RAI_CLIENT_SECRET", emulator.client_secret)
    monkeypatch.setattr(rai_cli, "Client",
                        functools.partial(Client, transport=emulator.transport()))  # fmt: skip
    refuse_models(monkeypatch)
    parser = argparse.ArgumentParser()
    rai_cli.register_rai(parser.add_subparsers())
    start, end = emulator.data_window
    where = [first_cohort] if verb == "cohort-sessions" else [
        "--from", start, "--to", end, "--public-key", emulator.public_keys[0]]
    out = tmp_path / f"export.{fmt}"
    args = parser.parse_args(["rai", verb, *where, "--format", fmt, "--page-size", "7",
                              "--base-url", "https://rai.test", "--out", str(out)])  # fmt: skip
    assert args.func(args) == 0
    if fmt == "jsonl" and verb != "cohorts":
        expected = list(emulator.iter_session_records(
            first_cohort if verb == "cohort-sessions" else None))
        assert [json.loads(line) for line in out.read_text().splitlines()] == expected
    else:
        assert out.read_text().count("\n") > 1


# --- closing the client waits for a page fetched ahead -----------------------------------------


class HeldSecondPage(Service):
    """Page 1 is held until released: the page fetched ahead is still on its way."""

    def __init__(self) -> None:
        super().__init__(3)
        self.release = threading.Event()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("page_token") == "1":
            self.note("request", 1)
            self.release.wait(5)
            return page("sessions", sessions(1), token="2")
        return super().__call__(request)


def test_closing_the_client_waits_for_the_page_fetched_ahead() -> None:
    # A request still running when the pool closes may open a connection that nothing closes
    # (a ResourceWarning, seen in CI, or a socket held until garbage collection).
    service = HeldSecondPage()
    client, _ = make_client(FakeRai(service), timeout=5.0)
    pages = client.iter_session_pages(START, END, ["PK"], raw=True)
    next(pages)
    assert service.wait_for_request(1)
    pages.close()  # the consumer stops; the fetch of page 1 goes on
    threading.Timer(0.2, service.release.set).start()
    client.close()
    assert not [t for t in threading.enumerate() if t.name == "failopen.rai.prefetch"]

