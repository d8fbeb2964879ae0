"""Structured log records: every core log line names a stable event in ``extra["event"]``, and a
real JSON formatter (python-json-logger) writes the names and fields as users will read them."""

from __future__ import annotations

import ast
import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from failopen import Config, FailOpen
from failopen.engine.flag import EnforcementFlag
from failopen.observe.audit import BypassAudit
from failopen.observe.events import EVENT_KEY, EVENTS
from failopen.testing import FakeClock, FakeStatusPage, FakeVerifyAPI

try:  # python-json-logger 3+
    from pythonjsonlogger.json import JsonFormatter
except ImportError:  # pragma: no cover - python-json-logger 2
    from pythonjsonlogger.jsonlogger import JsonFormatter  # type: ignore[no-redef]

CORE = Path(__file__).parent.parent / "failopen"
# The core: what runs in a server process. rai/ (an API client) and testing/ (fakes) are not.
# The core's modules: the top level and its wings (the CLI's own modules too, not its demo site).
WINGS = ("_internal", "providers", "engine", "observe", "stores", "fallback", "web", "cli")
# The adapters' framework-free start-up line lives beside them.
ANNOUNCE = CORE.parent / "integrations" / "_announce.py"
CORE_FILES = sorted(
    [*CORE.glob("*.py"), *(p for w in WINGS for p in CORE.glob(f"{w}/*.py")), ANNOUNCE]
)
LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical"}
RESERVED = set(vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None))) | {
    "message", "asctime", "taskName"}

PRIVATE_KEY = "pk-live-0123456789abcdef-secret"
STATUS_URL = "https://status.example.com"
VERIFY_URL = "https://verify.example.com/api/v4/verify/"


# --- the code: every log call names an event, every event is documented -----------------------


def _log_calls(tree: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in LOG_METHODS
                and re.search(r"(logger|audit|_log)$", ast.unparse(node.func.value))):
            yield node


def _event_dicts(tree: ast.AST) -> Iterator[ast.Dict]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value == EVENT_KEY for k in node.keys):
            yield node


def test_every_core_log_call_carries_an_extra() -> None:
    missing = []
    for path in CORE_FILES:
        for call in _log_calls(ast.parse(path.read_text())):
            if not any(k.arg == "extra" for k in call.keywords):
                missing.append(f"{path.name}:{call.lineno}")
    assert missing == [], "log calls without extra={'event': ...}"


def test_event_names_in_the_code_are_exactly_the_documented_ones() -> None:
    used: set[str] = set()
    for path in CORE_FILES:
        for node in _event_dicts(ast.parse(path.read_text())):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == EVENT_KEY:
                    assert isinstance(value, ast.Constant), f"{path.name}: event must be literal"
                    used.add(value.value)
    assert used == set(EVENTS)
    assert all(re.fullmatch(r"failopen\.[a-z_]+", name) for name in used)


def test_no_field_collides_with_a_log_record_attribute() -> None:
    # logging raises KeyError for an extra key that a LogRecord already has.
    clashes = []
    for path in CORE_FILES:
        for node in _event_dicts(ast.parse(path.read_text())):
            for key in node.keys:
                if isinstance(key, ast.Constant) and key.value in RESERVED:
                    clashes.append(f"{path.name}:{node.lineno}: {key.value}")
    assert clashes == []


# --- real records through a real JSON formatter -------------------------------------------------


class JsonLines:
    """A StreamHandler with python-json-logger's formatter on the ``failopen`` logger."""

    def __init__(self) -> None:
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(JsonFormatter("%(levelname)s %(name)s %(message)s"))

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text.splitlines() if line]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("event") == name]


@pytest.fixture
def logs() -> Iterator[JsonLines]:
    lines = JsonLines()
    root = logging.getLogger("failopen")
    old_level = root.level
    root.addHandler(lines.handler)
    root.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        root.removeHandler(lines.handler)
        root.setLevel(old_level)


def test_overrides_and_transitions_as_json(logs: JsonLines) -> None:
    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)
    flag.force_off("vendor ticket 1234", ttl=600, set_by="admin-token")
    clock.advance(601)
    assert flag.state.enforce  # the override lapses as it is read
    flag.force_on("incident drill")
    flag.automatic("drill over")

    [placed, _] = logs.events("failopen.override_set")
    assert placed["message"].startswith("override placed: enforce=False ttl=600s")
    assert placed["levelname"] == "WARNING" and placed["name"] == "failopen.flag"
    assert (placed["enforce"], placed["ttl"], placed["reason"], placed["set_by"]) == (
        False, 600, "vendor ticket 1234", "admin-token")
    assert placed["expires_at"].endswith("Z")
    [expired] = logs.events("failopen.override_expired")
    assert (expired["reason"], expired["enforce"]) == ("vendor ticket 1234", False)
    [lifted] = logs.events("failopen.override_lifted")
    assert (lifted["reason"], lifted["enforce"]) == ("drill over", True)
    changes = logs.events("failopen.flag_changed")
    assert [(c["enforce"], c["source"], c["levelname"]) for c in changes] == [
        (False, "override", "WARNING"), (True, "default", "INFO")]
    assert changes[0]["reason"] == "vendor ticket 1234"
    assert set(changes[0]) >= {"global_status", "expires_at", "stale", "error"}


def test_polls_staleness_and_the_audit_as_json(logs: JsonLines) -> None:
    clock = FakeClock()
    page = FakeStatusPage()
    page.set_global("major_outage")
    fo = FailOpen(Config(status_url=STATUS_URL, poll_interval=10, audit="summary",
                         metrics="off"),
                  status_transport=page.transport(), clock=clock)
    try:
        fo.watcher.start()
        fo.watcher.stop()  # started once: staleness counts from now; no thread in the way
        fo.poll_now()  # outage: enforcement off
        for _ in range(3):
            fo.guard.bypass(path="/login", client="192.0.2.1")
        fo.guard.bypass(path="/signup", client="192.0.2.2")
        page.set_fault("500")
        fo.poll_now()
        clock.advance(31)  # past stale_after (3 intervals)
        fo.watcher.tick()
        page.set_fault(None)
        page.set_global("operational")
        fo.poll_now()
        fo.poll_now()  # close_after=2: enforcement back on, the summary is written
    finally:
        fo.stop()

    [first] = logs.events("failopen.bypass")
    assert (first["path"], first["client"]) == ("/login", "192.0.2.1")
    assert first["name"] == "failopen.audit"
    [summary] = logs.events("failopen.bypass_summary")
    assert summary["message"].startswith("bypass summary: 4 requests")
    assert (summary["requests"], summary["distinct_clients"]) == (4, 2)
    assert summary["paths"] == {"/login": 3, "/signup": 1}
    assert summary["busiest_clients"] == {"192.0.2.1": 3, "192.0.2.2": 1}
    [failed] = logs.events("failopen.poll_failed")
    assert failed["failures"] == 1 and "HTTP 500" in failed["error"]
    [stale] = logs.events("failopen.stale")
    assert stale["stale"] is True and stale["enforce"] is False and "HTTP 500" in stale["error"]
    [fresh] = logs.events("failopen.stale_ended")
    assert fresh["stale"] is False
    assert [c["enforce"] for c in logs.events("failopen.flag_changed")] == [False, True]


def test_refusals_as_json_never_carry_the_private_key_or_the_token(logs: JsonLines) -> None:
    api = FakeVerifyAPI()  # its own key: ours is rejected (401)
    fo = FailOpen(Config(verify_url=VERIFY_URL, private_key=PRIVATE_KEY,
                         protected_paths=("/login",), metrics="off"),
                  verify_transport=api.transport())
    try:
        decision = fo.guard.decide(FakeVerifyAPI.GOOD, path="/login", client="192.0.2.9")
        fo.guard.decide(None, path="/login")
    finally:
        fo.stop()
    assert decision.status_code == 403
    [credentials] = logs.events("failopen.verify_credentials_rejected")
    assert credentials["status_code"] == 401
    rejected = logs.events("failopen.rejected")
    assert [(r["status_code"], r["outcome"]) for r in rejected] == [
        (403, "invalid_token"), (403, "missing_token")]
    assert PRIVATE_KEY not in logs.text
    assert FakeVerifyAPI.GOOD not in logs.text


def test_a_failing_listener_is_logged_once_per_minute_as_json(logs: JsonLines) -> None:
    clock = FakeClock()
    flag = EnforcementFlag(clock=clock)

    def broken(old: object, new: object) -> None:
        raise RuntimeError("listener bug")

    flag.add_listener(broken)
    flag.force_off("a")
    flag.force_off("b")
    flag.force_off("c")
    [failed] = logs.events("failopen.listener_failed")
    assert failed["suppressed"] == 0 and "broken" in failed["callback"]
    assert "listener bug" in failed["exc_info"]
    clock.advance(61)
    flag.automatic()
    [_, again] = logs.events("failopen.listener_failed")
    assert again["suppressed"] == 2
    assert flag.state.source != "override"


def test_the_audit_summary_written_directly_names_its_event(logs: JsonLines) -> None:
    clock = FakeClock()
    audit = BypassAudit(interval=10, clock=clock)
    audit.record("/a", "c1", "r")
    clock.advance(11)
    audit.record("/a", "c2", "r")
    [summary] = logs.events("failopen.bypass_summary")
    assert summary["requests"] == 2 and summary["seconds"] == 11
