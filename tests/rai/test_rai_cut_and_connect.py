"""Issue 32 item 7, leftovers: a 2xx answer cut just after an inner ``}`` is asked for again like
any cut-off answer, and connect time-outs to a host are one warning per run, not one per attempt.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from _rai_fake import FakeRai, make_async_client, make_client

from failopen.rai import InvalidResponse, RaiTransportError
from failopen.rai._failures import cut_short

START = datetime(2024, 5, 1, tzinfo=timezone.utc)
END = START + timedelta(days=7)
COHORT = {"cohort_id": "c1", "public_key": "PK", "cohort_window_start": "2024-05-02T00:00:00Z",
          "verify": {"solved": True}}  # fmt: skip


def _brace_cut(body: bytes) -> bytes:
    """``body`` cut just after its last inner ``}``: it still ends with one."""
    return body[: body.rfind(b"}", 0, len(body) - 1) + 1]


class CutFirst:
    """Answers ``answer`` (a JSON object), cut just after an inner ``}`` the first ``times``."""

    def __init__(self, answer: dict[str, Any], times: int) -> None:
        self.body = json.dumps(answer, separators=(",", ":")).encode()
        self.times = times
        self.calls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        body = _brace_cut(self.body) if self.calls <= self.times else self.body
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})


def test_a_body_cut_after_an_inner_brace_ends_with_one_and_is_told_cut_short() -> None:
    body = json.dumps({"cohorts": [COHORT, COHORT], "next_page_token": ""}).encode()
    cut = _brace_cut(body)
    assert cut.endswith(b"}") and len(cut) < len(body)
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads(cut)
    assert cut_short(info.value)
    with pytest.raises(json.JSONDecodeError) as bad:  # broken in its middle: not a cut
        json.loads(body.replace(b":", b";", 1))
    assert not cut_short(bad.value)


@pytest.mark.parametrize("prefetch", [True, False])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_page_cut_after_an_inner_brace_is_asked_for_again(
    prefetch: bool, asynchronous: bool, caplog: pytest.LogCaptureFixture
) -> None:
    service = CutFirst({"cohorts": [COHORT, {**COHORT, "cohort_id": "c2"}],
                        "schema_version": "rai-v1"}, times=2)  # fmt: skip
    if asynchronous:
        aclient, sleeps = make_async_client(FakeRai(service), prefetch=prefetch)

        async def listing() -> list[str]:
            return [c.cohort_id async for c in aclient.iter_cohorts(START, END, ["PK"])]

        got = asyncio.run(listing())
    else:
        client, sleeps = make_client(FakeRai(service), prefetch=prefetch)
        got = [c.cohort_id for c in client.iter_cohorts(START, END, ["PK"])]
    assert got == ["c1", "c2"]
    assert service.calls == 3 and len(sleeps) == 2  # waited as before any retry
    assert sum("incomplete_answer" in r.getMessage() for r in caplog.records) == 2


def test_a_page_cut_every_time_fails_after_the_attempts_as_incomplete_answer() -> None:
    service = CutFirst({"cohorts": [COHORT], "schema_version": "rai-v1"}, times=100)
    client, _ = make_client(FakeRai(service), max_attempts=3)
    with pytest.raises(RaiTransportError) as info:
        list(client.iter_cohorts(START, END, ["PK"]))
    assert info.value.code == "incomplete_answer" and "after 3 attempts" in str(info.value)
    assert service.calls == 3


def test_a_cohort_cut_after_an_inner_brace_is_asked_for_again() -> None:
    service = CutFirst(COHORT, times=1)
    client, sleeps = make_client(FakeRai(service))
    assert client.get_cohort("c1").cohort_id == "c1"
    assert service.calls == 2 and len(sleeps) == 1


def test_a_body_broken_in_its_middle_is_still_an_invalid_response_not_retried() -> None:
    service = CutFirst({"cohorts": [COHORT]}, times=0)
    service.body = service.body.replace(b'"cohort_id":', b'"cohort_id";', 1)
    client, _ = make_client(FakeRai(service))
    with pytest.raises(InvalidResponse, match="not valid JSON"):
        list(client.iter_cohorts(START, END, ["PK"]))
    assert service.calls == 1


# --- connect time-outs ------------------------------------------------------------------------


def _timing_out(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectTimeout("timed out", request=request)


def test_connect_time_outs_to_a_host_warn_once_per_run(caplog: pytest.LogCaptureFixture) -> None:
    client, sleeps = make_client(FakeRai(_timing_out), max_attempts=4)
    caplog.set_level(logging.DEBUG, logger="failopen.rai")
    for _ in range(3):  # three listings (windows, cohorts, keys): 12 attempts in all
        with pytest.raises(RaiTransportError) as info:
            list(client.iter_cohorts(START, END, ["PK"]))
        assert "ConnectTimeout (rai.test:443)" in str(info.value)
        assert "after 4 attempts" in str(info.value)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "rai.test:443" in warnings[0] and "time-outs" in warnings[0]
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 9 and len(sleeps) >= 9  # still retried, and said at DEBUG


def test_other_transport_failures_still_warn_on_each_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def reading_times_out(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    client, _ = make_client(FakeRai(reading_times_out), max_attempts=3)
    with pytest.raises(RaiTransportError):
        list(client.iter_cohorts(START, END, ["PK"]))
    assert sum(r.levelno == logging.WARNING for r in caplog.records) == 2
