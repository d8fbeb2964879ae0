"""A service that never reaches a last page ends every ``rai`` run with a clear error, bounded.

Issue 18, item 2: an API answering each list request with an empty page and a fresh
``next_page_token`` kept ``failopen rai sessions`` and ``rai sync`` running forever (sync holding
its lock). Two bounds end such a run: :data:`MAX_EMPTY_PAGES` empty pages in a row that still
carry a token, and ``max_pages`` pages in one window (``--max-pages``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _hostile import EndlessPages, run_cli
from _sync_helpers import KEY, SECRET, assert_exactly_once, manifests

from failopen.rai import AsyncClient, Client, InvalidResponse
from failopen.rai._pager import DEFAULT_MAX_PAGES, MAX_EMPTY_PAGES
from failopen.testing._server import FakeRequest, LoopbackServer, Reply, as_transport
from failopen.testing.rai_emulator import RaiEmulator

SINCE, UNTIL = "2024-05-01T00:00:00Z", "2024-06-01T00:00:00Z"


@pytest.fixture
def emulator() -> RaiEmulator:
    return RaiEmulator(client_secret=SECRET, cohorts=6, sessions_per_cohort=(5, 15))


def window(emulator: RaiEmulator) -> list[str]:
    start, end = emulator.data_window
    return ["--from", start, "--to", end, "--public-key", KEY]


def test_the_documented_bounds() -> None:
    # A page of up to 1,000 records (the spec's maximum page_size) per request: 100,000 pages
    # are 100 million records in one window of at most 30 days.
    assert MAX_EMPTY_PAGES == 100
    assert DEFAULT_MAX_PAGES == 100_000


# -- the library: iter_* of both clients, pipelined or not -------------------------------------


def _client(hostile: EndlessPages, *, prefetch: bool, **kwargs: object) -> Client:
    return Client("https://rai.test", "test-client", SECRET, prefetch=prefetch,
                  transport=as_transport(hostile.handler), sleep=lambda _: None,
                  **kwargs)  # type: ignore[arg-type]  # fmt: skip


@pytest.mark.parametrize("prefetch", [True, False], ids=["pipelined", "sequential"])
@pytest.mark.parametrize("endpoint", ["list_sessions", "list_cohorts", "list_cohort_sessions"])
def test_iter_stops_after_a_bounded_run_of_empty_pages(
    emulator: RaiEmulator, prefetch: bool, endpoint: str
) -> None:
    hostile = EndlessPages(emulator, {endpoint})
    with _client(hostile, prefetch=prefetch) as client:
        if endpoint == "list_cohort_sessions":
            items = client.iter_cohort_sessions(emulator.cohort_ids()[0])
        elif endpoint == "list_cohorts":
            items = client.iter_cohorts(SINCE, "2024-05-20T00:00:00Z", [KEY])  # type: ignore[assignment]
        else:
            items = client.iter_sessions(SINCE, "2024-05-20T00:00:00Z", [KEY])
        with pytest.raises(InvalidResponse) as caught:
            list(items)
    message = str(caught.value)
    assert f"{MAX_EMPTY_PAGES} empty pages in a row" in message
    assert "next_page_token" in message
    # The pipelined pager sends at most the one guessed request beyond the bound.
    assert MAX_EMPTY_PAGES <= hostile.pages <= MAX_EMPTY_PAGES + 1


@pytest.mark.parametrize("prefetch", [True, False], ids=["pipelined", "sequential"])
def test_iter_stops_after_max_pages_in_one_window(emulator: RaiEmulator, prefetch: bool) -> None:
    hostile = EndlessPages(emulator, {"list_sessions"}, records=2)
    with _client(hostile, prefetch=prefetch, max_pages=40) as client:
        pages = client.iter_session_pages(SINCE, "2024-05-20T00:00:00Z", [KEY], raw=True)
        seen = 0
        with pytest.raises(InvalidResponse) as caught:
            for _ in pages:
                seen += 1
    assert "40 pages in one window" in str(caught.value) and "max_pages" in str(caught.value)
    assert "2024-05-01T00:00:00Z" in str(caught.value)  # the window, to narrow it down
    assert seen == 39  # every page before the bound was delivered; none after
    assert 40 <= hostile.pages <= 41


def test_a_page_with_records_resets_the_empty_run(emulator: RaiEmulator) -> None:
    # Empty pages between full ones are allowed (a service filtering after paging): only a run of
    # MAX_EMPTY_PAGES in a row ends the listing.
    served = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal served
        if request.url.path.endswith("/authorize"):
            return httpx.Response(200, json={"access_token": "t", "expires_in": 3600})
        served += 1
        records = [{"session_id": f"s{served}"}] if served % MAX_EMPTY_PAGES == 0 else []
        token = f"c{served}" if served < 3 * MAX_EMPTY_PAGES else ""
        return httpx.Response(200, json={"sessions": records, "next_page_token": token})

    with Client("https://rai.test", "test-client", SECRET,
                transport=httpx.MockTransport(handler)) as client:  # fmt: skip
        got = [s.session_id for s in client.iter_sessions(SINCE, "2024-05-02T00:00:00Z", [KEY])]
    assert got == [f"s{n}" for n in (MAX_EMPTY_PAGES, 2 * MAX_EMPTY_PAGES, 3 * MAX_EMPTY_PAGES)]


@pytest.mark.anyio
@pytest.mark.parametrize("prefetch", [True, False], ids=["prefetch", "sequential"])
async def test_async_iter_is_bounded_too(emulator: RaiEmulator, prefetch: bool) -> None:
    hostile = EndlessPages(emulator, {"list_sessions"})
    async with AsyncClient("https://rai.test", "test-client", SECRET, prefetch=prefetch,
                           transport=as_transport(hostile.handler)) as client:  # fmt: skip
        with pytest.raises(InvalidResponse, match="empty pages in a row"):
            async for _ in client.iter_sessions(SINCE, "2024-05-20T00:00:00Z", [KEY]):
                pass
    assert MAX_EMPTY_PAGES <= hostile.pages <= MAX_EMPTY_PAGES + 1

    hostile = EndlessPages(emulator, {"list_sessions"}, records=1)
    async with AsyncClient(
        "https://rai.test",
        "test-client",
        SECRET,
        prefetch=prefetch,
        max_pages=25,
        transport=as_transport(hostile.handler),
    ) as client:
        with pytest.raises(InvalidResponse, match="25 pages in one window"):
            async for _ in client.iter_sessions(SINCE, "2024-05-20T00:00:00Z", [KEY]):
                pass
    assert 25 <= hostile.pages <= 26


def test_max_pages_must_be_a_positive_int() -> None:
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="max_pages must be an int >= 1"):
            Client("https://rai.test", "c", SECRET, max_pages=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="max_pages must be an int >= 1"):
            AsyncClient("https://rai.test", "c", SECRET, max_pages=bad)  # type: ignore[arg-type]


# -- the commands, as a user runs them against a hostile API -----------------------------------


class Served:
    """An emulator behind a loopback server, made hostile by setting :attr:`hostile`."""

    def __init__(self, emulator: RaiEmulator) -> None:
        self.emulator = emulator
        self.hostile: EndlessPages | None = None
        self.url = ""

    def handler(self, request: FakeRequest) -> Reply:
        answer = self.hostile.handler if self.hostile is not None else self.emulator.handler
        return answer(request)


@pytest.fixture
def served() -> Iterator[Served]:
    site = Served(RaiEmulator(client_secret=SECRET, cohorts=6, sessions_per_cohort=(5, 15)))
    with LoopbackServer(site.handler) as server:
        site.url = server.url
        yield site


@pytest.mark.slow
@pytest.mark.parametrize(
    ("verb", "endpoint", "parallel"),
    [("sessions", "list_sessions", "1"), ("sessions", "list_sessions", "4"),
     ("cohorts", "list_cohorts", "1"), ("cohorts", "list_cohorts", "3"),
     ("cohort-sessions", "list_cohort_sessions", None)],
)  # fmt: skip
def test_export_commands_end_with_exit_5_and_no_output_file(
    served: Served, tmp_path: Path,
    verb: str, endpoint: str, parallel: str | None,
) -> None:  # fmt: skip
    emulator = served.emulator
    served.hostile = hostile = EndlessPages(emulator, {endpoint})
    out = tmp_path / "export.jsonl"
    if parallel is None:
        argv = ["rai", verb, emulator.cohort_ids()[0], "--out", str(out)]
    else:
        argv = ["rai", verb, *window(emulator), "--parallel", parallel, "--out", str(out)]
    result = run_cli(served.url, SECRET, *argv)
    assert result.returncode == 5, result.stderr
    assert f"{MAX_EMPTY_PAGES} empty pages in a row" in result.stderr
    assert result.stderr.startswith(f"failopen rai {verb}: service_error: ")
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # no file that looks whole, no temporary left behind
    # Each list call (one per window, or --parallel slice) stops at the bound.
    calls = int(parallel or 1) * 4 if parallel not in (None, "1") else 1
    assert hostile.pages <= calls * (MAX_EMPTY_PAGES + 1)


@pytest.mark.slow
def test_max_pages_flag_bounds_pages_with_records(served: Served, tmp_path: Path) -> None:
    emulator = served.emulator
    served.hostile = hostile = EndlessPages(emulator, {"list_sessions"}, records=3)
    out = tmp_path / "export.csv"
    result = run_cli(served.url, SECRET, "rai", "sessions", *window(emulator),
                     "--parallel", "1", "--max-pages", "30", "--format", "csv",
                     "--out", str(out))  # fmt: skip
    assert result.returncode == 5, result.stderr
    assert "30 pages in one window" in result.stderr and "--max-pages" in result.stderr
    assert 30 <= hostile.pages <= 31
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_sync_ends_keeps_what_it_committed_and_frees_its_lock(
    served: Served, tmp_path: Path
) -> None:
    emulator = served.emulator
    stuck = emulator.cohort_ids()[3]
    served.hostile = hostile = EndlessPages(emulator, {"list_cohort_sessions"}, cohort_id=stuck)
    out, state = tmp_path / "out", tmp_path / "state.json"
    out.mkdir()
    argv = ["rai", "sync", "--public-key", KEY, "--state", str(state), "--out-dir", str(out),
            "--until", UNTIL, "--parallel", "1", "--batch-records", "1", "--json"]  # fmt: skip
    result = run_cli(served.url, SECRET, *argv, "--since", SINCE)
    assert result.returncode == 5, result.stderr
    assert f"{MAX_EMPTY_PAGES} empty pages in a row" in result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["exit_code"] == 5
    assert hostile.pages <= MAX_EMPTY_PAGES + 1
    # The cohorts listed before the stuck one are delivered, and the state says so.
    delivered = json.loads(state.read_text())["keys"][KEY]["delivered"]
    assert sorted(delivered) == sorted(emulator.cohort_ids()[:3])
    assert not list(out.glob(".failopen-sync-*"))

    # The lock is free, and once the service behaves the same command finishes the job.
    served.hostile = None
    again = run_cli(served.url, SECRET, *argv)  # the same command, minus --since
    assert again.returncode == 0, again.stderr
    assert_exactly_once(out, emulator)


@pytest.mark.slow
def test_sync_with_an_endless_cohort_listing_ends(served: Served, tmp_path: Path) -> None:
    emulator = served.emulator
    served.hostile = hostile = EndlessPages(emulator, {"list_cohorts"})
    out, state = tmp_path / "out", tmp_path / "state.json"
    out.mkdir()
    result = run_cli(
        served.url,
        SECRET,
        "rai",
        "sync",
        "--public-key",
        KEY,
        "--state",
        str(state),
        "--out-dir",
        str(out),
        "--since",
        SINCE,
        "--until",
        UNTIL,
    )
    assert result.returncode == 5, result.stderr
    assert "empty pages in a row" in result.stderr
    assert hostile.pages <= MAX_EMPTY_PAGES + 1
    # No data file; the run's manifest says it wrote nothing and how it ended.
    assert sorted(p.name for p in out.iterdir()) == ["_manifests"]
    (manifest,) = manifests(out)
    assert manifest["files"] == [] and manifest["exit_code"] == 5


def test_huge_tokens_are_not_kept_in_memory() -> None:
    # The repeated-token check remembers every token of a window: a service sending tokens of
    # 200 KB would make it hold max_pages of them (20 GB at the default bound).
    import tracemalloc

    from failopen.rai._pager import sessions_pager
    from failopen.rai.models import Page

    pager = sessions_pager(SINCE, "2024-05-02T00:00:00Z", [KEY], cohort_id=None, anomaly_id=None,
                           telltale_id=None, page_size=None)  # fmt: skip
    tracemalloc.start()
    try:
        for n in range(300):
            pager.after(Page([{"session_id": str(n)}], f"{n:08d}" + "x" * 200_000))
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 5_000_000  # 300 tokens of 200 KB would be 60 MB
    with pytest.raises(InvalidResponse, match="already returned"):
        pager.after(Page([{"session_id": "again"}], f"{7:08d}" + "x" * 200_000))
