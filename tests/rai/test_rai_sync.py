"""``failopen rai sync`` in-process against the emulator: incremental, exactly once, resumable."""

from __future__ import annotations

import errno
import functools
import json
import re
from pathlib import Path
from typing import IO

import pytest
from _sync_helpers import (
    SECRET,
    Runner,
    assert_exactly_once,
    csv_rows,
    expected,
    ids,
    lines,
    manifests,
    outputs,
    snapshot,
    sync_args,
    temporaries,
)

from failopen.rai import Client
from failopen.rai import _sync_cli as sync_cli
from failopen.rai._sink import UNDATED, DirSink
from failopen.rai._state import locked
from failopen.testing._rai_requests import ApiError
from failopen.testing._server import FakeRequest, LoopbackServer, Reply
from failopen.testing.rai_emulator import RaiEmulator

SINCE = "2024-05-01T00:00:00Z"
END = "2024-05-21T00:00:00Z"


def test_first_run_writes_every_record_once_in_day_files(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    result = sync(*sync_args(state, out, "--json", since=SINCE, until=END))
    assert result.code == 0, result.err
    assert_exactly_once(out, emulator)
    summary = result.summary()
    assert summary["cohorts"] == 12 and summary["sessions"] == emulator.total_sessions
    assert summary["resumed"] is False and summary["exit_code"] == 0
    visible = sorted(p.relative_to(out).as_posix() for p in out.glob("kind=*/dt=*/*"))
    assert summary["files"] == visible
    for record in lines(out, "sessions"):
        day = record["session_created"][:10]
        assert any(f.startswith(f"kind=sessions/dt={day}/") for f in summary["files"])
    assert all(re.fullmatch(rf"kind=\w+/dt=[\d-]+/{summary['run_id']}-\d{{4}}\.jsonl", f)
               for f in summary["files"])  # fmt: skip
    body = json.loads(state.read_text())
    assert body["keys"]["pk_live_test"]["through"] == END
    assert body["running"] is False and "pending" not in body and "renames" not in body
    assert body["version"] == 2


def test_a_run_that_finds_nothing_new_only_lists_cohorts(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    assert sync(*sync_args(state, out, since=SINCE, until=END)).code == 0
    before = snapshot(out)
    emulator.data_requests = 0
    result = sync(*sync_args(state, out, "--json", until="2024-05-21T01:00:00Z"))
    assert result.code == 0
    assert result.summary()["cohorts"] == 0 and result.summary()["sessions"] == 0
    # Two pages of cohorts, no sessions: the lookback (30 days, the API's longest window) behind
    # where the last run ended is one window, the hour since then another.
    assert emulator.data_requests == 2
    after = snapshot(out)
    new = set(after) - set(before)  # only the run's manifest
    assert len(new) == 1 and next(iter(new)).startswith("_manifests/")
    assert {k: v for k, v in after.items() if k in before} == before


def test_an_incremental_run_writes_only_the_new_cohorts(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    assert sync(*sync_args(state, out, since=SINCE, until=END)).code == 0
    new = emulator.add_cohorts(3)
    result = sync(*sync_args(state, out, "--json", until="2024-06-01T00:00:00Z"))
    assert result.code == 0
    assert result.summary()["cohorts"] == 3
    assert_exactly_once(out, emulator)
    assert set(ids(lines(out, "cohorts"), "cohort_id")) >= set(new)


@pytest.mark.parametrize(("lookback", "caught"), [("2d", True), ("1h", False)])
def test_a_cohort_created_late_inside_an_old_window_is_caught_by_the_lookback(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path, lookback: str, caught: bool
) -> None:
    emulator.hide_cohorts([10])  # window starts 2024-05-17T16:57, not created yet
    first = sync(*sync_args(state, out, "--lookback", lookback, since=SINCE,
                            until="2024-05-19T00:00:00Z"))  # fmt: skip
    assert first.code == 0
    late = emulator.cohort_ids()[10]
    assert late not in ids(lines(out, "cohorts"), "cohort_id")
    emulator.reveal_cohorts()
    again = sync(*sync_args(state, out, "--lookback", lookback, until="2024-05-19T01:00:00Z"))
    assert again.code == 0
    delivered = ids(lines(out, "cohorts"), "cohort_id")
    assert (late in delivered) is caught
    assert max(delivered.values()) == 1  # the lookback lists old cohorts again, writes none twice
    if caught:
        sessions = ids(lines(out, "sessions"), "cohort_id")
        assert sessions[late] == emulator.cohort_record(late)["session_count"]


def test_the_first_run_needs_since(sync: Runner, state: Path, out: Path) -> None:
    result = sync(*sync_args(state, out))
    assert result.code == 2 and "--since" in result.err
    assert not state.exists()


def test_a_corrupt_state_file_is_a_clear_error_and_left_alone(
    sync: Runner, state: Path, out: Path
) -> None:
    state.write_text('{"version": 1, "keys": {"pk_live_test": {"through": 5')
    before = state.read_bytes()
    result = sync(*sync_args(state, out, since=SINCE, until=END))
    assert result.code == 1
    assert "is not a valid sync state" in result.err and str(state) in result.err
    assert state.read_bytes() == before and list(out.iterdir()) == []  # no manifest either
    # What is safe: an earlier --since would write delivered data again.
    assert "start again with --since" not in result.err
    assert "backup" in result.err and "move it aside" in result.err
    assert "would write again what was delivered" in result.err


def test_a_cut_state_file_names_where_its_runs_listed_up_to(
    sync: Runner, state: Path, out: Path
) -> None:
    state.write_text('{"keys":{"pk_live_test":{"delivered":{"c1":"2024-07-20T00:00:00Z"},'
                     '"since":null,"through":"2024-05-21T00:00:00Z"}},"pend')  # fmt: skip
    result = sync(*sync_args(state, out, since=SINCE, until=END))
    assert result.code == 1 and "--since 2024-05-21T00:00:00Z" in result.err
    assert list(out.iterdir()) == []


def test_a_second_run_on_the_same_state_refuses(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    with locked(str(state)):
        result = sync(*sync_args(state, out, since=SINCE, until=END))
    assert result.code == 1 and "another failopen rai sync is running" in result.err
    assert not state.exists() and list(out.iterdir()) == [] and emulator.requests == 0


@pytest.mark.parametrize(("code", "exit_code"), [("internal", 5), ("unauthorized", 3)])
def test_errors_mid_run_keep_the_cohorts_done_and_the_next_run_goes_on(
    sync: Runner,
    monkeypatch: pytest.MonkeyPatch,
    emulator: RaiEmulator,
    state: Path,
    out: Path,
    code: str,
    exit_code: int,
) -> None:
    # From the 6th session listing on, every attempt fails: cohorts 0-4 are complete.
    calls = []
    authenticate = emulator._authenticate

    def failing(request: FakeRequest) -> None:
        if request.path.endswith("/sessions"):
            calls.append(request.path)
            if len(calls) >= 6:
                raise ApiError(code, "injected")
        authenticate(request)

    monkeypatch.setattr(emulator, "_authenticate", failing)
    argv = sync_args(state, out, "--parallel", "1", "--batch-records", "1", "--json",
                     since=SINCE, until=END)  # fmt: skip
    failed = sync(*argv)
    assert failed.code == exit_code, failed.err
    assert SECRET not in failed.err
    assert failed.summary()["cohorts"] == 5 and failed.summary()["exit_code"] == exit_code
    body = json.loads(state.read_text())
    assert len(body["keys"]["pk_live_test"]["delivered"]) == 5
    assert body["keys"]["pk_live_test"]["through"] is None  # not advanced past the failure
    monkeypatch.setattr(emulator, "_authenticate", authenticate)
    emulator.expire_page_tokens()  # the resumed run never reuses a cursor
    resumed = sync(*argv)
    assert resumed.code == 0 and resumed.summary()["resumed"] is True
    assert resumed.summary()["cohorts"] == 7
    assert emulator.error_counts["invalid_page_token"] == 0
    assert_exactly_once(out, emulator)


def test_disk_full_is_a_clear_error_and_the_state_is_not_advanced(
    sync: Runner, monkeypatch: pytest.MonkeyPatch, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    budget = {"bytes": 300_000}  # the filesystem seam: ENOSPC once this much has been written

    def write(f: IO[bytes], data: bytes) -> object:
        if budget["bytes"] < len(data):
            f.write(data[: budget["bytes"] // 2])  # a short write, as a full disk does
            f.flush()
            raise OSError(errno.ENOSPC, "No space left on device", getattr(f, "name", None))
        budget["bytes"] -= len(data)
        return f.write(data)

    monkeypatch.setattr(sync_cli, "DirSink", functools.partial(DirSink, write=write))
    argv = sync_args(state, out, "--parallel", "2", "--batch-records", "100", "--json",
                     since=SINCE, until=END)  # fmt: skip
    failed = sync(*argv)
    assert failed.code == 1 and "No space left on device" in failed.err
    assert "state was not advanced" in failed.err
    delivered = json.loads(state.read_text())["keys"]["pk_live_test"]["delivered"]
    written = ids(lines(out, "cohorts"), "cohort_id")  # no half line (checked in lines())
    assert set(written) == set(delivered)  # the files hold exactly what the state says
    assert 0 < len(delivered) < 12
    assert not temporaries(out)  # no spool or hidden file of the failed batch left behind
    # Every visible file is one the failed run finished and listed (none of the failed batch).
    summary = failed.summary()
    visible = sorted(p.relative_to(out).as_posix() for p in out.glob("kind=*/dt=*/*"))
    assert summary["files"] == visible
    assert [f["path"] for f in manifests(out)[0]["files"]] == visible
    before = snapshot(out)
    budget["bytes"] = 10**9  # space freed
    assert sync(*argv).code == 0
    assert_exactly_once(out, emulator)
    assert {k: v for k, v in snapshot(out).items() if k in before} == before


def test_a_state_from_the_previous_release_killed_mid_append_is_cut_back_once(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    assert sync(*sync_args(state, out, since=SINCE, until=END)).code == 0
    emulator.add_cohorts(2)
    # As the previous release left a run killed mid-append: day file sizes recorded (v2,
    # ``pending``), half a batch appended to a day file, a spool beside it.
    day = "sessions-2024-05-21.jsonl"
    (out / day).write_bytes(b'{"session_id":"ses_whole","cohort_id":"x"}\n')
    body = json.loads(state.read_text())
    body.update(pending={day: (out / day).stat().st_size}, running=True)
    state.write_text(json.dumps(body))
    with (out / day).open("ab") as f:
        f.write(b'{"session_id":"ses_half","cohort_id":"x"}\n{"sessi')
    (out / ".failopen-sync-stale.part").write_bytes(b"junk")
    result = sync(*sync_args(state, out, "--json", until="2024-06-01T00:00:00Z"))
    assert result.code == 0 and result.summary()["resumed"] is True
    assert_exactly_once(out, emulator)
    assert (out / day).read_bytes() == b'{"session_id":"ses_whole","cohort_id":"x"}\n'
    assert "pending" not in json.loads(state.read_text())


def test_stdout_gets_json_lines_and_the_summary_goes_to_stderr(
    sync: Runner, emulator: RaiEmulator, state: Path
) -> None:
    result = sync(*sync_args(state, "-", "--json", since=SINCE, until=END))
    assert result.code == 0
    tagged = [json.loads(line) for line in result.out.decode().splitlines()]
    # Each line names its kind beside the record, never inside it: a field the vendor adds to
    # a record (even one called "kind") cannot collide with the tag.
    assert all(set(line) == {"kind", "record"} for line in tagged)
    records = [line["record"] for line in tagged]
    assert [line["kind"] for line in tagged] == [
        "sessions" if "session_id" in r else "cohorts" for r in records
    ]
    cohorts, sessions = expected(emulator)
    assert [r for r in records if "session_id" not in r] == cohorts  # listing order
    assert sorted(r["session_id"] for r in records if "session_id" in r) == sorted(
        s["session_id"] for s in sessions
    )
    summary = json.loads(result.err.strip().splitlines()[-1])
    assert summary["cohorts"] == 12 and summary["manifest"] is None and summary["run_id"]


def test_every_csv_file_starts_with_its_header_across_runs_and_batches(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    assert sync(*sync_args(state, out, "--format", "csv", "--batch-records", "300",
                           since=SINCE, until="2024-05-10T12:00:00Z")).code == 0  # fmt: skip
    assert sync(*sync_args(state, out, "--format", "csv", until=END)).code == 0
    for kind, first in (("sessions", "session_id"), ("cohorts", "cohort_id")):
        files = outputs(out, kind, "csv")
        assert len({p.name.rsplit("-", 1)[0] for p in files}) == 2  # two runs' files
        for path in files:
            assert path.read_text().split(",", 1)[0] == first, path
        rows = csv_rows(out, kind)
        headers = [row for row in rows if row[0] == first]
        assert len(headers) == len(files)
    rows = csv_rows(out, "sessions")
    assert len(rows) - len(outputs(out, "sessions", "csv")) == emulator.total_sessions


def test_parallel_sync_writes_the_same_files_as_sequential(
    sync: Runner, emulator: RaiEmulator, tmp_path: Path
) -> None:
    folders = []
    for n in ("1", "4"):
        folder = tmp_path / f"p{n}"
        folder.mkdir()
        argv = sync_args(tmp_path / f"s{n}.json", folder, "--parallel", n, "--page-size", "7",
                         since=SINCE, until=END)  # fmt: skip
        assert sync(*argv).code == 0
        # By batch and partition, byte for byte (the run ids in the names differ).
        folders.append({(p.parent.relative_to(folder).as_posix(), p.name.rsplit("-", 1)[1]):
                        p.read_bytes() for p in folder.glob("kind=*/dt=*/*")})  # fmt: skip
    assert folders[0] == folders[1]  # a stable order whatever the parallelism


HOSTILE_STAMPS = [
    "../.-/.-./../escapeZ",
    "2024-05-01/../../x0000Z",
    None,
    5,
    "2024-13-45T00:00:00Z",
    "2024-05-01T10:00:00+24:00",
    "2024-05-01T10:00:00-99:00",
    "2024-05-01T10:00:00+01:60",
]  # offsets no time zone has: no day to file under


@pytest.mark.parametrize("stamp", HOSTILE_STAMPS)
def test_a_hostile_timestamp_never_names_a_file_outside_the_output_directory(
    stamp: object, tmp_path: Path
) -> None:
    from failopen.rai._sink import utc_day

    day = utc_day(stamp)
    assert day == UNDATED
    sink = DirSink(str(tmp_path), "jsonl")
    spool = sink.spool()
    spool.add("sessions", [{"session_id": "s", "session_created": stamp}])
    spool.close()
    assert list(spool.parts) == [("sessions", UNDATED)]
    moves = sink.prepare([spool], "20240501T000000Z-00000000", 1)
    assert [m.path for m in moves] == [
        f"kind=sessions/dt={UNDATED}/20240501T000000Z-00000000-0001.jsonl"
    ]
    sink.publish(moves)
    spool.discard()
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()] == [
        moves[0].path
    ]


@pytest.mark.parametrize("stamp", [
    "2024-05-02T10:00:00+24:00",
    "\u0662\u0660\u0662\u0664-05-02T10:00:00Z",  # Arabic-Indic digits: \\d matches them
])  # fmt: skip
def test_a_record_stamped_plus_24_hours_never_stops_the_sync(
    monkeypatch: pytest.MonkeyPatch, emulator: RaiEmulator, sync: Runner, state: Path, out: Path,
    stamp: str,
) -> None:
    # "+24:00" looks like an offset but is none (RFC 3339 stops at 23:59): it once raised a
    # ValueError that crashed every later run on the same record. Digits other than ASCII once
    # named a partition directory (dt=\u0662\u0660\u0662\u0664-05-02): RFC 3339 digits are ASCII.
    first = emulator.cohort_ids()[0]

    def handler(request: FakeRequest) -> Reply:
        reply = emulator.handler(request)
        if request.path.endswith(f"/cohorts/{first}/sessions") and reply.status == 200:
            raw = reply.body if isinstance(reply.body, bytes) else b"".join(reply.body)
            body = json.loads(raw)
            if body["sessions"]:
                bad = dict(
                    body["sessions"][0],
                    session_id="ses_plus24",
                    session_created=stamp,
                )
                body["sessions"].append(bad)
            return Reply.json(body)
        return reply

    undated: list[int] = []
    with LoopbackServer(handler) as server:
        monkeypatch.setenv("FAILOPEN_RAI_BASE_URL", server.url)
        for _ in range(2):  # the second run starts where the first ended: never stuck
            result = sync(*sync_args(state, out, "--json", since=SINCE, until=END))
            assert result.code == 0, result.err
            assert "Traceback" not in result.err
            undated.append(result.summary()["undated"])
    assert undated == [1, 0]  # reported by the run that delivered it, then never again
    assert ids(lines(out, "sessions"), "session_id")["ses_plus24"] == 1
    assert outputs(out, "sessions") and list(out.glob(f"kind=sessions/dt={UNDATED}/*.jsonl"))
    assert all(p.name.isascii() for p in out.glob("kind=*/dt=*"))


def test_a_state_file_cannot_name_files_to_cut_back_outside_the_day_files(
    sync: Runner, state: Path, out: Path
) -> None:
    state.write_text(json.dumps({"version": 1, "running": True, "keys": {},
                                 "pending": {"../victim": 0}}))  # fmt: skip
    before = state.read_bytes()
    result = sync(*sync_args(state, out, since=SINCE, until=END))
    assert result.code == 1 and "is not a valid sync state" in result.err
    assert state.read_bytes() == before


def test_a_cohort_without_a_usable_id_is_skipped_not_a_stuck_sync(
    sync: Runner, monkeypatch: pytest.MonkeyPatch, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    original = Client.iter_cohort_pages

    def pages(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        for page in original(self, *args, **kwargs):
            page.items.extend([{"cohort_id": ".."}, {"cohort_id": 7}, {"no_id": True}])
            yield page

    monkeypatch.setattr(Client, "iter_cohort_pages", pages)
    result = sync(*sync_args(state, out, since=SINCE, until=END))
    assert result.code == 0, result.err
    assert_exactly_once(out, emulator)


def _interrupted_first_run(state: Path, since: str | None) -> None:
    """The state a first run leaves when it is killed before its first batch."""
    key = {"through": None, "delivered": {}}
    if since is not None:
        key["since"] = since
    state.write_text(json.dumps({"version": 1, "running": True, "pending": {},
                                 "keys": {"pk_live_test": key}}))  # fmt: skip


def test_an_interrupted_first_run_goes_on_from_its_recorded_since(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    _interrupted_first_run(state, SINCE)
    result = sync(*sync_args(state, out, "--json", until=END))
    assert result.code == 0, result.err
    assert result.summary()["resumed"] is True
    assert_exactly_once(out, emulator)
    assert json.loads(state.read_text())["keys"]["pk_live_test"]["since"] == SINCE


def test_another_since_for_an_interrupted_first_run_is_ignored_with_a_warning(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    # Going on from another start would leave a gap or write records twice.
    _interrupted_first_run(state, SINCE)
    result = sync(*sync_args(state, out, since="2024-05-10T00:00:00Z", until=END))
    assert result.code == 0, result.err
    assert (
        f"--since ignored for pk_live_test: its first run, interrupted, started at {SINCE}"
        in caplog.text
    )
    assert_exactly_once(out, emulator)


def test_a_state_from_before_since_was_recorded_still_asks_for_it(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    _interrupted_first_run(state, None)  # written by a failopen that did not record --since
    result = sync(*sync_args(state, out, until=END))
    assert result.code == 2 and "the state file has no 'pk_live_test' yet" in result.err
    assert sync(*sync_args(state, out, since=SINCE, until=END)).code == 0
    assert_exactly_once(out, emulator)
