"""The emulator playing time: cohorts listed from their ``created_at`` on (late ones included),
cohorts added while it runs, and ``unknown_fields`` reaching cohorts already served. Every test
serves the emulator on loopback and drives its clock."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from failopen.cli.command import main
from failopen.testing.clock import FakeClock
from failopen.testing.rai_emulator import RaiEmulator

P = "/api/rai/v1"
DAY = 86_400.0
BEFORE_THE_DATA = 1_600_000_000.0  # 2020: before the default data's 2024 windows
FAILOPEN = Path(sys.executable).with_name("failopen")


def stamp(seconds: float) -> str:
    from failopen.testing._rai_data import format_rfc3339

    return format_rfc3339(int(seconds * 1000), fraction=False)


def seconds_of(text: str) -> float:
    from failopen.testing._rai_data import parse_rfc3339

    ms = parse_rfc3339(text)
    assert ms is not None
    return ms / 1000


class Site:
    """The emulator on loopback, with its control route, and a raw client of both."""

    def __init__(self, emulator: RaiEmulator) -> None:
        self.emulator = emulator
        self.server = emulator.serve(control=True)
        self.url = self.server.url
        self.http = httpx.Client(base_url=self.url, timeout=10)
        self.auth = self.authorize()

    def authorize(self) -> dict[str, str]:
        token = self.http.post(f"{P}/authorize", json={
            "client_id": "test-client", "client_secret": "test-secret"}).json()["access_token"]
        return {"Authorization": f"Bearer {token}"}

    def get(self, path: str, **params: Any) -> httpx.Response:
        reply = self.http.get(P + path, headers=self.auth, params=params)
        if reply.status_code == 401:  # the token expired as the clock moved on
            self.auth = self.authorize()
            reply = self.http.get(P + path, headers=self.auth, params=params)
        return reply

    def listed(self, kind: str, start: str, end: str) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        params: dict[str, Any] = {"from": start, "to": end, "page_size": 1000,
                                  "public_key": list(self.emulator.public_keys)}
        while True:
            reply = self.get(f"/{kind}", **params)
            assert reply.status_code == 200, reply.text
            records += reply.json()[kind]
            if not reply.json()["next_page_token"]:
                return records
            params["page_token"] = reply.json()["next_page_token"]

    def cohort_ids(self, start: str, end: str) -> list[str]:
        return [c["cohort_id"] for c in self.listed("cohorts", start, end)]

    def control(self, body: Any) -> httpx.Response:
        return self.http.post("/_control", json=body)

    def close(self) -> None:
        self.http.close()
        self.server.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sites() -> Iterator[list[Site]]:
    made: list[Site] = []
    yield made
    for site in made:
        site.close()


def serve(sites: list[Site], emulator: RaiEmulator) -> Site:
    sites.append(Site(emulator))
    return sites[-1]


def window_of(emulator: RaiEmulator) -> tuple[str, str]:
    start, end = emulator.data_window
    assert seconds_of(end) - seconds_of(start) <= 30 * DAY
    return start, end


# --- played time --------------------------------------------------------------------------------


def test_played_time_lists_each_cohort_from_its_created_at_late_ones_included(
    clock: FakeClock, sites: list[Site]
) -> None:
    emulator = RaiEmulator(live=True, clock=clock, cohorts=40, span_days=10,
                           start=stamp(clock.time() - 6 * DAY), sessions_per_cohort=(3, 9))
    site = serve(sites, emulator)
    start, end = window_of(emulator)
    began = clock.time()
    records: dict[str, dict[str, Any]] = {}
    lateness = []
    seen: dict[str, float] = {}
    for _ in range(24 * 14):  # hourly, to past the last cohort's created_at
        now = clock.time()
        listed = site.listed("cohorts", start, end)
        for cohort in listed:
            created = seconds_of(cohort["created_at"])
            assert created <= now, cohort  # never listed before its created_at
            seen.setdefault(cohort["cohort_id"], now)
            records[cohort["cohort_id"]] = cohort
        sessions = site.listed("sessions", start, end)
        assert {s["cohort_id"] for s in sessions} <= {c["cohort_id"] for c in listed}
        clock.advance(3600)
    assert len(records) == 40
    for cohort_id, cohort in records.items():
        created = seconds_of(cohort["created_at"])
        # Listed within the hour its created_at passed: appears when created, not before.
        assert created <= seen[cohort_id] < created + 3600 or created <= began
        lateness.append(created - seconds_of(cohort["cohort_window_start"]))
    late = [gap for gap in lateness if gap >= 2 * DAY]
    assert 3 <= len(late) <= 20 and max(lateness) <= 5 * DAY + 3600  # some cohorts late, days


def test_a_cohort_created_3_days_after_its_window_is_absent_until_then(
    clock: FakeClock, sites: list[Site]
) -> None:
    emulator = RaiEmulator(live=True, clock=clock, cohorts=6, span_days=6)
    site = serve(sites, emulator)
    window_start = clock.time() - 3 * DAY
    created = clock.time() + 3600
    added = emulator.add_cohort(stamp(window_start), created_at=stamp(created), sessions=7)
    cohort_id = added["cohort_id"]
    assert seconds_of(added["created_at"]) - seconds_of(added["cohort_window_start"]) > 3 * DAY
    start, end = stamp(window_start - DAY), stamp(clock.time())

    def everywhere() -> list[bool]:
        return [
            cohort_id in site.cohort_ids(start, end),
            any(s["cohort_id"] == cohort_id for s in site.listed("sessions", start, end)),
            site.get(f"/cohorts/{cohort_id}").status_code == 200,
            site.get(f"/cohorts/{cohort_id}/sessions").status_code == 200,
            bool(site.get("/cohorts", **{"from": start, "to": end, "public_key": "pk_live_test",
                                         "cohort_id": cohort_id}).json()["cohorts"]),
        ]

    assert everywhere() == [False] * 5
    assert site.get(f"/cohorts/{cohort_id}").json()["error"]["code"] == "not_found"
    clock.advance(3599)
    assert everywhere() == [False] * 5
    clock.advance(1)
    assert everywhere() == [True] * 5
    assert len(site.get(f"/cohorts/{cohort_id}/sessions").json()["sessions"]) == 7


def test_played_time_starts_its_span_before_now_by_default(clock: FakeClock) -> None:
    emulator = RaiEmulator(live=True, clock=clock, span_days=4)
    start, _ = emulator.data_window
    assert seconds_of(start) == int(clock.time() - 4 * DAY)
    relative = RaiEmulator(live=True, clock=clock, start="now-2d", span_days=3)
    assert seconds_of(relative.data_window[0]) == int(clock.time() - 2 * DAY)


# --- cohorts added while it runs ----------------------------------------------------------------


def test_a_cohort_added_through_the_command_appears_at_its_created_at(
    clock: FakeClock, sites: list[Site], capsys: pytest.CaptureFixture[str]
) -> None:
    emulator = RaiEmulator(clock=clock, cohorts=4)  # the default mode takes added cohorts too
    site = serve(sites, emulator)
    before, generated = set(emulator.cohort_ids()), emulator.data_window
    code = main(["emulate", "rai", "--url", site.url, "--add-cohort", "now-3d",
                 "--created-at", "now+2h", "--sessions", "25"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (cohort_id,) = set(emulator.cohort_ids()) - before
    assert cohort_id in out and "25 sessions" in out and stamp(clock.time() + 7200) in out
    start, end = stamp(clock.time() - 4 * DAY), stamp(clock.time())
    assert cohort_id not in site.cohort_ids(start, end)
    clock.advance(7200)
    (cohort,) = [c for c in site.listed("cohorts", start, end) if c["cohort_id"] == cohort_id]
    assert cohort["cohort_window_start"] == stamp(clock.time() - 7200 - 3 * DAY)
    assert cohort["cohort_window_end"] == stamp(clock.time() - 7200 - 3 * DAY + 3600)
    assert cohort["session_count"] == 25
    sessions = site.get(f"/cohorts/{cohort_id}/sessions").json()["sessions"]
    assert len(sessions) == 25 and len({s["session_id"] for s in sessions}) == 25
    low, high = (seconds_of(cohort[f"cohort_window_{edge}"]) for edge in ("start", "end"))
    assert all(low <= seconds_of(s["session_created"]) < high for s in sessions)
    # The other cohorts are as they were; the data's window now covers the added one too.
    assert set(site.cohort_ids(*generated)) == before
    assert emulator.data_window == (generated[0], stamp(high + 1))


def test_the_control_route_adds_cohorts_and_shows_what_is_listed(
    clock: FakeClock, sites: list[Site]
) -> None:
    emulator = RaiEmulator(live=True, clock=clock, cohorts=5, span_days=2,
                           start=stamp(clock.time() - DAY))
    site = serve(sites, emulator)
    state = site.http.get("/_control").json()
    assert state["fake"] == "rai" and state["live"] is True and state["cohorts"] == 5
    assert state["now"] == stamp(clock.time()) and 0 <= state["listed"] < 5
    reply = site.control({"add_cohort": {"window_start": "now-1h", "window_end": "now",
                                         "sessions": 3}})
    assert reply.status_code == 200, reply.text
    added = reply.json()["added"]
    assert added["created_at"] == stamp(clock.time()) and added["session_count"] == 3
    assert reply.json()["cohorts"] == 6 and reply.json()["listed"] == state["listed"] + 1
    assert added["cohort_id"] in site.cohort_ids(stamp(clock.time() - 2 * DAY), stamp(clock.time()))


@pytest.mark.parametrize(("body", "message"), [
    ({"add_cohort": {}}, "window_start"),
    ({"add_cohort": "now"}, "an object"),
    ({"add_cohort": {"window_start": "yesterday"}}, "RFC 3339"),
    ({"add_cohort": {"window_start": "now-1d", "sessions": -1}}, "sessions"),
    ({"add_cohort": {"window_start": "now-1d", "sessions": 10**9}}, "1000000"),
    ({"add_cohort": {"window_start": "now-1d", "sessions": "5"}}, "sessions"),
    ({"add_cohort": {"window_start": "now-1d", "sessions": True}}, "sessions"),
    ({"add_cohort": {"window_start": "now-1d", "created_at": "now-2d"}}, "created_at"),
    ({"add_cohort": {"window_start": "now-1d", "window_end": "now-2d"}}, "window_end"),
    ({"add_cohort": {"window_start": "now-40d", "window_end": "now"}}, "30 days"),
    ({"add_cohort": {"window_start": "now-99999999999d"}}, "1970"),
    ({"add_cohort": {"window_start": "now+99999999d"}}, "9999"),
    ({"add_cohort": {"window_start": "now-" + "9" * 306 + "s"}}, "outside 1970"),
    ({"add_cohort": {"window_start": "now-1e3d"}}, "not a duration"),
    ({"add_cohort": {"window_start": "now-1d", "colour": "red"}}, "colour"),
    ({"add_cohort": {"window_start": ["now"]}}, "window_start"),
    ({"unknown_fields": "yes"}, "true or false"),
    ({"unknown_fields": True, "add_cohort": {"window_start": "nope"}}, "window_start"),
    ({"cohort_count": 3}, "unknown key"),
    ([], "JSON object"),
])  # fmt: skip
def test_bad_control_bodies_are_400_and_change_nothing(
    clock: FakeClock, sites: list[Site], body: Any, message: str
) -> None:
    emulator = RaiEmulator(clock=clock, cohorts=3)
    site = serve(sites, emulator)
    reply = site.control(body)
    assert reply.status_code == 400 and message in reply.json()["error"], reply.text
    assert emulator.cohort_count == 3 and emulator.unknown_fields is False


def test_added_cohorts_are_bounded(
    clock: FakeClock, sites: list[Site], monkeypatch: pytest.MonkeyPatch
) -> None:
    from failopen.testing import _rai_time

    monkeypatch.setattr(_rai_time, "MAX_ADDED", 2)
    site = serve(sites, RaiEmulator(clock=clock, cohorts=1))
    for _ in range(2):
        assert site.control({"add_cohort": {"window_start": "now-1d"}}).status_code == 200
    reply = site.control({"add_cohort": {"window_start": "now-1d"}})
    assert reply.status_code == 400 and "at most 2 cohorts" in reply.json()["error"]
    assert site.emulator.cohort_count == 3


def test_the_control_route_refuses_a_host_that_is_not_loopback(
    clock: FakeClock, sites: list[Site]
) -> None:
    site = serve(sites, RaiEmulator(clock=clock, cohorts=1))
    reply = site.http.post("/_control", json={"add_cohort": {"window_start": "now-1d"}},
                           headers={"Host": "attacker.example"})
    assert reply.status_code == 403 and site.emulator.cohort_count == 1


# --- unknown_fields on cohorts already served ---------------------------------------------------


def test_unknown_fields_apply_to_a_cohort_already_served(
    clock: FakeClock, sites: list[Site]
) -> None:
    emulator = RaiEmulator(clock=clock, cohorts=3, sessions_per_cohort=5)
    site = serve(sites, emulator)
    start, end = emulator.data_window
    cohort_id = site.cohort_ids(start, end)[0]
    assert "future_field" not in site.get(f"/cohorts/{cohort_id}").json()
    assert "future_field" not in site.get(f"/cohorts/{cohort_id}/sessions").json()["sessions"][0]
    emulator.unknown_fields = True  # the attribute, as a test sets it
    assert "future_field" in site.get(f"/cohorts/{cohort_id}").json()
    page = site.get(f"/cohorts/{cohort_id}/sessions").json()
    assert "future_top_level" in page and all("future_field" in s for s in page["sessions"])
    assert all("future_field" in c for c in site.listed("cohorts", start, end))
    reply = site.control({"unknown_fields": False})  # the control route, as a user does
    assert reply.status_code == 200 and reply.json()["unknown_fields"] is False
    assert "future_field" not in site.get(f"/cohorts/{cohort_id}").json()
    assert not any("future_field" in s for s in site.listed("sessions", start, end))


def test_set_unknown_fields_through_the_command(
    clock: FakeClock, sites: list[Site], capsys: pytest.CaptureFixture[str]
) -> None:
    emulator = RaiEmulator(clock=clock, cohorts=2)
    site = serve(sites, emulator)
    cohort_id = emulator.cohort_ids()[0]
    assert site.get(f"/cohorts/{cohort_id}").status_code == 200
    assert main(["emulate", "rai", "--url", site.url, "--set", "unknown_fields=true"]) == 0
    assert "unknown_fields=true" in capsys.readouterr().out
    assert "future_field" in site.get(f"/cohorts/{cohort_id}").json()
    assert main(["emulate", "rai", "--url", site.url, "--show"]) == 0
    assert "2 cohorts" in capsys.readouterr().out


# --- the default mode ---------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "digest"), [
    ({}, "d015d12cbdd6c09a5c3271f24bbce6fdc1ab7bd663b614185e392fd653306d6b"),
    ({"seed": 7, "cohorts": 30, "public_keys": ("pk_a", "pk_b"), "unknown_fields": True},
     "bae8ede76638c23cd7fbc603426e751558207eef79db8c832875fb5c6501cf48"),
])  # fmt: skip
def test_the_default_mode_serves_what_it_served_before(
    sites: list[Site], kwargs: dict[str, Any], digest: str
) -> None:
    # Digests of every answer but its page tokens (random), taken on the emulator before it
    # played time; a clock before the data's 2024 windows: the default mode lists every cohort
    # whatever its created_at.
    emulator = RaiEmulator(clock=FakeClock(start=BEFORE_THE_DATA), **kwargs)
    site = serve(sites, emulator)
    h = hashlib.sha256()

    def pages(path: str, **params: Any) -> None:
        while True:
            body = site.get(path, **params).json()
            token = body.pop("next_page_token")
            h.update(json.dumps(body).encode())
            if not token:
                return
            params["page_token"] = token

    start, end = emulator.data_window
    for kind in ("cohorts", "sessions"):
        pages(f"/{kind}", **{"from": start, "to": end, "page_size": 1000,
                             "public_key": list(emulator.public_keys)})
    for cohort_id in emulator.cohort_ids():
        h.update(site.get(f"/cohorts/{cohort_id}").content)
        pages(f"/cohorts/{cohort_id}/sessions", page_size=1000)
    assert h.hexdigest() == digest


# --- the command's arguments --------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (["--span-days", "1e9"], "--span-days"),
    (["--span-days", "0"], "--span-days"),
    (["--span-days", "nan"], "--span-days"),
    (["--live", "--start", "yesterday"], "RFC 3339"),
    (["--start", "9999-12-01T00:00:00Z", "--span-days", "60"], "after 9999-12-31"),
    (["--start", "now-99999999d"], "outside 1970"),
    (["--add-cohort", "now-1d", "--sessions", "2000000"], "--sessions"),
    (["--sessions", "5"], "--sessions goes with --add-cohort"),
    (["--created-at", "now", "--port", "1"], "--created-at goes with --add-cohort"),
    (["--live", "--set", "unknown_fields=true"], "--live configures a new"),
    (["--set", "colour=red"], "unknown_fields=true|false"),
    (["--set", "unknown_fields=maybe"], "true or false"),
    (["--port", "0", "--show"], "--port 0"),
])  # fmt: skip
def test_bad_arguments_are_refused_with_a_reason(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        code = main(["emulate", "rai", *argv])
        raise SystemExit(code)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_control_of_nothing_listening_is_a_clear_error(
    capsys: pytest.CaptureFixture[str]
) -> None:
    from failopen.testing._server import LoopbackServer

    with LoopbackServer(lambda request: None) as server:  # type: ignore[arg-type, return-value]
        url = server.url
    assert main(["emulate", "rai", "--url", url, "--show"]) == 2
    assert "nothing listens" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not FAILOPEN.exists(), reason="the failopen entry point is not installed")
def test_the_rehearsal_of_the_docs_runs(tmp_path: Path) -> None:
    """docs/rai.md, "Rehearse an hourly job": the emulator on the wall clock, a sync, a late
    cohort added, the same sync again delivering it."""
    served = subprocess.Popen(
        [str(FAILOPEN), "emulate", "rai", "--live", "--start", "now-2d", "--span-days", "3",
         "--cohorts", "72", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert served.stdout is not None
        banner = [served.stdout.readline() for _ in range(9)]
        url = banner[1].strip().split("=", 1)[1]
        assert banner[6].startswith("# played time: ") and " of 72 cohorts listed now" in banner[6]
        sync = banner[7].strip("# \n").split()
        assert sync[:3] == ["failopen", "rai", "sync"] and "--since" in sync
        assert banner[8].strip().endswith(f"--sessions 40 --url {url}")
        env = {**os.environ, "FAILOPEN_RAI_BASE_URL": url, "FAILOPEN_RAI_CLIENT_ID": "test-client",
               "FAILOPEN_RAI_CLIENT_SECRET": "test-secret"}
        (tmp_path / "rai-out").mkdir()

        def run(*argv: str) -> str:
            done = subprocess.run([str(FAILOPEN), *argv], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            return done.stdout

        first = json.loads(run(*sync[1:], "--json"))
        assert first["cohorts"] >= 1 and first["exit_code"] == 0
        added = run("emulate", "rai", "--url", url, "--add-cohort", "now-3d", "--created-at",
                    "now", "--sessions", "40")
        assert "40 sessions" in added
        again = [a for a in sync[1:] if a != "--since"]
        again.remove(sync[sync.index("--since") + 1])
        second = json.loads(run(*again, "--json"))
        assert (second["cohorts"], second["sessions"]) == (1, 40)
    finally:
        served.send_signal(signal.SIGINT)
        served.communicate(timeout=30)
