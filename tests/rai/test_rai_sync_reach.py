"""``failopen rai sync`` loses nothing and writes nothing twice, whatever the API's from/to filter
on (issue 32, items 1-3): late cohorts, wider lookbacks, future --until, gaps, the state's size.

Every test runs against the emulator filtering cohorts by window start and by created_at: the spec
does not say which, so the sync must be right for both.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from _sync_helpers import (
    SECRET,
    Runner,
    assert_exactly_once,
    ids,
    lines,
    sync_args,
)

from failopen.rai._arguments import format_rfc3339, parse_rfc3339
from failopen.testing.rai_emulator import RaiEmulator

SINCE = "2024-05-01T00:00:00Z"
KEY = "pk_live_test"


@pytest.fixture(params=["window_start", "created_at"])
def emulator(request: pytest.FixtureRequest) -> RaiEmulator:
    return RaiEmulator(client_secret=SECRET, cohort_filter=request.param)


def _at(base: str, hours: float) -> str:
    return format_rfc3339(parse_rfc3339(base) + timedelta(hours=hours))


def _delivered(state: Path) -> dict[str, str]:
    return json.loads(state.read_text())["keys"][KEY]["delivered"]  # type: ignore[no-any-return]


def test_a_cohort_that_appears_days_late_reaches_the_next_default_run_once(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    # Cohort 7: window from 2024-05-12T16:41, created_at 2024-05-14T11:50; the API only shows it
    # on 2024-05-20, long after both (a late indexing, a re-scan): every run before missed it.
    emulator.hide_cohorts([7])
    late = emulator.cohort_ids()[7]
    assert sync(*sync_args(state, out, since=SINCE, until="2024-05-20T00:00:00Z")).code == 0
    assert late not in ids(lines(out, "cohorts"), "cohort_id")
    emulator.reveal_cohorts()
    for hour in (1, 2, 3):  # hourly runs with default flags
        run = sync(*sync_args(state, out, "--json", until=_at("2024-05-20T00:00:00Z", hour)))
        assert run.code == 0, run.err
        delivered = ids(lines(out, "cohorts"), "cohort_id")
        assert delivered[late] == 1 and max(delivered.values()) == 1
    sessions = ids(lines(out, "sessions"), "cohort_id")
    assert sessions[late] == emulator.cohort_record(late)["session_count"]
    # And once every cohort exists, every record is there exactly once.
    assert sync(*sync_args(state, out, until="2024-05-22T00:00:00Z")).code == 0
    assert_exactly_once(out, emulator)


def test_a_wider_lookback_after_normal_runs_writes_nothing_twice(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    assert sync(*sync_args(state, out, since=SINCE, until="2024-05-10T00:00:00Z")).code == 0
    for day in range(11, 23):
        until = f"2024-05-{day}T00:00:00Z"
        assert sync(*sync_args(state, out, "--lookback", "24h", until=until)).code == 0
    for lookback in ("7d", "30d", "7d"):
        run = sync(*sync_args(state, out, "--json", "--lookback", lookback,
                              until="2024-05-22T01:00:00Z"))  # fmt: skip
        assert run.code == 0, run.err
        assert run.summary()["cohorts"] == 0 and run.summary()["sessions"] == 0
    assert_exactly_once(out, emulator)


def test_a_lookback_beyond_the_reach_is_refused(sync: Runner, state: Path, out: Path) -> None:
    run = sync(*sync_args(state, out, "--lookback", "31d", since=SINCE,
                          until="2024-05-10T00:00:00Z"))  # fmt: skip
    assert run.code == 2 and "30d" in run.err
    assert not state.exists()


def test_a_future_until_is_refused_and_later_runs_still_deliver(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    assert sync(*sync_args(state, out, since=SINCE, until="2024-05-10T00:00:00Z")).code == 0
    before = state.read_bytes()
    soon = format_rfc3339(datetime.now(timezone.utc) + timedelta(hours=1))
    for until in ("2030-01-01T00:00:00Z", soon):
        run = sync(*sync_args(state, out, until=until))
        assert run.code == 2, run.err
        assert "--until" in run.err and "later than now" in run.err
        assert state.read_bytes() == before
    assert sync(*sync_args(state, out, until="2024-05-22T00:00:00Z")).code == 0
    assert_exactly_once(out, emulator)


@pytest.mark.parametrize(
    ("since", "until", "words"),
    [
        ("2024-05-10T00:00:00Z", "2024-05-10T00:00:00Z", "before --until"),
        ("2024-05-10T00:00:00Z", "2024-05-01T00:00:00Z", "before --until"),
        ("2031-01-01T00:00:00Z", None, "later than now"),
        ("0001-01-01T00:00:00Z", "2024-05-10T00:00:00Z", "1970"),
    ],
)
def test_a_window_that_could_never_end_is_refused(
    sync: Runner, state: Path, out: Path, since: str, until: str | None, words: str
) -> None:
    run = sync(*sync_args(state, out, since=since, until=until))
    assert run.code == 2 and words in run.err, run.err
    assert not state.exists() and list(out.iterdir()) == []


def test_a_state_frozen_by_a_future_until_of_an_older_failopen_delivers_again(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    state.write_text(json.dumps({"version": 1, "running": False, "pending": {}, "keys": {
        KEY: {"through": "2030-01-01T00:00:00Z", "delivered": {}, "since": SINCE}}}))
    run = sync(*sync_args(state, out, "--json", until="2024-05-22T00:00:00Z"))
    assert run.code == 6, run.err  # delivered, but it cannot vouch for what it never listed
    assert "2030-01-01T00:00:00Z" in run.err
    assert run.summary()["gaps"][0]["public_key"] == KEY
    assert_exactly_once(out, emulator)
    assert sync(*sync_args(state, out, until="2024-05-22T01:00:00Z")).code == 0


def test_a_gap_of_more_than_thirty_days_exits_non_zero_and_says_what_to_do(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    emulator.hide_cohorts([11])
    assert sync(*sync_args(state, out, since=SINCE, until="2024-05-12T00:00:00Z")).code == 0
    emulator.reveal_cohorts()
    run = sync(*sync_args(state, out, "--json", until="2024-06-13T00:00:00Z"))
    assert run.code == 6, run.err
    assert "2024-05-12T00:00:00Z" in run.err and "30 days" in run.err
    assert "tickets" in run.err  # what to do: where to look for what the API no longer lists
    assert run.summary()["exit_code"] == 6
    assert run.summary()["gaps"] == [{"public_key": KEY, "listed_through": "2024-05-12T00:00:00Z"}]
    assert_exactly_once(out, emulator)  # what could still be listed was delivered
    again = sync(*sync_args(state, out, "--json", until="2024-06-13T01:00:00Z"))
    assert again.code == 0 and again.summary()["gaps"] == []


def test_late_cohorts_are_named_in_the_summary(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    # Every default cohort is created 28-49 h after its window starts: more than half of 48 h.
    run = sync(*sync_args(state, out, "--json", "--lookback", "48h", since=SINCE,
                          until="2024-05-22T00:00:00Z"))  # fmt: skip
    assert run.code == 0
    late = run.summary()["late_cohorts"]
    assert late["count"] == 12 and 28 * 3600 <= late["max_delay_seconds"] <= 49 * 3600
    assert "12 cohort(s)" in run.err and "--lookback" in run.err
    quiet = sync(*sync_args(state, out, "--json", until="2024-05-22T01:00:00Z"))
    assert quiet.summary()["late_cohorts"] == {"count": 0, "max_delay_seconds": 0}
    assert "cohort(s)" not in quiet.err


def test_the_state_keeps_ids_only_and_forgets_them_after_the_horizon(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    start = "2024-05-21T00:00:00Z"
    assert sync(*sync_args(state, out, since=SINCE, until=start)).code == 0
    delivered_at: dict[str, str] = dict.fromkeys(_delivered(state), start)
    until = start
    # A run every 40 hours for 90 days, one new cohort before each: the emulator's cohorts are
    # 40 hours apart, so each new one starts about 40 hours before the run that lists it.
    for run_number in range(1, 56):
        if run_number < 55:
            emulator.add_cohorts(1)
        until = _at(start, 40 * run_number)
        assert sync(*sync_args(state, out, until=until)).code == 0
        for cohort in _delivered(state):
            delivered_at.setdefault(cohort, until)
    assert_exactly_once(out, emulator)
    kept = _delivered(state)
    horizon = parse_rfc3339(until) - timedelta(days=60)
    # Remembered: every id delivered inside the horizon; forgotten: every id delivered before it.
    assert set(kept) == {c for c, at in delivered_at.items() if parse_rfc3339(at) > horizon}
    assert 0 < len(kept) < len(delivered_at)
    for cohort, forget in kept.items():  # an id and when to forget it, nothing of the record
        assert cohort.startswith("coh_") and parse_rfc3339(forget) > parse_rfc3339(until)
    assert state.stat().st_size < 100 * len(kept) + 300


def test_a_state_of_an_older_failopen_is_converted_even_with_year_9999_in_it(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    assert sync(*sync_args(state, out, since=SINCE, until="2024-05-22T00:00:00Z")).code == 0
    delivered = dict.fromkeys(_delivered(state), "9999-12-31T23:59:59Z")  # --until 9999, once
    state.write_text(json.dumps({"version": 1, "running": False, "pending": {}, "keys": {
        KEY: {"through": "9999-12-31T23:59:59Z", "delivered": delivered, "since": SINCE}}}))
    run = sync(*sync_args(state, out, "--json", until="2024-05-22T01:00:00Z"))
    assert run.code == 6 and run.summary()["cohorts"] == 0, run.err  # nothing twice
    assert json.loads(state.read_text())["version"] == 2
    assert_exactly_once(out, emulator)


def test_a_state_with_an_unreadable_time_is_left_alone(
    sync: Runner, state: Path, out: Path
) -> None:
    body = {"version": 2, "running": False, "pending": {}, "keys": {
        KEY: {"through": "2024-05-10T00:00:00Z", "delivered": {"coh_1": "soon"}, "since": SINCE}}}
    state.write_text(json.dumps(body))
    before = state.read_bytes()
    run = sync(*sync_args(state, out, until="2024-05-22T00:00:00Z"))
    assert run.code == 1 and "is not a valid sync state" in run.err and "Traceback" not in run.err
    assert state.read_bytes() == before and list(out.iterdir()) == []


def test_an_until_in_the_past_after_ids_were_forgotten_writes_nothing_twice(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path
) -> None:
    assert sync(*sync_args(state, out, since=SINCE, until="2024-05-22T00:00:00Z")).code == 0
    assert sync(*sync_args(state, out, until="2024-08-01T00:00:00Z")).code == 6  # a gap
    assert _delivered(state) == {}  # forgotten: delivered more than 60 days before
    for until in ("2024-05-25T00:00:00Z", "2024-07-01T00:00:00Z"):
        run = sync(*sync_args(state, out, "--json", until=until))
        assert run.code == 0 and run.summary()["cohorts"] == 0, run.err
    assert json.loads(state.read_text())["keys"][KEY]["through"] == "2024-08-01T00:00:00Z"
    assert_exactly_once(out, emulator)
