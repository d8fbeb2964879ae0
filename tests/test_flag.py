"""The enforcement flag: precedence, overrides with expiry, listeners, lock-free reads."""

from __future__ import annotations

import logging
import threading

import pytest

from failopen.engine.flag import EnforcementFlag, FlagState, Override
from failopen.exceptions import StoreError
from failopen.stores.memory import MemoryStore
from failopen.testing.clock import FakeClock


def test_default_state_enforces() -> None:
    flag = EnforcementFlag(clock=FakeClock())
    assert flag.enforce is True
    assert flag.state.source == "default"


def test_watcher_turns_it_off_and_on() -> None:
    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)
    flag.set_automatic(
        enforce=False, source="watcher", reason="outage", global_status="major_outage"
    )
    assert flag.state.enforce is False
    assert flag.state.source == "watcher"
    off_since = flag.state.since
    clock.advance(5)
    flag.set_automatic(
        enforce=False, source="watcher", reason="still", global_status="major_outage"
    )
    assert flag.state.since == off_since, "since marks the transition, not the latest reading"
    flag.set_automatic(enforce=True, source="watcher", reason="ok", global_status="operational")
    assert flag.state.enforce is True
    assert flag.state.since == clock.time()


def test_override_wins_over_the_watcher_and_lapses_by_itself() -> None:
    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)
    flag.set_automatic(
        enforce=False, source="watcher", reason="outage", global_status="major_outage"
    )
    flag.force_on("incident commander says enforce", ttl=60)
    assert flag.state.enforce is True
    assert flag.state.source == "override"
    assert flag.state.expires_at == clock.time() + 60
    # The watcher keeps writing underneath; the override still wins.
    flag.set_automatic(
        enforce=False, source="watcher", reason="outage", global_status="major_outage"
    )
    assert flag.state.enforce is True
    clock.advance(60)
    assert flag.state.enforce is False, "the override lapsed, the watcher's value shows again"
    assert flag.state.source == "watcher"


def test_force_off_and_back_to_automatic() -> None:
    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)
    flag.force_off("vendor confirmed outage by phone")
    assert flag.state.enforce is False
    assert flag.state.expires_at == clock.time() + 3600
    flag.automatic("vendor back")
    assert flag.state.enforce is True
    assert flag.state.source == "default"
    assert flag.override is None


# --- forcing enforcement off always ends -------------------------------------------------------

HOUR, WEEK = 3600.0, 7 * 86400.0


def test_force_off_without_a_ttl_lapses_after_an_hour() -> None:
    clock = FakeClock()
    flag = EnforcementFlag(store=MemoryStore(), clock=clock)
    state = flag.force_off("vendor down, ticket 77")
    assert (state.enforce, state.expires_at) == (False, clock.time() + HOUR)
    assert flag.override is not None and flag.override.expires_at == clock.time() + HOUR
    clock.advance(HOUR - 1)
    assert flag.enforce is False
    clock.advance(1)
    assert flag.enforce is True
    assert flag.state.source == "default"


def test_force_off_lasts_at_most_seven_days() -> None:
    clock = FakeClock()
    store = MemoryStore()
    flag = EnforcementFlag(store=store, clock=clock)
    assert flag.force_off("long incident", ttl=WEEK).expires_at == clock.time() + WEEK
    flag.automatic()
    for ttl in (WEEK + 1, 30 * 86400.0, float("inf")):
        with pytest.raises(ValueError, match=r"at most 7 days \(604800 s\)"):
            flag.force_off("forever, please", ttl=ttl)
    assert (flag.enforce, flag.override, store.load()) == (True, None, None)


def test_force_on_may_be_open_ended() -> None:
    flag = EnforcementFlag(clock=FakeClock())
    state = flag.force_on("policy: always enforce")
    assert (state.enforce, state.expires_at) == (True, None)
    with pytest.raises(ValueError, match="at most 30 days"):
        flag.force_on("x", ttl=31 * 86400.0)


@pytest.mark.parametrize(
    "stored",
    [
        pytest.param({"enforce": False, "reason": "old", "set_at": 1.8e9}, id="no-expiry"),
        pytest.param({"enforce": False, "reason": "old", "set_at": 1.8e9, "expires_at": None},
                     id="null-expiry"),
        pytest.param({"enforce": False, "reason": "old", "set_at": 1.8e9,
                      "expires_at": 1.8e9 + WEEK + 2}, id="too-long"),
    ],
)
def test_a_stored_force_off_that_would_not_end_is_refused(stored: dict[str, object]) -> None:
    with pytest.raises(StoreError, match="7 days"):
        Override.from_json(stored)


def test_a_stored_force_off_set_in_the_future_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """set_at far ahead keeps a seven-day window from ending for years: refused on load."""
    clock = FakeClock()
    store = MemoryStore()
    later = clock.time() + 365 * 86400.0
    store.save(Override(False, "planted", set_at=later, expires_at=later + HOUR))
    with caplog.at_level(logging.ERROR, logger="failopen.flag"):
        flag = EnforcementFlag(store=store, clock=clock)
    assert flag.enforce is True and flag.override is None
    assert "7 days" in caplog.text
    with pytest.raises(StoreError, match="7 days"):
        flag.apply_override(store.load())


def test_override_ttl_must_be_positive() -> None:
    flag = EnforcementFlag(clock=FakeClock())
    with pytest.raises(ValueError, match="ttl"):
        flag.force_off("x", ttl=0)
    assert flag.enforce is True


def test_listeners_see_every_transition_and_a_failing_one_is_contained(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flag = EnforcementFlag(clock=FakeClock())
    seen: list[tuple[bool, bool, str]] = []

    def broken(old: FlagState, new: FlagState) -> None:
        raise RuntimeError("listener bug")

    flag.add_listener(broken)
    flag.add_listener(lambda old, new: seen.append((old.enforce, new.enforce, new.source)))
    with caplog.at_level(logging.ERROR, logger="failopen.flag"):
        flag.set_automatic(
            enforce=False, source="watcher", reason="o", global_status="major_outage"
        )
        flag.set_automatic(
            enforce=False, source="watcher", reason="o", global_status="major_outage"
        )
        flag.force_on("ops")
        flag.automatic()
    assert seen == [(True, False, "watcher"), (False, True, "override"), (True, False, "watcher")]
    assert "listener bug" in caplog.text


def test_listener_may_write_the_flag_without_deadlock() -> None:
    flag = EnforcementFlag(clock=FakeClock())

    def reenforce(old: FlagState, new: FlagState) -> None:
        if not new.enforce and new.source == "watcher":
            flag.force_on("policy: never bypass")

    flag.add_listener(reenforce)
    flag.set_automatic(enforce=False, source="watcher", reason="o", global_status="major_outage")
    assert flag.state.enforce is True
    assert flag.state.source == "override"


def test_stale_marking_keeps_the_value() -> None:
    flag = EnforcementFlag(clock=FakeClock())
    flag.set_automatic(enforce=False, source="watcher", reason="o", global_status="major_outage")
    flag.set_stale(True)
    assert flag.state.stale is True
    assert flag.state.enforce is False


def test_override_is_shared_through_the_store() -> None:
    clock = FakeClock()
    store = MemoryStore()
    writer = EnforcementFlag(store=store, clock=clock)
    reader = EnforcementFlag(store=store, clock=clock)
    writer.force_off("ops", ttl=30)
    assert reader.enforce is True, "another process learns of it on refresh, not by magic"
    reader.refresh()
    assert reader.enforce is False
    writer.automatic()
    reader.refresh()
    assert reader.enforce is True


def test_expired_override_in_store_is_ignored() -> None:
    clock = FakeClock()
    store = MemoryStore()
    store.save(
        Override(
            enforce=False, reason="old", set_at=clock.time() - 100, expires_at=clock.time() - 1
        )
    )
    flag = EnforcementFlag(store=store, clock=clock)
    assert flag.enforce is True


def test_unreadable_store_keeps_the_last_override(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(MemoryStore):
        def changed(self) -> bool:
            return True

        def load(self) -> Override | None:
            raise StoreError("disk on fire")

    store = Broken()
    flag = EnforcementFlag(clock=FakeClock())
    flag._store = store
    flag.apply_override(Override(True, "ops", flag.state.since))
    with caplog.at_level(logging.ERROR):
        flag.refresh()
    assert flag.state.source == "override"
    assert "disk on fire" in caplog.text


def test_override_from_json_rejects_garbage() -> None:
    for bad in (None, [], {"enforce": "no", "set_at": 1}, {"set_at": 1}, {"enforce": True}):
        with pytest.raises(StoreError):
            Override.from_json(bad)


def test_reads_are_consistent_under_concurrent_writes() -> None:
    flag = EnforcementFlag(clock=FakeClock())
    stop = threading.Event()
    torn: list[FlagState] = []

    def writer() -> None:
        on = True
        while not stop.is_set():
            flag.set_automatic(
                enforce=on,
                source="watcher",
                reason=f"enforce={on}",
                global_status="operational" if on else "major_outage",
            )
            on = not on

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(20_000):
            state = flag.state
            if state.reason != f"enforce={state.enforce}" and state.source != "default":
                torn.append(state)
    finally:
        stop.set()
        thread.join()
    assert torn == []


def test_to_dict_shape() -> None:
    flag = EnforcementFlag(clock=FakeClock(start=0))
    data = flag.state.to_dict()
    assert data["since"] == "1970-01-01T00:00:00.000Z"
    assert set(data) >= {"enforce", "source", "reason", "since", "stale"}


def test_listeners_hear_staleness_and_a_replaced_override() -> None:
    flag = EnforcementFlag(clock=FakeClock())
    seen: list[FlagState] = []
    flag.add_listener(lambda old, new: seen.append(new))
    flag.set_stale(True)
    flag.force_off("first reason", ttl=60)
    flag.force_off("second reason", ttl=120)
    assert [s.stale for s in seen[:1]] == [True]
    assert [s.reason for s in seen[1:]] == ["first reason", "second reason"]


# --- every transition is logged once (issue 9, E17) -----------------------------------------------


def transitions(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records
            if r.name == "failopen.flag" and r.getMessage().startswith("enforcement ")]


def test_every_transition_is_logged_once_warning_off_info_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flag = EnforcementFlag(clock=FakeClock())
    with caplog.at_level(logging.DEBUG, logger="failopen"):
        for _ in range(3):  # the same outage reading, poll after poll: one transition
            flag.set_automatic(enforce=False, source="watcher", reason="global component "
                               "major_outage", global_status="major_outage")
        flag.set_stale(True, error="StatusUnavailable: reset")  # staleness is not a transition
        flag.set_automatic(enforce=False, source="confirmed", reason="global component "
                           "partial_outage", global_status="partial_outage")
        flag.set_automatic(enforce=True, source="watcher", reason="global component operational",
                           global_status="operational")
        flag.set_automatic(enforce=True, source="watcher", reason="global component operational",
                           global_status="operational")
    assert transitions(caplog) == [
        (logging.WARNING, "enforcement off: source=watcher reason='global component "
                          "major_outage' global_status=major_outage"),
        (logging.INFO, "enforcement on: source=watcher reason='global component operational' "
                       "global_status=operational"),
    ]


def test_overrides_are_transitions_too_and_say_until_when(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(start=0)
    flag = EnforcementFlag(clock=clock)
    with caplog.at_level(logging.INFO, logger="failopen"):
        flag.force_off("ops: vendor down\nfake line", ttl=60)
        clock.advance(61)
        assert flag.enforce is True  # lapsed on read
        flag.force_on("ops: hold")  # already enforcing: no transition
    assert transitions(caplog) == [
        (logging.WARNING, "enforcement off: source=override reason='ops: vendor down\\nfake line'"
                          " global_status=None until=1970-01-01T00:01:00.000Z"),
        (logging.INFO, "enforcement on: source=default reason='no status reading yet' "
                       "global_status=None"),
    ]


def test_another_process_override_is_logged_where_it_takes_effect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    clock = FakeClock()
    server = EnforcementFlag(store=store, clock=clock)
    EnforcementFlag(store=store, clock=clock).force_off("ops", ttl=600)  # the CLI, elsewhere
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="failopen"):
        server.refresh(force=True)
        server.refresh(force=True)
    assert [level for level, _ in transitions(caplog)] == [logging.WARNING]


def test_the_state_carries_the_poll_error_only_while_stale() -> None:
    flag = EnforcementFlag(clock=FakeClock())
    assert flag.state.to_dict()["error"] is None
    flag.set_stale(False, error="ignored while fresh")
    assert flag.state.error is None
    flag.set_stale(True, error="StatusUnavailable: reset")
    assert flag.state.to_dict()["error"] == "StatusUnavailable: reset"
    flag.force_off("ops", ttl=60)
    assert flag.state.error == "StatusUnavailable: reset", "shown under an override too"
    flag.automatic()
    flag.set_automatic(enforce=True, source="watcher", reason="ok", global_status="operational")
    assert (flag.state.stale, flag.state.error) == (False, None)


def test_an_off_state_says_when_enforcement_last_resumed() -> None:
    """``resumed_at`` (issue 31, item A3): None until this process sees enforcement resume; the
    start-up default is no evidence, the first reading that enforcement is on is; an override
    lifted back to enforcing is a resumption even when the automatic side's ``since`` is older."""
    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)
    flag.set_automatic(enforce=False, source="watcher", reason="outage", global_status="major")
    assert flag.state.resumed_at is None, "started during an outage: no resumption seen"
    clock.advance(10)
    flag.set_automatic(enforce=True, source="watcher", reason="ok", global_status="operational")
    resumed = clock.time()
    clock.advance(10)
    flag.force_off("outage 2", ttl=60)
    assert flag.state.resumed_at == resumed
    clock.advance(5)
    flag.set_automatic(enforce=True, source="watcher", reason="ok", global_status="operational")
    assert flag.state.resumed_at == resumed, "unchanged while the override keeps it off"
    flag.automatic("lifted")
    lifted = clock.time()
    assert flag.state.enforce and flag.state.since < lifted
    clock.advance(5)
    flag.set_automatic(enforce=False, source="watcher", reason="outage 3", global_status="major")
    assert flag.state.resumed_at == lifted, "the lift, not the automatic side's older since"
    clock.advance(5)
    flag.set_stale(True, error="timeout")
    assert flag.state.resumed_at == lifted


def test_the_first_reading_that_enforcement_is_on_counts_as_a_resumption() -> None:
    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)
    clock.advance(3)
    flag.set_automatic(enforce=True, source="watcher", reason="ok", global_status="operational")
    first = clock.time()
    clock.advance(3)
    flag.set_automatic(enforce=True, source="watcher", reason="ok", global_status="operational")
    flag.set_automatic(enforce=False, source="watcher", reason="outage", global_status="major")
    assert flag.state.resumed_at == first


def test_an_outage_dated_before_the_resumption_moves_the_resumption_back() -> None:
    """An override placed by a machine whose clock is behind this one's dates outage 2 before
    this process saw outage 1 end: the resumption is read no later than outage 2's start, or
    every challenge issued in outage 2 (each carrying that start) would be refused."""
    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)
    flag.set_automatic(enforce=True, source="watcher", reason="ok", global_status="operational")
    flag.force_off("outage 1", ttl=60)
    outage_1 = flag.state.since
    clock.advance(10)
    flag.automatic("recovered")
    clock.advance(2)
    behind = Override(False, "outage 2", clock.time() - 5, clock.time() + 60)
    flag.apply_override(behind)
    assert flag.state.since == behind.set_at
    assert flag.state.resumed_at == behind.set_at
    assert outage_1 < flag.state.resumed_at, "outage 1 still began before it"
