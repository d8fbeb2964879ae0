"""What the AsyncClient gained when it became the source of the generated Client: the same
``max_in_flight``, ``export_pages``, shared backoff and guessed next request."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from _rai_fake import BASE, CLIENT_ID, SECRET, FakeRai, make_async_client, page
from _rai_fake import misleading_pages as _misleading

from failopen.rai import AsyncClient, RaiValidationError
from failopen.rai._pager import SLIM_FIELDS, Pager, sessions_pager

pytestmark = pytest.mark.anyio

START = datetime(2024, 5, 1, tzinfo=timezone.utc)
END = START + timedelta(days=7)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
async def test_max_in_flight_is_checked(bad: object) -> None:
    with pytest.raises(RaiValidationError, match="max_in_flight must be an int >= 1"):
        AsyncClient(BASE, CLIENT_ID, SECRET, max_in_flight=bad)  # type: ignore[arg-type]


async def test_max_in_flight_caps_the_requests_on_the_wire() -> None:
    on_the_wire = [0]
    most = [0]

    async def data(request: httpx.Request) -> httpx.Response:
        on_the_wire[0] += 1
        most[0] = max(most[0], on_the_wire[0])
        for _ in range(5):
            await asyncio.sleep(0)
        on_the_wire[0] -= 1
        return httpx.Response(200, json={"cohort_id": request.url.path.rsplit("/", 1)[-1]})

    fake = FakeRai()

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/authorize"):
            return await fake.handle_async(request)
        return await data(request)

    client = AsyncClient(BASE, CLIENT_ID, SECRET, transport=httpx.MockTransport(handle),
                         max_in_flight=2)  # fmt: skip
    async with client:
        got = await asyncio.gather(*(client.get_cohort(f"c{i}") for i in range(6)))
    assert [c.cohort_id for c in got] == [f"c{i}" for i in range(6)]
    assert most[0] == 2


async def test_one_tasks_backoff_holds_back_the_others() -> None:
    fake = FakeRai(lambda r: httpx.Response(200, json={"cohort_id": "c"}))
    client, sleeps = make_async_client(fake)
    client.pause(5.0)  # as a retrying request of another task does
    await client.get_cohort("c")
    assert len(sleeps) == 1 and 4.0 < sleeps[0] <= 5.0


@pytest.mark.parametrize("prefetch", [True, False])
async def test_export_pages_slim_keeps_the_text_and_the_ids(prefetch: bool) -> None:
    records = [{"session_id": f"s{i}", "cohort_id": "c", "session_created": "2024-05-02T00:00Z",
                "risk_score": 0.5, "future": {"x": [1]}} for i in range(3)]  # fmt: skip
    content = json.dumps({"sessions": records}, separators=(",", ":")).encode()
    client, _ = make_async_client(FakeRai(lambda r: httpx.Response(200, content=content)),
                                  prefetch=prefetch)  # fmt: skip
    pager = sessions_pager(START, END, ["PK"], cohort_id=None, anomaly_id=None, telltale_id=None,
                           page_size=None)  # fmt: skip
    pages = [p async for p in client.export_pages(pager, slim=True)]
    (only,) = pages
    assert [json.loads(line) for line in only.lines or []] == records
    assert [set(r) for r in only.items] == [set(SLIM_FIELDS["sessions"])] * 3



async def test_the_next_request_leaves_before_the_answer_is_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = 4
    sent: list[int] = []
    sent_at_decode: list[int] = []
    real = Pager.decode

    def decode(self: Pager[Any], content: bytes) -> Any:
        sent_at_decode.append(len(sent))
        return real(self, content)

    def data(request: httpx.Request) -> httpx.Response:
        index = int(request.url.params.get("page_token") or 0)
        sent.append(index)
        return page("sessions", [{"session_id": f"s{index}", "cohort_id": "c"}],
                    token=str(index + 1) if index + 1 < n else "")  # fmt: skip

    monkeypatch.setattr(Pager, "decode", decode)
    client, _ = make_async_client(FakeRai(data))
    got = [p.items[0]["session_id"] async for p in client.iter_session_pages(
        START, END, ["PK"], raw=True)]  # fmt: skip
    assert got == [f"s{i}" for i in range(n)]
    assert sent == list(range(n))
    # Page i is decoded once request i + 1 has left (read from its raw cursor): not after.
    assert sent_at_decode == [min(i + 2, n) for i in range(n)]


@pytest.mark.parametrize("raw", [True, False])
async def test_a_misread_cursor_costs_a_dropped_answer_not_a_wrong_page(raw: bool) -> None:
    fake = FakeRai(_misleading)
    client, sleeps = make_async_client(fake)
    pages = [p async for p in client.iter_session_pages(START, END, ["PK"], raw=raw)]
    ids = [[r["session_id"] if raw else r.session_id for r in p.items] for p in pages]
    assert ids == [["s0"], ["s1"], ["s2"]]
    sent = [r.url.params.get("page_token") for r in fake.requests]
    assert "decoy" in sent  # the guess was really made, and its 400 dropped
    assert [t for t in sent if t != "decoy"] == [None, "1", "2"]
    assert sleeps == []  # a wrong guess is no reason to back off
