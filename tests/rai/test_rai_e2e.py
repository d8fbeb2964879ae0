"""The client against the emulator of the test kit: every endpoint, end to end."""

from __future__ import annotations

from typing import Any

import pytest

from failopen.rai import AsyncClient, Client, Forbidden, NotFound, Unauthorized
from failopen.testing.rai_emulator import RaiEmulator

KEY = "pk_live_test"


def client_for(emulator: RaiEmulator, **kwargs: Any) -> tuple[Client, list[float]]:
    sleeps: list[float] = []
    client = Client("https://rai.test", emulator.client_id, emulator.client_secret,
                    transport=emulator.transport(), sleep=sleeps.append, **kwargs)
    return client, sleeps


def test_every_cohort_and_session_comes_back_exactly_once() -> None:
    emulator = RaiEmulator(cohorts=6, sessions_per_cohort=(5, 30), unknown_fields=True)
    start, end = emulator.data_window
    client, _ = client_for(emulator)
    with client:
        cohorts = list(client.iter_cohorts(start, end, [KEY], page_size=4))
        assert [c.cohort_id for c in cohorts] == emulator.cohort_ids()
        expected = [emulator.cohort_record(i) for i in emulator.cohort_ids()]
        assert [c.raw for c in cohorts] == expected
        sessions = list(client.iter_sessions(start, end, [KEY], page_size=17))
        assert [s.raw for s in sessions] == list(emulator.iter_session_records())
        first = cohorts[0].cohort_id
        assert first is not None
        assert client.get_cohort(first).raw == emulator.cohort_record(first)
        mine = list(client.iter_cohort_sessions(first, page_size=7))
        assert [s.raw for s in mine] == list(emulator.iter_session_records(first))
    assert emulator.authorize_calls == 1


def test_a_window_over_30_days_is_split_without_duplicates() -> None:
    emulator = RaiEmulator(cohorts=9, sessions_per_cohort=3, span_days=75)
    start, end = emulator.data_window
    client, _ = client_for(emulator)
    cohorts = [c.cohort_id for c in client.iter_cohorts(start, end, [KEY], page_size=2)]
    assert cohorts == emulator.cohort_ids()
    sessions = [s.raw for s in client.iter_sessions(start, end, [KEY])]
    assert sessions == list(emulator.iter_session_records())


def test_server_errors_and_expired_tokens_are_ridden_through() -> None:
    emulator = RaiEmulator(cohorts=4, sessions_per_cohort=20, fail_every=3)
    start, end = emulator.data_window
    client, sleeps = client_for(emulator)
    got = []
    for i, session in enumerate(client.iter_sessions(start, end, [KEY], page_size=10)):
        got.append(session.raw)
        if i == 25:
            emulator.expire_tokens()
    assert got == list(emulator.iter_session_records())
    assert sleeps, "the emulator's 500s should have been retried"
    assert emulator.authorize_calls == 2


def test_spec_errors_reach_the_caller_typed() -> None:
    emulator = RaiEmulator(cohorts=2)
    start, end = emulator.data_window
    client, _ = client_for(emulator)
    with pytest.raises(NotFound) as missing:
        client.get_cohort("coh_000000000000")
    assert missing.value.code == "not_found" and missing.value.request_id
    with pytest.raises(Forbidden) as forbidden:
        list(client.iter_cohorts(start, end, [KEY, "pk_someone_else"]))
    assert forbidden.value.code == "forbidden_public_key"
    wrong = Client("https://rai.test", emulator.client_id, "wrong-secret",
                   transport=emulator.transport())
    with pytest.raises(Unauthorized) as refused:
        wrong.get_cohort("coh_000000000000")
    assert refused.value.code == "unauthorized"


def test_over_a_real_socket() -> None:
    emulator = RaiEmulator(cohorts=3, sessions_per_cohort=12)
    start, end = emulator.data_window
    with emulator.serve() as server, Client(
        server.url, emulator.client_id, emulator.client_secret, timeout=10
    ) as client:
        sessions = [s.raw for s in client.iter_sessions(start, end, [KEY], page_size=5)]
    assert sessions == list(emulator.iter_session_records())


@pytest.mark.anyio
async def test_async_client_end_to_end() -> None:
    emulator = RaiEmulator(cohorts=5, sessions_per_cohort=(5, 25), fail_every=4, span_days=50)
    start, end = emulator.data_window
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with AsyncClient("https://rai.test", emulator.client_id, emulator.client_secret,
                           transport=emulator.transport(), sleep=sleep) as client:
        cohorts = [c.cohort_id async for c in client.iter_cohorts(start, end, [KEY])]
        sessions = [s.raw async for s in client.iter_sessions(start, end, [KEY], page_size=9)]
    assert cohorts == emulator.cohort_ids()
    assert sessions == list(emulator.iter_session_records())
    assert sleeps
