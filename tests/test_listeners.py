"""``FailOpen.on_change``: transitions reach callbacks on their own thread, in order; a callback
that raises or hangs breaks neither the watcher nor the thread that changed the flag. And the
chat-webhook recipe in examples/chat_alerts.py, against a loopback HTTP server."""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from failopen import Config, FailOpen, FlagState
from failopen.engine.listeners import ChangeListeners
from failopen.testing import FakeClock, FakeRequest, FakeStatusPage, LoopbackServer, Reply

ROOT = Path(__file__).parent.parent
STATUS_URL = "https://status.example.com"
WEBHOOK_SECRET = "T000/B000/XXXXsecretXXXX"


@pytest.fixture
def page() -> FakeStatusPage:
    page = FakeStatusPage()
    page.set_global("operational")
    return page


@pytest.fixture
def fo(page: FakeStatusPage) -> Iterator[FailOpen]:
    runtime = FailOpen(Config(status_url=STATUS_URL, metrics="off"),
                       status_transport=page.transport(), clock=FakeClock())
    yield runtime
    runtime.stop()


Change = tuple[FlagState, FlagState, str]


def recorder() -> tuple[list[Change], object]:
    seen: list[Change] = []

    def record(old: FlagState, new: FlagState) -> None:
        seen.append((old, new, threading.current_thread().name))

    return seen, record


def test_callbacks_get_old_and_new_states_in_order_off_the_callers_thread(fo: FailOpen) -> None:
    seen, record = recorder()
    fo.on_change(record)  # type: ignore[arg-type]
    fo.flag.force_off("vendor ticket 1", ttl=60)
    fo.flag.automatic("done")
    assert fo.flush_listeners()
    assert [(old.enforce, new.enforce, new.source) for old, new, _ in seen] == [
        (True, False, "override"), (False, True, "default")]
    assert seen[0][1].reason == "vendor ticket 1"
    assert {thread for _, _, thread in seen} == {"failopen.listeners"}


def test_unsubscribing_stops_the_calls(fo: FailOpen) -> None:
    seen, record = recorder()
    unsubscribe = fo.on_change(record)  # type: ignore[arg-type]
    fo.flag.force_off("one")
    assert fo.flush_listeners()
    unsubscribe()
    unsubscribe()  # twice is harmless
    fo.flag.automatic()
    assert fo.flush_listeners()
    assert len(seen) == 1


def test_a_callback_that_raises_is_logged_and_the_next_still_runs(
    fo: FailOpen, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(old: FlagState, new: FlagState) -> None:
        raise RuntimeError("listener bug")

    seen, record = recorder()
    fo.on_change(broken)
    fo.on_change(record)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="failopen.listeners"):
        for n in range(5):
            fo.flag.force_off(f"change {n}")
        assert fo.flush_listeners()
    assert len(seen) == 5
    failures = [r for r in caplog.records if getattr(r, "event", None) ==
                "failopen.listener_failed"]
    assert len(failures) == 1  # paced: one line per minute, with a count on the next


def test_a_hanging_callback_holds_neither_the_override_nor_the_watcher(
    fo: FailOpen, page: FakeStatusPage
) -> None:
    release = threading.Event()
    placed = threading.Event()
    ran_after_placement: list[bool] = []

    def slow(old: FlagState, new: FlagState) -> None:
        # Called synchronously, it would run before force_off returned: placed not yet set.
        ran_after_placement.append(placed.wait(2))
        release.wait(10)

    fo.on_change(slow)
    fo.flag.force_off("operator")  # the thread of an override endpoint's request
    placed.set()
    # The watcher goes on polling and changing the flag while the callback hangs.
    page.set_global("major_outage")
    assert fo.poll_now().reading == "impaired"
    assert fo.flag.automatic_state.enforce is False
    fo.flag.automatic()
    assert fo.state.enforce is False and fo.state.source == "watcher"
    release.set()
    assert fo.flush_listeners()
    assert ran_after_placement[0] is True


def test_the_watcher_thread_survives_a_failing_callback(page: FakeStatusPage) -> None:
    polled = threading.Semaphore(0)
    fo = FailOpen(Config(status_url=STATUS_URL, poll_interval=0.02, poll_jitter=0.0,
                         metrics="off"),
                  status_transport=page.transport(), on_poll=lambda result: polled.release())

    def broken(old: FlagState, new: FlagState) -> None:
        raise RuntimeError("listener bug")

    fo.on_change(broken)
    try:
        fo.start()
        assert polled.acquire(timeout=5)
        page.set_global("major_outage")
        for _ in range(3):  # later polls still happen
            assert polled.acquire(timeout=5)
        assert fo.watcher.running
        assert fo.state.enforce is False
    finally:
        fo.stop()


def test_more_changes_than_the_queue_holds_drop_the_oldest() -> None:
    changes = ChangeListeners(max_pending=3)
    release = threading.Event()
    seen: list[str] = []

    def slow(old: FlagState, new: FlagState) -> None:
        release.wait(10)
        seen.append(new.reason)

    changes.add(slow)
    clock = FakeClock()
    states = [FlagState(enforce=bool(n % 2), source="watcher", reason=str(n), since=clock.time())
              for n in range(8)]
    try:
        for old, new in zip(states, states[1:], strict=False):
            changes.publish(old, new)
        release.set()
        assert changes.flush()
    finally:
        changes.stop()
    assert seen[-3:] == ["5", "6", "7"] and len(seen) <= 4


def test_on_change_refuses_what_it_cannot_call(fo: FailOpen) -> None:
    with pytest.raises(TypeError, match="on_change expects a callable"):
        fo.on_change("https://hooks.example/")  # type: ignore[arg-type]


# --- the chat recipe ------------------------------------------------------------------------------


@pytest.fixture
def chat(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    return importlib.import_module("chat_alerts")


class Webhook:
    """A loopback chat webhook that records what it is sent."""

    def __init__(self, status: int = 200, delay: float = 0.0) -> None:
        self.received: list[FakeRequest] = []
        self.status, self.delay = status, delay

    def __call__(self, request: FakeRequest) -> Reply:
        self.received.append(request)
        return Reply(status=self.status, body=b"ok", delay=self.delay)


def test_the_chat_recipe_posts_each_transition(fo: FailOpen, chat: ModuleType,
                                               page: FakeStatusPage) -> None:
    hook = Webhook()
    with LoopbackServer(hook).start() as server:
        alert = chat.chat_alert(f"{server.url}/services/{WEBHOOK_SECRET}",
                                site="shop.example.com")
        fo.on_change(alert)
        page.set_global("major_outage")
        fo.poll_now()
        page.set_global("operational")
        fo.poll_now()
        fo.poll_now()
        assert fo.flush_listeners()
        alert.close()
    assert WEBHOOK_SECRET not in repr(alert)
    texts = [request.json()["text"] for request in hook.received]
    assert len(texts) == 2
    assert "shop.example.com: bot protection is OFF (watcher: global component major_outage" \
        in texts[0]
    assert "bot protection is back ON" in texts[1]
    assert all(r.method == "POST" and r.path == f"/services/{WEBHOOK_SECRET}"
               and r.headers["content-type"] == "application/json" for r in hook.received)


def test_the_chat_recipe_never_raises_and_never_logs_the_webhook_url(
    fo: FailOpen, chat: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    refusing = Webhook(status=500)
    hanging = Webhook(delay=5.0)
    with LoopbackServer(refusing).start() as down, LoopbackServer(hanging).start() as slow:
        callbacks = [
            chat.chat_alert(f"{down.url}/{WEBHOOK_SECRET}"),
            chat.chat_alert(f"{slow.url}/{WEBHOOK_SECRET}", timeout=0.2),
            chat.chat_alert(f"http://127.0.0.1:9/{WEBHOOK_SECRET}", timeout=0.5),  # closed port
        ]
        for callback in callbacks:
            fo.on_change(callback)
        with caplog.at_level(logging.WARNING):
            fo.flag.force_off("drill")
            assert fo.flush_listeners(timeout=10)
        for callback in callbacks:
            callback.close()
    assert len(refusing.received) == 1 and len(hanging.received) == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "examples.chat_alerts"]
    assert lines == ["chat alert not delivered: the webhook answered HTTP 500",
                     "chat alert not delivered: ReadTimeout",
                     "chat alert not delivered: ConnectError"]
    assert WEBHOOK_SECRET not in caplog.text
    # The callbacks raised nothing: no listener failure was logged.
    assert not [r for r in caplog.records if getattr(r, "event", "") ==
                "failopen.listener_failed"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_worker_reports_its_own_changes_not_the_parents_backlog(fo: FailOpen) -> None:
    import signal

    release = threading.Event()
    reasons: list[str] = []

    def slow(old: FlagState, new: FlagState) -> None:
        release.wait(10)
        reasons.append(new.reason)

    fo.on_change(slow)
    fo.flag.force_off("parent 1")  # being delivered: the callback hangs
    fo.flag.force_off("parent 2")  # queued behind it
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # a gunicorn worker forked from a preloading master
        try:
            signal.alarm(5)
            release.set()
            fo.flag.force_off("child")
            fo.flush_listeners(3)
            os.write(write_end, ",".join(reasons).encode() or b"-")
        finally:
            os._exit(0)
    os.close(write_end)
    child = os.read(read_end, 200).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    release.set()
    assert fo.flush_listeners()
    assert child == "child"  # neither of the parent's changes posted again by the worker
    assert reasons == ["parent 1", "parent 2"]
