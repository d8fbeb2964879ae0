"""The flag's log records: the events an operator's alerts and JSON logs match on.

``failopen.events.EVENTS`` documents each event's logger, level and fields: a contract, since
alerts match ``event == "failopen.override_set"`` and read its fields, not the message. Each
flag event is produced here the way it happens in production and checked field by field,
together with the state a reader sees at that moment.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from failopen.engine.flag import EnforcementFlag, check_stored_override
from failopen.engine.flag_state import rfc3339
from failopen.events import EVENTS
from failopen.exceptions import StoreError
from failopen.stores.file import FileStore
from failopen.stores.override import Override
from failopen.testing.clock import FakeClock


def documented(event: str) -> set[str]:
    fields = EVENTS[event][3]
    if fields == "as flag_changed":
        fields = EVENTS["failopen.flag_changed"][3]
    return {name.strip() for name in fields.split(",")}


def one(caplog: pytest.LogCaptureFixture, event: str) -> logging.LogRecord:
    found = [r for r in caplog.records if getattr(r, "event", None) == event]
    assert len(found) == 1, [getattr(r, "event", None) for r in caplog.records]
    record = found[0]
    assert record.name == "failopen.flag"
    missing = {name for name in documented(event) if not hasattr(record, name)}
    assert not missing, f"{event} lacks {missing}"
    return record


@pytest.fixture
def flag() -> EnforcementFlag:
    return EnforcementFlag(clock=FakeClock())


def test_placing_a_force_off_logs_the_override_and_the_change(
    flag: EnforcementFlag, caplog: pytest.LogCaptureFixture,
) -> None:
    now = flag.state.since
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        state = flag.force_off("vendor down, per phone", ttl=90.5, set_by="cli")
    placed = one(caplog, "failopen.override_set")
    assert placed.levelno == logging.WARNING
    assert placed.getMessage() == \
        "override placed: enforce=False ttl=90.5s reason=vendor down, per phone"
    assert (placed.enforce, placed.ttl, placed.reason, placed.set_by) == (  # type: ignore[attr-defined]
        False, 90.5, "vendor down, per phone", "cli")
    assert placed.expires_at == rfc3339(now + 90.5)  # type: ignore[attr-defined]
    changed = one(caplog, "failopen.flag_changed")
    assert changed.levelno == logging.WARNING
    assert changed.getMessage() == ("enforcement off: source=override reason='vendor down, per "
                                    f"phone' global_status=None until={rfc3339(now + 90.5)}")
    assert (changed.enforce, changed.source) == (False, "override")  # type: ignore[attr-defined]
    assert state.since == now and state.expires_at == now + 90.5
    assert flag.override is not None and flag.override.set_by == "cli"


def test_a_force_on_without_ttl_logs_ttl_none(
    flag: EnforcementFlag, caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        flag.force_on("attack under way", set_by="django:7")
    placed = one(caplog, "failopen.override_set")
    assert placed.getMessage() == "override placed: enforce=True ttl=none reason=attack under way"
    assert (placed.ttl, placed.expires_at, placed.set_by) == (  # type: ignore[attr-defined]
        None, None, "django:7")
    assert not [r for r in caplog.records if getattr(r, "event", None) == "failopen.flag_changed"]


def test_the_logged_ttl_is_rounded_to_milliseconds(
    flag: EnforcementFlag, caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="failopen.flag"):
        flag.force_on("r", ttl=1.23456)
    assert "ttl=1.235s" in one(caplog, "failopen.override_set").getMessage()


def test_lifting_an_override_logs_what_was_lifted(
    flag: EnforcementFlag, caplog: pytest.LogCaptureFixture,
) -> None:
    flag.force_off("outage", ttl=600)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        state = flag.automatic("vendor back " + "x" * 600)
    lifted = one(caplog, "failopen.override_lifted")
    assert lifted.levelno == logging.WARNING
    assert lifted.getMessage() == "override lifted: vendor back " + "x" * 488
    assert (lifted.enforce, lifted.reason) == (False, "vendor back " + "x" * 488)  # type: ignore[attr-defined]
    changed = one(caplog, "failopen.flag_changed")
    assert changed.levelno == logging.INFO
    assert changed.getMessage() == \
        "enforcement on: source=default reason='no status reading yet' global_status=None"
    assert state.source == "default" and flag.override is None


def test_lifting_when_nothing_is_in_force_logs_no_lift(
    flag: EnforcementFlag, caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        flag.automatic()
    assert not caplog.records


def test_an_override_that_lapses_logs_its_expiry_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)
    flag.force_off("outage", ttl=60)
    expires = rfc3339(clock.time() + 60)
    clock.advance(59.9)
    assert flag.state.source == "override"
    clock.advance(0.1)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        assert (flag.state.source, flag.state.enforce) == ("default", True)
        assert flag.override is None
    expired = one(caplog, "failopen.override_expired")
    assert expired.levelno == logging.WARNING
    assert expired.getMessage() == "override expired: outage"
    assert (expired.enforce, expired.reason, expired.expires_at) == (  # type: ignore[attr-defined]
        False, "outage", expires)
    assert one(caplog, "failopen.flag_changed").levelno == logging.INFO


def test_staleness_is_logged_when_it_begins_and_when_it_ends(
    flag: EnforcementFlag, caplog: pytest.LogCaptureFixture,
) -> None:
    flag.set_automatic(enforce=False, source="watcher", reason="major outage",
                       global_status="major_outage")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        flag.set_stale(True, error="ConnectError: refused")
    stale = one(caplog, "failopen.stale")
    assert stale.levelno == logging.WARNING
    assert stale.getMessage() == (
        "status reading stale: no good status page reading for a while; the flag keeps "
        "enforce=False (major outage); last poll error: ConnectError: refused")
    assert (stale.stale, stale.error, stale.enforce) == (  # type: ignore[attr-defined]
        True, "ConnectError: refused", False)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        flag.set_stale(False)
    ended = one(caplog, "failopen.stale_ended")
    assert ended.levelno == logging.INFO
    assert ended.getMessage() == "status reading fresh again: enforce=False (major outage)"
    assert (ended.stale, ended.error) == (False, None)  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if getattr(r, "event", None) == "failopen.flag_changed"]


def test_a_failing_listener_is_logged_with_its_name_and_the_writer_goes_on(
    flag: EnforcementFlag, caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(old: object, new: object) -> None:
        raise RuntimeError("listener bug")

    flag.add_listener(broken)
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        state = flag.force_on("r")
    failed = one(caplog, "failopen.listener_failed")
    assert failed.levelno == logging.ERROR
    assert failed.callback == repr(broken)[:200]  # type: ignore[attr-defined]
    assert failed.suppressed == 0  # type: ignore[attr-defined]
    assert repr(broken) in failed.getMessage()
    assert state.source == "override"
    flag.remove_listener(broken)
    caplog.clear()
    flag.automatic()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_an_override_shows_the_status_pages_view_beside_it(flag: EnforcementFlag) -> None:
    # A reader of the flag endpoint sees what the page says under the operator's decision.
    flag.set_automatic(enforce=True, source="watcher", reason="ok", global_status="degraded",
                       stale=True, error="timeout")
    state = flag.force_off("outage", ttl=60)
    assert (state.global_status, state.stale, state.error) == ("degraded", True, "timeout")
    assert state.to_dict()["since"] == rfc3339(flag.override.set_at)  # type: ignore[union-attr]


@pytest.mark.parametrize("ttl", [0.5, 1, 3600])
def test_a_short_or_whole_ttl_is_accepted(flag: EnforcementFlag, ttl: float) -> None:
    assert flag.force_on("r", ttl=ttl).expires_at == flag.state.since + ttl


@pytest.mark.parametrize("ttl", [0, -1, True, "60", float("nan")])
def test_a_ttl_that_is_not_positive_seconds_is_refused(flag: EnforcementFlag, ttl: object) -> None:
    with pytest.raises(ValueError, match="override ttl must be positive seconds"):
        flag.force_on("r", ttl=ttl)  # type: ignore[arg-type]
    assert flag.override is None


def test_the_longest_ttls_are_accepted_and_one_more_second_is_not(flag: EnforcementFlag) -> None:
    assert flag.force_on("r", ttl=30 * 86400).source == "override"
    with pytest.raises(ValueError, match="at most 30 days"):
        flag.force_on("r", ttl=30 * 86400 + 1)
    assert flag.force_off("r", ttl=7 * 86400).enforce is False
    with pytest.raises(ValueError, match="at most 7 days"):
        flag.force_off("r", ttl=7 * 86400 + 1)


@pytest.mark.parametrize("ttl", [None, 60.0])
def test_who_placed_an_override_is_kept_with_or_without_ttl(
    flag: EnforcementFlag, ttl: float | None,
) -> None:
    flag.force_on("r", ttl=ttl, set_by="admin-token")
    assert flag.override is not None and flag.override.set_by == "admin-token"
    flag.force_off("r", ttl=ttl, set_by="cli")
    assert flag.override is not None and flag.override.set_by == "cli"


def test_a_stored_override_is_checked_against_now() -> None:
    now = 1_800_000_000.0
    week, skew = 7 * 86400.0, 60.0
    live = Override(enforce=False, reason="r", set_at=now + skew, expires_at=now + week + skew)
    assert check_stored_override(live, now) is live
    assert check_stored_override(live, live.expires_at) is None  # type: ignore[arg-type]
    assert check_stored_override(None, now) is None
    far = Override(enforce=False, reason="r", set_at=now + 100, expires_at=now + week + 100)
    with pytest.raises(StoreError) as raised:
        check_stored_override(far, now)
    assert str(raised.value) == (
        f"an override forcing enforcement off ends {rfc3339(now + week + 100)}, more than "
        "7 days (604800 s) from now; place it again with a ttl")


# -- what the state shows, and the store's failures --------------------------------------------

def test_times_are_utc_with_milliseconds_whatever_the_machines_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert rfc3339(0.999) == "1970-01-01T00:00:00.999Z"
        assert rfc3339(1_800_000_000.5) == "2027-01-15T08:00:00.500Z"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert rfc3339(None) is None


@pytest.mark.parametrize(("value", "shown"), [
    (float("nan"), "invalid time (nan)"), (float("inf"), "invalid time (inf)"),
    (10**20, "invalid time (int)"),
])
def test_a_time_no_calendar_can_show_says_so(value: float, shown: str) -> None:
    assert rfc3339(value) == shown


def test_the_json_state_of_an_override_shows_its_expiry_and_the_page(
    flag: EnforcementFlag, caplog: pytest.LogCaptureFixture,
) -> None:
    flag.set_automatic(enforce=True, source="watcher", reason="ok", global_status="operational")
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        state = flag.force_off("outage", ttl=60)
    shown = state.to_dict()
    assert shown["expires_at"] == rfc3339(state.since + 60)
    assert shown["global_status"] == "operational"
    changed = one(caplog, "failopen.flag_changed")
    assert changed.expires_at == rfc3339(state.since + 60)  # type: ignore[attr-defined]
    assert repr(flag) == "EnforcementFlag(enforce=False, source='override')"


def test_an_error_is_shown_only_while_stale_and_the_newest_one(
    flag: EnforcementFlag, caplog: pytest.LogCaptureFixture,
) -> None:
    fresh = flag.set_automatic(enforce=True, source="watcher", reason="ok",
                               global_status="operational", stale=False, error="old")
    assert fresh.error is None
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        flag.set_stale(True)
    assert one(caplog, "failopen.stale").getMessage().endswith("last poll error: none")
    flag.set_stale(True, error="first")
    flag.set_stale(True, error="second")
    assert flag.state.error == "second"


def test_lifting_without_a_reason_says_override_lifted(
    flag: EnforcementFlag, caplog: pytest.LogCaptureFixture,
) -> None:
    flag.force_on("r")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        flag.automatic()
    assert one(caplog, "failopen.override_lifted").reason == "override lifted"  # type: ignore[attr-defined]


def test_a_listener_failure_names_a_long_listener_cut(
    flag: EnforcementFlag, caplog: pytest.LogCaptureFixture,
) -> None:
    class Listener:
        def __repr__(self) -> str:
            return "L" * 300

        def __call__(self, old: object, new: object) -> None:
            raise RuntimeError("bug")

    flag.add_listener(Listener())
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        flag.force_on("r")
    failed = one(caplog, "failopen.listener_failed")
    assert failed.callback == "L" * 200  # type: ignore[attr-defined]
    assert failed.getMessage() == \
        f"flag listener {'L' * 300} failed (0 more failures since the last line)"


def test_an_unreadable_store_is_logged_and_the_last_override_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "override.json"
    store = FileStore(path)
    flag = EnforcementFlag(store=store, clock=FakeClock())
    flag.force_on("attack")
    path.write_text("{not json")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="failopen.flag"):
        flag.refresh(force=True)
    unreadable = one(caplog, "failopen.store_unreadable")
    assert unreadable.levelno == logging.ERROR
    assert unreadable.error  # type: ignore[attr-defined]
    assert unreadable.getMessage() == \
        f"override store unreadable, keeping the last known override: {unreadable.error}"  # type: ignore[attr-defined]
    assert flag.state.source == "override" and flag.state.reason == "attack"


def test_a_flag_asked_not_to_load_leaves_the_store_to_its_first_refresh(tmp_path: Path) -> None:
    path = tmp_path / "override.json"
    EnforcementFlag(store=FileStore(path), clock=FakeClock()).force_on("attack")
    later = EnforcementFlag(store=FileStore(path), clock=FakeClock(), load=False)
    assert later.state.source == "default"  # Django's first request never waits on a store
    later.refresh()
    assert later.state.source == "override"
    loaded = EnforcementFlag(store=FileStore(path), clock=FakeClock())
    assert loaded.state.source == "override"


class _PlacedWhileRead(FileStore):
    """A real file store; while one refresh reads it, the operator places an override in this
    process (the interleaving a watcher's refresh and an HTTP override route can produce)."""

    flag: EnforcementFlag | None = None

    def load(self) -> Override | None:
        stored = super().load()
        flag, self.flag = self.flag, None
        if flag is not None:
            flag.force_on("placed during the read")
        return stored


@pytest.mark.parametrize("placements_before", [0, 1, 2])
def test_a_refresh_that_read_before_a_placement_does_not_undo_it(
    tmp_path: Path, placements_before: int,
) -> None:
    store = _PlacedWhileRead(tmp_path / "override.json")
    flag = EnforcementFlag(store=store, clock=FakeClock())
    for n in range(placements_before):  # earlier placements and lifts, already settled
        flag.force_on(f"earlier {n}")
        flag.automatic()
    store.flag = flag
    flag.refresh(force=True)  # read what was stored before the placement: nothing
    assert flag.state.source == "override"
    assert flag.state.reason == "placed during the read"
