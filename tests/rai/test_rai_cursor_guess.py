"""The next request leaves as soon as an answer arrives, its cursor read from the raw bytes; a
misread cursor costs one dropped answer, never a wrong page."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from _rai_fake import FakeRai, envelope, make_client, page
from _rai_fake import misleading_pages as _misleading
from _sync_helpers import SECRET, cli_runner
from test_rai_page_pipeline import Service

from failopen.rai import Client
from failopen.rai._output import limit_malloc_arenas
from failopen.rai._pager import Pager, peek_cursor
from failopen.rai._pipeline import Pipeline
from failopen.testing.rai_emulator import RaiEmulator

START = datetime(2024, 5, 1, tzinfo=timezone.utc)
END = START + timedelta(days=7)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"sessions":[{"a":1}],"next_page_token":"tok_1","schema_version":"rai-v1"}', "tok_1"),
        (b'{"sessions":[],"next_page_token" : \n "tok 2"}', "tok 2"),
        (b'{"sessions":[],"next_page_token":""}', ""),
        (b'{"sessions":[],"next_page_token":null}', ""),
        (b'{"sessions":[]}', ""),  # no cursor: the last page
        (b'{"sessions":[],"next_page_token":"a\\"b"}', None),  # escapes: left to the decoder
        (b'{"sessions":[],"next_page_token":7}', None),
        (b'{"sessions":[],"next_page_token"', None),
        (b'{"sessions":[],"next_page_token":"\xff"}', None),
    ],
)
def test_the_cursor_is_read_from_the_raw_answer(content: bytes, expected: str | None) -> None:
    assert peek_cursor(content) == expected


def test_the_next_request_leaves_before_the_answer_is_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = 4
    service = Service(n)
    decoded = []
    real = Pager.decode

    def decode(self: Pager[Any], content: bytes) -> Any:
        index = len(decoded)
        if index + 1 < n:  # decoded before page index + 1 was asked for: the old order
            assert service.wait_for_request(index + 1), f"page {index + 1} waited for the decode"
        decoded.append(index)
        return real(self, content)

    monkeypatch.setattr(Pager, "decode", decode)
    client, _ = make_client(FakeRai(service))
    pages = list(client.iter_session_pages(START, END, ["PK"], raw=True))
    assert [p.items[0]["session_id"] for p in pages] == [f"s{i}-0" for i in range(n)]
    assert service.requested() == list(range(n))



@pytest.mark.parametrize("raw", [True, False])
def test_a_misread_cursor_costs_a_dropped_answer_not_a_wrong_page(raw: bool) -> None:
    fake = FakeRai(_misleading)
    client, sleeps = make_client(fake)
    pages = list(client.iter_session_pages(START, END, ["PK"], raw=raw))
    ids = [[r["session_id"] if raw else r.session_id for r in p.items] for p in pages]
    assert ids == [["s0"], ["s1"], ["s2"]]
    sent = [r.url.params.get("page_token") for r in fake.requests]
    assert "decoy" in sent  # the guess was really made, and its 400 dropped
    assert [t for t in sent if t != "decoy"] == [None, "1", "2"]
    assert sleeps == []  # a wrong guess is no reason to back off


def test_a_wrong_guess_that_fails_is_neither_retried_nor_a_reason_to_back_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dropped = [0]  # guesses found wrong (or pipelines closed) so far
    cond = threading.Condition()

    def counting(real: Any) -> Any:
        def method(self: Pipeline, *args: Any) -> None:
            real(self, *args)
            with cond:
                dropped[0] += 1
                cond.notify_all()

        return method

    monkeypatch.setattr(Pipeline, "redirect", counting(Pipeline.redirect))
    monkeypatch.setattr(Pipeline, "close", counting(Pipeline.close))

    def data(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("page_token") == "decoy":
            # Fails once the consumer has found the guess wrong (at the latest): a retry would
            # hold back every thread of the client, for an answer nobody wants.
            with cond:
                seen = dropped[0]
                cond.wait_for(lambda: dropped[0] > seen, timeout=1)
            return envelope(503, "unavailable")
        return _misleading(request)

    fake = FakeRai(data)
    client, sleeps = make_client(fake, max_attempts=4)
    pages = list(client.iter_session_pages(START, END, ["PK"], raw=True))
    assert [p.items[0]["session_id"] for p in pages] == ["s0", "s1", "s2"]
    sent = [r.url.params.get("page_token") for r in fake.requests]
    assert sent.count("decoy") == 1  # tried once, never retried, never guessed again
    assert sleeps == [] and client.paused_for() == 0


def test_closing_after_a_guess_sends_nothing_more() -> None:
    calls = []

    def data(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.params.get("page_token"))
        return page("sessions", [{"session_id": "s"}], token=f"t{len(calls)}")

    client, _ = make_client(FakeRai(data))
    pages = client.iter_session_pages(START, END, ["PK"], raw=True)
    next(pages)
    deadline = time.monotonic() + 5
    while len(calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    pages.close()
    time.sleep(0.05)  # a runaway fetching thread would send t2 now
    assert calls == [None, "t1"]


def test_parallel_windows_send_their_next_request_before_decoding(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    emulator = RaiEmulator(client_secret=SECRET, cohorts=6, sessions_per_cohort=30)
    real = Pager.decode
    early = []

    def sent(token: str) -> bool:
        return any(r.query.get("page_token") == [token] for r in list(emulator.history))

    def decode(self: Pager[Any], content: bytes) -> Any:
        token = peek_cursor(content)
        if token:
            deadline = time.monotonic() + 5
            while not sent(token) and time.monotonic() < deadline:
                time.sleep(0.001)
            early.append(sent(token))
        return real(self, content)

    monkeypatch.setattr(Pager, "decode", decode)
    start, end = emulator.data_window
    with emulator.serve() as server:
        rai = cli_runner(monkeypatch, server.url, capsysbinary)
        run = rai("rai", "sessions", "--base-url", server.url, "--from", start, "--to", end,
                  "--public-key", "pk_live_test", "--page-size", "7",
                  "--parallel", "4")  # fmt: skip
        assert run.code == 0
    assert len(run.out.splitlines()) == emulator.total_sessions
    assert early and all(early)


def test_the_cli_caps_malloc_arenas_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert limit_malloc_arenas() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    import platform

    expected = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert limit_malloc_arenas() is expected


def test_a_pipeline_never_runs_two_requests_at_once() -> None:
    active = []
    peak = [0]
    lock = threading.Lock()

    def data(request: httpx.Request) -> httpx.Response:
        with lock:
            active.append(1)
            peak[0] = max(peak[0], len(active))
        time.sleep(0.002)
        with lock:
            active.pop()
        return _misleading(request)

    client, _ = make_client(FakeRai(data))
    for _ in range(5):
        list(client.iter_session_pages(START, END, ["PK"], raw=True))
    assert peak[0] == 1



@pytest.mark.parametrize("verb", ["sessions", "sync"])
def test_parallel_n_never_has_more_than_n_requests_on_the_wire(
    verb: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:  # fmt: skip
    # N + 1 windows or cohorts may be under way (one finishing its last page), never N + 1
    # requests at once.
    emulator = RaiEmulator(client_secret=SECRET, cohorts=12, sessions_per_cohort=40, latency=0.003)
    active, peak, lock = [0], [0], threading.Lock()
    real = emulator.handler

    def handler(request: Any) -> Any:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            return real(request)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(emulator, "handler", handler)
    start, end = emulator.data_window
    with emulator.serve() as server:
        rai = cli_runner(monkeypatch, server.url, capsysbinary)
        common = ["--base-url", server.url, "--public-key", "pk_live_test", "--page-size", "9",
                  "--parallel", "3"]  # fmt: skip
        if verb == "sessions":
            argv = ["sessions", "--from", start, "--to", end, *common]
        else:
            argv = ["sync", "--since", start, "--until", end, "--state",
                    str(tmp_path / "state.json"), "--out-dir", str(tmp_path), *common]  # fmt: skip
        assert rai("rai", *argv).code == 0
    assert peak[0] == 3


def test_max_in_flight_is_checked() -> None:
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match="max_in_flight"):
            Client("https://rai.test", "id", "secret", max_in_flight=bad)  # type: ignore[arg-type]
