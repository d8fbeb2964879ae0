from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from _rai_fake import (
    BASE,
    CLIENT_ID,
    SECRET,
    FakeRai,
    bearer,
    envelope,
    make_async_client,
    page,
    token_value,
)

from failopen.rai import (
    AsyncClient,
    BadRequest,
    Forbidden,
    InvalidResponse,
    NotFound,
    RaiError,
    RaiTransportError,
    RaiValidationError,
    ServerError,
    Unauthorized,
)

pytestmark = pytest.mark.anyio

START = datetime(2024, 5, 1, tzinfo=timezone.utc)
END = START + timedelta(days=7)
COHORT = {"cohort_id": "coh_1", "session_count": 3}


def cohort_ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=COHORT)


async def test_list_cohorts_sends_every_filter() -> None:
    fake = FakeRai(lambda r: page("cohorts", [COHORT]))
    client, _ = make_async_client(fake)
    async with client:
        got = [c.cohort_id async for c in client.iter_cohorts(
            START, END, ["PK-1", "PK-2"], cohort_id="coh_1", anomaly_id=7, telltale_id=4101,
            min_session_count=10, page_size=50)]
    assert got == ["coh_1"]
    assert fake.requests[0].url.path == "/api/rai/v1/cohorts"
    assert fake.params == [[
        ("from", "2024-05-01T00:00:00Z"), ("to", "2024-05-08T00:00:00Z"),
        ("public_key", "PK-1"), ("public_key", "PK-2"), ("cohort_id", "coh_1"),
        ("anomaly_id", "7"), ("telltale_id", "4101"), ("min_session_count", "10"),
        ("page_size", "50"),
    ]]
    assert bearer(fake.requests[0]) == token_value(1)
    assert client._http.is_closed


async def test_every_endpoint() -> None:
    def data(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.url.raw_path == b"/api/rai/v1/cohorts/coh%2F1":
            return httpx.Response(200, json=COHORT)
        if path.endswith("/sessions"):
            return page("sessions", [{"session_id": path}])
        return page("cohorts", [])

    fake = FakeRai(data)
    client, _ = make_async_client(fake)
    assert (await client.get_cohort("coh/1")).session_count == 3
    cohort_sessions = [s.session_id async for s in client.iter_cohort_sessions("c", page_size=5)]
    assert cohort_sessions == ["/api/rai/v1/cohorts/c/sessions"]
    sessions = [s.session_id async for s in client.iter_sessions(
        START, END, ["PK"], cohort_id="c", anomaly_id=1, telltale_id=2, page_size=3)]
    assert sessions == ["/api/rai/v1/sessions"]
    assert fake.params[1] == [("page_size", "5")]
    assert fake.params[2][2:] == [("public_key", "PK"), ("cohort_id", "c"), ("anomaly_id", "1"),
                                  ("telltale_id", "2"), ("page_size", "3")]
    pages = [p async for p in client.iter_cohort_session_pages("c")]
    assert [p.next_page_token for p in pages] == [None]
    cohort_pages = [p async for p in client.iter_cohort_pages(START, END, ["PK"])]
    assert cohort_pages[0].schema_version == "rai-v1"
    session_pages = [p async for p in client.iter_session_pages(START, END, ["PK"])]
    assert len(session_pages) == 1
    await client.aclose()


async def test_validation_happens_before_any_request() -> None:
    fake = FakeRai()
    client, _ = make_async_client(fake)
    with pytest.raises(RaiValidationError, match="between 1 and 1000"):
        client.iter_sessions(START, END, ["PK"], page_size=0)
    with pytest.raises(RaiValidationError, match="naive"):
        client.iter_cohorts(datetime(2024, 5, 1), END, ["PK"])
    with pytest.raises(RaiValidationError, match="at least one"):
        client.iter_cohort_pages(START, END, [])
    with pytest.raises(RaiValidationError):
        await client.get_cohort("..")
    assert fake.requests == [] and fake.auth_calls == 0
    with pytest.raises(RaiValidationError, match="plain http"):
        AsyncClient("http://rai.example.com", CLIENT_ID, SECRET)


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [(400, "invalid_window", BadRequest), (403, "forbidden_public_key", Forbidden),
     (404, "not_found", NotFound), (500, "internal", ServerError)],
)
async def test_errors_map_to_their_class(status: int, code: str, cls: type[RaiError]) -> None:
    fake = FakeRai(lambda r: envelope(status, code, "msg", "req-9"))
    client, sleeps = make_async_client(fake, max_attempts=3)
    with pytest.raises(cls) as info:
        [c async for c in client.iter_cohorts(START, END, ["PK"])]
    assert (info.value.status_code, info.value.code, info.value.request_id) == (
        status, code, "req-9")
    assert len(fake.requests) == (3 if status == 500 else 1)
    assert len(sleeps) == (2 if status == 500 else 0)


async def test_retries_use_the_async_sleep_with_jitter_and_retry_after() -> None:
    answers = [envelope(500, "internal"), httpx.ConnectError("refused"),
               envelope(503, "internal", headers={"Retry-After": "4"})]

    def data(request: httpx.Request) -> httpx.Response:
        if answers:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return httpx.Response(200, json=COHORT)

    fake = FakeRai(data)
    client, sleeps = make_async_client(fake, backoff_base=0.25)
    assert (await client.get_cohort("c")).cohort_id == "coh_1"
    assert len(fake.requests) == 4
    assert 0 <= sleeps[0] <= 0.25 and 0 <= sleeps[1] <= 0.5 and sleeps[2] == 4.0


async def test_transport_errors_after_the_last_attempt() -> None:
    def data(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    fake = FakeRai(data)
    client, sleeps = make_async_client(fake, max_attempts=2)
    with pytest.raises(RaiTransportError, match=r"ConnectError \(rai\.test:443\): refused"):
        await client.get_cohort("c")
    assert len(sleeps) == 1


async def test_a_401_refreshes_once_and_retries_once() -> None:
    def data(request: httpx.Request) -> httpx.Response:
        if bearer(request) == token_value(1):
            return envelope(401, "unauthorized")
        return httpx.Response(200, json=COHORT)

    fake = FakeRai(data)
    client, _ = make_async_client(fake)
    assert (await client.get_cohort("c")).cohort_id == "coh_1"
    assert [bearer(r) for r in fake.requests] == [token_value(1), token_value(2)]
    fake.data = lambda r: envelope(401, "unauthorized", request_id="r-x")
    with pytest.raises(Unauthorized) as info:
        await client.get_cohort("c")
    assert info.value.request_id == "r-x"
    assert fake.auth_calls == 3 and len(fake.requests) == 4


async def test_unauthorized_on_authorize_is_not_retried() -> None:
    fake = FakeRai(cohort_ok, authorize=lambda r: envelope(401, "unauthorized"))
    client, sleeps = make_async_client(fake)
    with pytest.raises(Unauthorized):
        await client.get_cohort("c")
    assert fake.auth_calls == 1 and sleeps == [] and fake.requests == []


async def test_token_expiry_follows_the_injected_timer() -> None:
    now = {"t": 0.0}
    fake = FakeRai(cohort_ok, expires_in=600)
    client, _ = make_async_client(fake, timer=lambda: now["t"])
    await client.get_cohort("c")
    now["t"] = 539.0  # 600 - min(60, 10%) = 540
    await client.get_cohort("c")
    assert fake.auth_calls == 1
    now["t"] = 541.0
    await client.get_cohort("c")
    assert fake.auth_calls == 2


async def test_twenty_tasks_share_one_authorize() -> None:
    fake = FakeRai(cohort_ok, auth_delay=0.02)
    client, _ = make_async_client(fake)
    results = await asyncio.gather(*(client.get_cohort("c") for _ in range(20)))
    assert [c.cohort_id for c in results] == ["coh_1"] * 20
    assert fake.auth_calls == 1


async def test_twenty_tasks_refused_at_once_refresh_once() -> None:
    fake = FakeRai(cohort_ok, auth_delay=0.01)
    client, _ = make_async_client(fake)
    await client.get_cohort("c")

    def data(request: httpx.Request) -> httpx.Response:
        if bearer(request) == token_value(1):
            return envelope(401, "unauthorized")
        return httpx.Response(200, json=COHORT)

    fake.data = data
    await asyncio.gather(*(client.get_cohort("c") for _ in range(20)))
    assert fake.auth_calls == 2


async def test_malformed_answer() -> None:
    fake = FakeRai(lambda r: httpx.Response(200, content=b"<html>"))
    client, sleeps = make_async_client(fake)
    with pytest.raises(InvalidResponse, match="not valid JSON"):
        await client.get_cohort("c")
    assert sleeps == []


async def test_no_secret_in_reprs_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake = FakeRai(lambda r: envelope(500, "internal", f"echo {bearer(r)} {SECRET}"))
    client, _ = make_async_client(fake, max_attempts=2)
    with pytest.raises(ServerError) as info:
        await client.get_cohort("c")
    for text in (str(info.value), repr(info.value), repr(client), repr(client.auth), caplog.text):
        assert SECRET not in text and token_value(1) not in text
    assert "[redacted]" in str(info.value)
    assert repr(client) == f"AsyncClient(base_url='{BASE}', client_id='{CLIENT_ID}')"


# --- pagination and prefetch ------------------------------------------------------------------


class Pages:
    """Serves ``n`` one-record pages, notes the order of requests, can fail one page."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n = n
        self.fail_at = fail_at
        self.requested: list[int] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        token = request.url.params.get("page_token")
        index = 0 if token is None else int(token)
        self.requested.append(index)
        if index == self.fail_at:
            return envelope(404, "not_found")
        nxt = str(index + 1) if index + 1 < self.n else ""
        return page("cohorts", [{"cohort_id": f"c{index}"}], token=nxt)


async def settle() -> None:
    for _ in range(20):  # let a prefetch task run as far as it is allowed to
        await asyncio.sleep(0)


async def test_prefetch_is_one_page_ahead_at_most() -> None:
    service = Pages(5)
    client, _ = make_async_client(FakeRai(service))
    seen = []
    async for cohort in client.iter_cohorts(START, END, ["PK"]):
        seen.append(cohort.cohort_id)
        await settle()
        index = len(seen) - 1
        assert max(service.requested) == min(index + 1, 4)
    assert seen == [f"c{i}" for i in range(5)]
    assert service.requested == [0, 1, 2, 3, 4]


async def test_without_prefetch_nothing_is_fetched_ahead() -> None:
    service = Pages(3)
    client, _ = make_async_client(FakeRai(service), prefetch=False)
    index = 0
    async for _cohort in client.iter_cohorts(START, END, ["PK"]):
        await settle()
        assert service.requested == list(range(index + 1))
        index += 1


@pytest.mark.parametrize("prefetch", [True, False])
async def test_a_failed_page_raises_where_it_is_consumed(prefetch: bool) -> None:
    service = Pages(5, fail_at=2)
    client, _ = make_async_client(FakeRai(service), prefetch=prefetch)
    pages = client.iter_cohort_pages(START, END, ["PK"])
    first = await pages.__anext__()
    await settle()
    second = await pages.__anext__()
    await settle()
    with pytest.raises(NotFound):
        await pages.__anext__()
    assert [first.items[0].cohort_id, second.items[0].cohort_id] == ["c0", "c1"]
    assert 3 not in service.requested


async def test_closing_early_cancels_the_prefetch_task() -> None:
    gate = asyncio.Event()
    started: list[int] = []

    async def slow(request: httpx.Request) -> httpx.Response:
        token = request.url.params.get("page_token")
        index = 0 if token is None else int(token)
        started.append(index)
        if index > 0:
            await gate.wait()  # page 1 never finishes on its own
        return page("cohorts", [{"cohort_id": f"c{index}"}], token=str(index + 1))

    async def authorize_then(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/authorize"):
            return httpx.Response(200, json={"access_token": "t", "expires_in": 60})
        return await slow(request)

    client = AsyncClient(BASE, CLIENT_ID, SECRET,
                         transport=httpx.MockTransport(authorize_then))
    baseline = asyncio.all_tasks()
    pages = client.iter_cohort_pages(START, END, ["PK"])
    await pages.__anext__()
    await settle()
    assert started == [0, 1]
    (prefetch,) = asyncio.all_tasks() - baseline
    assert not prefetch.done()
    await pages.aclose()
    await settle()
    assert prefetch.cancelled()
    assert started == [0, 1]
    await client.aclose()


async def test_long_windows_are_split_and_deduplicated() -> None:
    def data(request: httpx.Request) -> httpx.Response:
        own = request.url.params["from"][:10]
        return page("sessions", [{"session_id": "edge", "cohort_id": "c"},
                                 {"session_id": own, "cohort_id": "c"}])

    fake = FakeRai(data)
    client, _ = make_async_client(fake)
    got = [s.session_id async for s in client.iter_sessions(
        START, START + timedelta(days=61), ["PK"])]
    assert got == ["edge", "2024-05-01", "2024-05-31", "2024-06-30"]
    assert [dict(p)["to"] for p in fake.params] == [
        "2024-05-31T00:00:00Z", "2024-06-30T00:00:00Z", "2024-07-01T00:00:00Z"]


async def test_a_repeated_token_stops_the_iteration() -> None:
    fake = FakeRai(lambda r: page("cohorts", [], token="again"))
    client, _ = make_async_client(fake)
    with pytest.raises(InvalidResponse):
        [c async for c in client.iter_cohorts(START, END, ["PK"])]
    assert len(fake.requests) == 2

