"""The ``failopen`` command: status, watch, override, emulate, -v, exit codes, secrets.

Most cases call ``main([...])`` in-process against fakes served on loopback; a few run the real
console script in a subprocess for the end-to-end paths (status, watch, override across two
processes, emulate started and stopped with SIGTERM).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _cli_kit import Run

from failopen.cli.command import build_parser, main, parse_duration
from failopen.engine.flag import EnforcementFlag, rfc3339
from failopen.stores.file import FileStore
from failopen.testing import FakeStatusPage, FakeVerifyAPI, LoopbackServer, free_port
from failopen.testing._server import FakeRequest, Reply

FAILOPEN = Path(sys.executable).with_name("failopen")
SECRET = "pk-secret-never-printed-7f3a9c"
WATCH_KEYS = {"enforce", "global_status", "source", "reason", "stale", "error"}


# --- helpers -------------------------------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    env.update(extra)
    return env


def failopen(*argv: str, env: dict[str, str] | None = None, timeout: float = 30) -> Run:
    """Run the real console script."""
    done = subprocess.run(
        [str(FAILOPEN), *argv], capture_output=True, text=True, timeout=timeout,
        env=env if env is not None else clean_env(),
    )
    return Run(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def page() -> FakeStatusPage:
    return FakeStatusPage(regions=("us-east-1", "eu-west-1"))


@pytest.fixture
def url(page: FakeStatusPage) -> Iterator[str]:
    with page.serve() as server:
        yield server.url


class FlipAfterFirst:
    """A status page that answers operational once, then major_outage: a deterministic flip."""

    def __init__(self, page: FakeStatusPage) -> None:
        self.page = page
        self.answered = 0

    def __call__(self, request: FakeRequest) -> Reply:
        reply = self.page.handle(request)
        self.answered += 1
        if self.answered == 1:
            self.page.set_global("major_outage")
        return reply


@pytest.fixture
def flipping_url(page: FakeStatusPage) -> Iterator[str]:
    with LoopbackServer(FlipAfterFirst(page)).start() as server:
        yield server.url


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return (tmp_path / "override.json").as_uri()


# --- the parser ----------------------------------------------------------------------------------


def test_verbs_are_the_documented_ones() -> None:
    parser = build_parser()
    for argv in (
        ["status", "--status-url", "https://status.example.com", "--json"],
        ["watch", "--status-url", "https://s.example.com", "--interval", "0.5", "--json"],
        ["override", "off", "--ttl", "30m", "--reason", "r", "--store", "file:///tmp/o.json"],
        ["override", "on"], ["override", "auto"], ["override", "show", "--json"],
        ["demo"], ["emulate", "status"], ["emulate", "verify"], ["-v", "status"],
    ):
        assert callable(parser.parse_args(argv).func)


def test_no_verb_prints_the_help(run: Any) -> None:
    # Issue 12: bare ``failopen`` is help on stdout and exit 0 (tests/test_cli_conventions.py).
    result = run()
    assert result.code == 0
    assert "usage: failopen" in result.out


# --- failopen status -----------------------------------------------------------------------------


def test_status_operational_exits_0(run: Any, url: str, page: FakeStatusPage) -> None:
    page.set_region("eu-west-1", "major_outage")  # regional only: failover, no bypass
    result = run("status", "--status-url", url)
    assert result.code == 0, result.err
    assert "global: operational" in result.out
    assert "would bypass" not in result.out
    assert "eu-west-1: major_outage" in result.out
    assert "us-east-1: operational" in result.out


@pytest.mark.parametrize("status", ["partial_outage", "major_outage"])
def test_status_outage_exits_1(run: Any, url: str, page: FakeStatusPage, status: str) -> None:
    page.set_global(status)
    result = run("status", "--status-url", url)
    assert result.code == 1, result.err
    assert f"global: {status}" in result.out
    assert "would bypass" in result.out


@pytest.mark.parametrize("status", ["degraded_performance", "under_maintenance"])
def test_status_known_but_not_an_outage_exits_0(
    run: Any, url: str, page: FakeStatusPage, status: str
) -> None:
    # Exit 1 means "would bypass"; these are known values outside FAILOPEN_BYPASS_ON, so the
    # watcher would keep enforcing and the command reports 0, not "unknown".
    page.set_global(status)
    result = run("status", "--status-url", url)
    assert result.code == 0, result.err
    assert f"global: {status}" in result.out
    assert "would bypass" not in result.out


def test_status_follows_failopen_bypass_on(
    run: Any, url: str, page: FakeStatusPage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAILOPEN_BYPASS_ON", "degraded_performance,major_outage")
    page.set_global("degraded_performance")
    assert run("status", "--status-url", url).code == 1
    page.set_global("partial_outage")
    assert run("status", "--status-url", url).code == 0


@pytest.mark.parametrize("fault", ["500", "malformed", "not_json", "missing_global"])
def test_status_unreadable_exits_2(run: Any, url: str, page: FakeStatusPage, fault: str) -> None:
    page.set_fault(fault)
    result = run("status", "--status-url", url)
    assert result.code == 2
    assert result.out == ""
    assert "status page unusable" in result.err


def test_status_unknown_value_exits_2(run: Any, url: str, page: FakeStatusPage) -> None:
    page.set_fault("unknown_status")
    result = run("status", "--status-url", url)
    assert result.code == 2
    assert "global: service_disruption" in result.out
    assert "would bypass" not in result.out


def test_status_connection_refused_exits_2(run: Any) -> None:
    result = run("status", "--status-url", f"http://127.0.0.1:{free_port()}")
    assert result.code == 2
    assert "status page unusable" in result.err


def test_status_json_is_one_object(run: Any, url: str, page: FakeStatusPage) -> None:
    page.set_global("major_outage")
    page.set_region("us-east-1", "partial_outage")
    result = run("status", "--status-url", url, "--json")
    assert result.code == 1
    data = result.json()
    assert data["global_status"] == "major_outage"
    assert data["would_bypass"] is True
    assert data["error"] is None
    assert data["known"] is True
    assert {r["description"]: r["status"] for r in data["regions"]} == {
        "us-east-1": "partial_outage", "eu-west-1": "operational",
    }
    assert data["impaired_regions"] == [page.region_ids["us-east-1"]]


def test_status_json_operational(run: Any, url: str) -> None:
    result = run("status", "--status-url", url, "--json")
    assert result.code == 0
    data = result.json()
    assert (data["global_status"], data["would_bypass"], data["error"]) == (
        "operational", False, None,
    )


def test_status_json_unreadable(run: Any, url: str, page: FakeStatusPage) -> None:
    page.set_fault("500")
    result = run("status", "--status-url", url, "--json")
    assert result.code == 2
    data = result.json()
    assert data["global_status"] is None
    assert data["would_bypass"] is False
    assert "500" in data["error"]


def test_status_json_unknown_value(run: Any, url: str, page: FakeStatusPage) -> None:
    page.set_fault("unknown_status")
    result = run("status", "--status-url", url, "--json")
    assert result.code == 2
    data = result.json()
    assert (data["global_status"], data["known"], data["would_bypass"]) == (
        "service_disruption", False, False,
    )


def test_status_url_from_the_environment(
    run: Any, url: str, page: FakeStatusPage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAILOPEN_STATUS_URL", url)
    page.set_global("partial_outage")
    result = run("status")
    assert result.code == 1, result.err
    assert page.requests == 1


def test_status_flag_wins_over_the_environment(
    run: Any, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAILOPEN_STATUS_URL", f"http://127.0.0.1:{free_port()}")
    assert run("status", "--status-url", url).code == 0


def test_status_without_url_names_the_variable(run: Any) -> None:
    result = run("status")
    assert result.code == 2
    assert "FAILOPEN_STATUS_URL" in result.err
    assert "--status-url" in result.err
    assert "Traceback" not in result.err


@pytest.mark.parametrize("bad", ["http://status.example.com", "http://10.0.0.7:8080"])
def test_status_refuses_plain_http_to_a_remote_host(run: Any, bad: str) -> None:
    result = run("status", "--status-url", bad)
    assert result.code == 2
    # Named as typed (issue 12): the flag, not the variable behind it.
    assert "--status-url" in result.err and "FAILOPEN_STATUS_URL" not in result.err
    assert "https" in result.err
    assert "loopback" in result.err or "localhost" in result.err


def test_status_global_component_by_id(run: Any, url: str, page: FakeStatusPage) -> None:
    page.set_region("eu-west-1", "major_outage")
    # Pointing at a region as "the global component" is the operator's choice, honoured.
    result = run("status", "--status-url", url, "--global-component",
                 page.region_ids["eu-west-1"], "--json")
    assert result.code == 1
    assert result.json()["global_status"] == "major_outage"


FIXTURES = Path(__file__).parent / "fixtures" / "statuspage"


@pytest.fixture
def github_like_url() -> Iterator[str]:
    """A page shaped like GitHub's (prose descriptions, one null link placeholder)."""
    doc = (FIXTURES / "github_like.json").read_bytes()
    with LoopbackServer(
        lambda request: Reply(200, doc, [("Content-Type", "application/json")])
    ).start() as server:
        yield server.url


def test_status_components_lists_every_component_in_a_table(
    run: Any, github_like_url: str
) -> None:
    result = run("status", "--status-url", github_like_url, "--components")
    assert result.code == 2, result.err  # listed, but no global component can be told
    lines = result.out.splitlines()
    assert lines[0].split() == ["id", "name", "description", "status", "group"]
    placeholder = next(line for line in lines if line.startswith("0l2p9nhqnxpd"))
    assert "Visit www.githubstatus.com for more information" in placeholder
    assert "operational" in placeholder
    assert len([line for line in lines if line[:12].isalnum()]) == 11
    assert "global component: cannot tell" in lines[-1]
    assert "FAILOPEN_GLOBAL_COMPONENT" in lines[-1]


def test_status_components_json_and_the_chosen_one(run: Any, github_like_url: str) -> None:
    result = run("status", "--status-url", github_like_url, "--components", "--json",
                 "--global-component", "Git Operations")
    assert result.code == 0, result.err
    data = result.json()
    assert data["global_component"] == "8l4ygp009s5s" and data["chosen_by"] == "name"
    assert data["error"] is None
    first = data["components"][0]
    assert {k: first[k] for k in ("id", "name", "status", "group", "group_id")} == {
        "id": "8l4ygp009s5s", "name": "Git Operations", "status": "operational",
        "group": False, "group_id": None,
    }
    assert first["description"].startswith("Performance of git clones")
    result = run("status", "--status-url", github_like_url, "--global-component",
                 "Git Operations")
    assert result.code == 0 and "global: operational" in result.out


def test_status_on_an_ambiguous_page_exits_2_and_says_what_to_set(
    run: Any, github_like_url: str
) -> None:
    result = run("status", "--status-url", github_like_url)
    assert result.code == 2
    assert "0l2p9nhqnxpd (Visit www.githubstatus.com for more information)" in result.err
    assert "FAILOPEN_GLOBAL_COMPONENT" in result.err


def test_status_reports_odd_fields_and_still_reads(run: Any) -> None:
    doc = json.loads((FIXTURES / "vendor_shape.json").read_text())
    doc["components"][1]["status"] = None
    doc["components"][2]["group"] = "false"
    doc["components"][0]["status"] = "major_outage"
    raw = json.dumps(doc).encode()
    with LoopbackServer(lambda request: Reply(200, raw)).start() as server:
        result = run("status", "--status-url", server.url, "--json")
        assert result.code == 1, result.err  # the reading counts: a global outage
        data = result.json()
        assert data["chosen_by"] == "guess" and len(data["odd"]) == 2
        text = run("status", "--status-url", server.url)
    assert "odd (the reading still counts): component 'u5e1qz8m3kwr': status is null" in text.out


def test_status_components_on_the_fake_page(run: Any, url: str, page: FakeStatusPage) -> None:
    result = run("status", "--status-url", url, "--components")
    assert result.code == 0, result.err
    assert f"global component: {page.global_id} (Global), chosen by guess" in result.out


def test_status_components_unreadable_exits_2(run: Any, url: str, page: FakeStatusPage) -> None:
    page.set_fault("503")
    result = run("status", "--status-url", url, "--components", "--json")
    assert result.code == 2
    assert result.json()["components"] == [] and "503" in result.json()["error"]


def test_status_indicator_fallback(run: Any, url: str, page: FakeStatusPage) -> None:
    page.set_fault("wrong_shape", endpoint="components")
    page.set_global("operational")
    assert run("status", "--status-url", url).code == 2
    result = run("status", "--status-url", url, "--indicator-fallback", "--json")
    assert result.code == 0, result.err
    assert result.json()["source"] == "indicator"


def test_status_end_to_end_subprocess(url: str, page: FakeStatusPage) -> None:
    page.set_global("major_outage")
    result = failopen("status", "--status-url", url)
    assert result.code == 1, result.err
    assert "global: major_outage  (would bypass)" in result.out
    assert "DEBUG" not in result.err
    page.set_global("operational")
    result = failopen("status", "--json", env=clean_env(FAILOPEN_STATUS_URL=url))
    assert result.code == 0, result.err
    assert result.json()["global_status"] == "operational"


def test_verbose_logs_at_debug_and_never_prints_the_private_key(url: str) -> None:
    env = clean_env(
        FAILOPEN_STATUS_URL=url,
        FAILOPEN_VERIFY_URL="http://127.0.0.1:9/api/v4/verify/",
        FAILOPEN_PRIVATE_KEY=SECRET,
    )
    result = failopen("-v", "status", env=env)
    assert result.code == 0, result.err
    assert " DEBUG " in result.err
    assert SECRET not in result.out + result.err


# --- failopen watch ------------------------------------------------------------------------------


def test_watch_json_lines(run: Any, url: str) -> None:
    result = run("watch", "--status-url", url, "--interval", "0.02", "--json", "--count", "3")
    assert result.code == 0, result.err
    lines = result.jsonl()
    assert len(lines) == 3
    for line in lines:
        assert line.keys() >= WATCH_KEYS
        assert isinstance(line["enforce"], bool)
        assert isinstance(line["stale"], bool)
        assert line["enforce"] is True
        assert line["global_status"] == "operational"
        assert line["source"] == "watcher"
        assert line["error"] is None
        assert isinstance(line["reason"], str)


def test_watch_json_shows_a_flip_to_major_outage(run: Any, flipping_url: str) -> None:
    result = run(
        "watch", "--status-url", flipping_url, "--interval", "0.02", "--json", "--count", "3"
    )
    assert result.code == 0, result.err
    lines = result.jsonl()
    assert [(x["global_status"], x["enforce"]) for x in lines] == [
        ("operational", True), ("major_outage", False), ("major_outage", False),
    ]
    assert "major_outage" in lines[1]["reason"]


def test_watch_json_unreadable_is_null_and_never_bypasses(
    run: Any, url: str, page: FakeStatusPage
) -> None:
    page.set_fault("500")
    result = run("watch", "--status-url", url, "--interval", "0.01", "--json", "--count", "2")
    assert result.code == 0, result.err
    lines = result.jsonl()
    assert len(lines) == 2
    for line in lines:
        assert line.keys() >= WATCH_KEYS
        assert line["global_status"] is None
        assert line["enforce"] is True
        assert line["source"] == "default"
        assert "500" in line["error"]


class HostileDocument:
    """A status page whose answer makes the parser quote it: long ids with line breaks."""

    def __call__(self, request: FakeRequest) -> Reply:
        ident = "x" * 5000 + "\nERROR forged log line"
        body = json.dumps({"components": [
            {"id": ident, "name": "a", "status": "operational", "description": None},
            {"id": ident, "name": "b", "status": "operational", "description": None},
        ]}).encode()
        return Reply(200, body, [("Content-Type", "application/json")])


def test_watch_json_error_is_one_bounded_line(run: Any) -> None:
    with LoopbackServer(HostileDocument()).start() as server:
        result = run("watch", "--status-url", server.url, "--interval", "0.01", "--json",
                     "--count", "2")
    assert result.code == 0, result.err
    for line in result.jsonl():
        assert line["enforce"] is True
        error = line["error"]
        assert error.startswith("StatusParseError: ")
        assert len(error) <= 300 and "\n" not in error


def test_watch_text_prints_polls_and_transitions(run: Any, flipping_url: str) -> None:
    result = run("watch", "--status-url", flipping_url, "--interval", "0.02", "--count", "2")
    assert result.code == 0, result.err
    assert "global=operational enforce=True" in result.out
    assert "global=major_outage enforce=False" in result.out
    assert "transition: enforce True -> False (watcher: global component major_outage)" in (
        result.out
    )


def test_watch_restores_signal_handlers(run: Any, url: str) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    assert run("watch", "--status-url", url, "--interval", "0.01", "--count", "1").code == 0
    assert {s: signal.getsignal(s) for s in before} == before


def test_watch_without_url_names_the_variable(run: Any) -> None:
    result = run("watch", "--count", "1")
    assert result.code == 2
    assert "FAILOPEN_STATUS_URL" in result.err


def test_watch_honours_an_override_in_the_store(run: Any, url: str, store_url: str) -> None:
    EnforcementFlag(store=FileStore.from_url(store_url)).force_off("ops says so")
    result = run("watch", "--status-url", url, "--interval", "0.01", "--json", "--count", "1",
                 "--store", store_url)
    assert result.code == 0, result.err
    [line] = result.jsonl()
    assert (line["enforce"], line["source"], line["reason"]) == (False, "override", "ops says so")
    assert line["global_status"] == "operational"


def test_watch_end_to_end_subprocess(flipping_url: str) -> None:
    result = failopen("watch", "--json", "--count", "3", "--interval", "0.05",
                      env=clean_env(FAILOPEN_STATUS_URL=flipping_url))
    assert result.code == 0, result.err
    lines = result.jsonl()
    assert len(lines) == 3
    assert all(line.keys() >= WATCH_KEYS for line in lines)
    assert [line["enforce"] for line in lines] == [True, False, False]


# Issue 20: what an outage would do, on every line. The servers' own settings, as the runbook says
# to run it: the verify call, the protected routes, the policies and the fallback's secret.
FALLBACK_SECRET = "fallback-secret-never-printed-0123456789"
SERVER_ENV = {
    "FAILOPEN_VERIFY_URL": "http://127.0.0.1:9/api/v4/verify/", "FAILOPEN_PRIVATE_KEY": SECRET,
    "FAILOPEN_PROTECTED_PATHS": "/login,/signup,/password-reset,/account",
    "FAILOPEN_OUTAGE_POLICY_ROUTES": "/signup=fallback,/password-reset=closed,/login=open",
    "FAILOPEN_FALLBACK_SECRET": FALLBACK_SECRET,
}


def test_watch_json_says_what_an_outage_does_to_each_route(
    run: Any, url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {**SERVER_ENV, "FAILOPEN_OUTAGE_POLICY": "closed",
                        "FAILOPEN_OUTAGE_RATE": "5/minute"}.items():
        monkeypatch.setenv(name, value)
    result = run("watch", "--status-url", url, "--interval", "0.01", "--json", "--count", "2")
    assert result.code == 0, result.err
    for line in result.jsonl():
        assert line["outage_policy"] == "closed"  # /account: the default
        assert line["outage_policy_routes"] == {
            "/signup": "fallback", "/password-reset": "closed", "/login": "open"}
        assert line["outage_rate"] == "5/minute"
    assert result.err == ""


def test_watch_json_shows_the_defaults_without_outage_settings(run: Any, url: str) -> None:
    result = run("watch", "--status-url", url, "--interval", "0.01", "--json", "--count", "1")
    assert result.code == 0, result.err
    [line] = result.jsonl()
    assert (line["outage_policy"], line["outage_policy_routes"], line["outage_rate"]) == (
        "open", {}, "20/minute")


def test_watch_json_never_shows_the_fallback_secret(
    run: Any, url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    for name, value in SERVER_ENV.items():
        monkeypatch.setenv(name, value)
    seen = []
    for argv in (("-v", "watch", "--json"), ("watch", "--json"), ("watch",)):
        result = run(*argv, "--status-url", url, "--interval", "0.01", "--count", "1")
        assert result.code == 0, result.err
        seen.append(result.out + result.err)
    # Beside a setting it cannot use, the error that names it must not echo it either.
    monkeypatch.setenv("FAILOPEN_FALLBACK_SECRET", FALLBACK_SECRET[:20])
    result = run("watch", "--status-url", url, "--interval", "0.01", "--count", "1", "--json")
    assert result.code == 0, result.err
    assert "FAILOPEN_FALLBACK_SECRET: must be at least 32 characters" in result.err
    assert result.jsonl()[0]["outage_policy"] is None
    seen.append(result.out + result.err)
    assert "fallback_secret" not in seen[0]
    for text in (*seen, caplog.text):
        assert FALLBACK_SECRET[:20] not in text and SECRET not in text


def test_watch_json_says_null_rather_than_guess_when_the_policies_are_unusable(
    run: Any, url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fallback route without its secret: the servers would not start; watch still watches,
    # and never reports "open" for what would not be.
    for name, value in SERVER_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("FAILOPEN_FALLBACK_SECRET")
    result = run("watch", "--status-url", url, "--interval", "0.01", "--json", "--count", "1")
    assert result.code == 0, result.err
    [line] = result.jsonl()
    assert line["enforce"] is True and line["global_status"] == "operational"
    assert (line["outage_policy"], line["outage_policy_routes"], line["outage_rate"]) == (
        None, None, None)
    assert "the outage policies are shown as null: FAILOPEN_FALLBACK_SECRET: required" in (
        result.err)
    assert result.err.count("FAILOPEN_FALLBACK_SECRET") == 1, "one warning, not two"


def test_watch_json_shows_the_policies_beside_an_unrelated_bad_setting(
    run: Any, url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    # The audit file's directory exists on the servers, not on this host: no reason to hide
    # what the policies say.
    for name, value in SERVER_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FAILOPEN_AUDIT_FILE", str(tmp_path / "absent" / "audit.jsonl"))
    result = run("watch", "--status-url", url, "--interval", "0.01", "--json", "--count", "1")
    assert result.code == 0, result.err
    [line] = result.jsonl()
    assert line["outage_policy_routes"]["/signup"] == "fallback"
    assert "FAILOPEN_AUDIT_FILE" in result.err and "shown as null" not in result.err


# --- failopen override ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("45", 45), ("1.5h", 5400),
     ("10S", 10), (" 5m ", 300), ("500ms", 0.5), (".5", 0.5)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("bad", "said"), [
    ("abc", "not a duration like 30s, 5m, 1h"), ("0", "is zero"), ("0s", "is zero"),
    ("-5", "is negative"), ("-5m", "is negative"), ("10x", "not a duration"),
    ("", "not a duration"), ("m", "not a duration"), ("1e3", "not a duration"),
    ("5 minutes", "not a duration")])
def test_bad_ttl_exits_2_with_a_message(run: Any, store_url: str, bad: str, said: str) -> None:
    result = run("override", "off", f"--ttl={bad}", "--store", store_url)
    assert result.code == 2
    assert "--ttl" in result.err
    assert said in result.err
    assert not Path(store_url.removeprefix("file://")).exists()


def test_override_off_with_ttl_is_seen_by_another_flag(run: Any, store_url: str) -> None:
    result = run("override", "off", "--ttl", "30m", "--reason", "vendor down, INC-42",
                 "--store", store_url)
    assert result.code == 0, result.err
    assert "override: enforce=False" in result.out
    assert "vendor down, INC-42" in result.out
    other = EnforcementFlag(store=FileStore.from_url(store_url))
    state = other.state
    assert (state.enforce, state.source, state.reason) == (False, "override", "vendor down, INC-42")
    override = other.override
    assert override is not None and override.expires_at is not None
    assert override.expires_at - override.set_at == pytest.approx(1800)


def test_override_off_without_ttl_lapses_in_an_hour_and_says_when(
    run: Any, store_url: str
) -> None:
    result = run("override", "off", "--store", store_url)
    assert result.code == 0, result.err
    override = EnforcementFlag(store=FileStore.from_url(store_url)).override
    assert override is not None and override.expires_at is not None
    assert override.expires_at - override.set_at == 3600
    assert f"until={rfc3339(override.expires_at)}" in result.out
    shown = run("override", "show", "--store", store_url, "--json").json()["override"]
    assert shown["expires_at"] == rfc3339(override.expires_at)


def test_override_off_for_seven_days_at_most(run: Any, store_url: str) -> None:
    assert run("override", "off", "--ttl", "7d", "--store", store_url).code == 0
    result = run("override", "off", "--ttl", "8d", "--reason", "forever", "--store", store_url)
    assert result.code == 2
    assert "at most 7 days (604800 s)" in result.err
    assert "Traceback" not in result.err
    override = EnforcementFlag(store=FileStore.from_url(store_url)).override
    assert override is not None and override.reason != "forever", "nothing was placed"


def test_override_on_without_ttl_never_expires(run: Any, store_url: str) -> None:
    assert run("override", "on", "--store", store_url).code == 0
    override = EnforcementFlag(store=FileStore.from_url(store_url)).override
    assert override is not None
    assert override.enforce is True
    assert override.expires_at is None
    assert override.reason  # a default reason is recorded


def test_override_auto_lifts_it(run: Any, store_url: str) -> None:
    assert run("override", "off", "--store", store_url).code == 0
    result = run("override", "auto", "--store", store_url)
    assert result.code == 0, result.err
    assert "no override" in result.out
    flag = EnforcementFlag(store=FileStore.from_url(store_url))
    assert flag.override is None
    assert flag.state.enforce is True


def test_override_show(run: Any, store_url: str) -> None:
    result = run("override", "show", "--store", store_url)
    assert result.code == 0, result.err
    assert "no override: the status page decides" in result.out
    assert run("override", "show", "--store", store_url, "--json").json() == {"override": None}

    EnforcementFlag(store=FileStore.from_url(store_url)).force_on("drill", ttl=3600)
    result = run("override", "show", "--store", store_url)
    assert result.code == 0
    assert "override: enforce=True" in result.out
    assert "reason=drill" in result.out
    shown = run("override", "show", "--store", store_url, "--json").json()["override"]
    assert shown["enforce"] is True
    assert shown["reason"] == "drill"
    assert shown["expires_at"].endswith("Z")
    assert shown["set_at"].endswith("Z")


def test_override_show_prints_a_reason_as_text_not_as_terminal_commands(
    run: Any, store_url: str
) -> None:
    # A reason from the store (another process, a hand) with a carriage return and an
    # erase-line escape would otherwise hide "enforce=False" from the operator reading it.
    EnforcementFlag(store=FileStore.from_url(store_url)).force_off("\r\x1b[2Kall good", ttl=60)
    result = run("override", "show", "--store", store_url)
    assert result.code == 0, result.err
    assert "\r" not in result.out and "\x1b" not in result.out
    assert "enforce=False" in result.out and "\\r\\x1b[2Kall good" in result.out


def test_override_show_does_not_change_the_store(run: Any, store_url: str) -> None:
    EnforcementFlag(store=FileStore.from_url(store_url)).force_off("keep me")
    path = Path(store_url.removeprefix("file://"))
    before = path.read_bytes()
    assert run("override", "show", "--store", store_url).code == 0
    assert path.read_bytes() == before


def test_override_show_reads_without_a_warning(run: Any, store_url: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    # show changes nothing: "enforcement off" at WARNING (what a placement logs, and what
    # alerting watches for) would be a false alarm every time an operator looks.
    EnforcementFlag(store=FileStore.from_url(store_url)).force_off("maintenance", ttl=600)
    caplog.clear()
    caplog.set_level("DEBUG")
    result = run("override", "show", "--store", store_url)
    assert result.code == 0 and "enforce=False" in result.out
    assert [r.getMessage() for r in caplog.records if r.levelno >= 30] == []
    assert "WARNING" not in result.err


def test_override_json_output(run: Any, store_url: str) -> None:
    data = run("override", "off", "--ttl", "90s", "--reason", "r1", "--store", store_url,
               "--json").json()
    assert data["override"]["enforce"] is False
    assert data["override"]["reason"] == "r1"
    assert data["override"]["expires_at"] is not None
    lifted = run("override", "auto", "--store", store_url, "--json").json()
    # The reach fields are added beside "override", which keeps its shape.
    assert lifted["override"] is None and lifted["reach"] == "unmeasured"


def test_override_store_from_the_environment(
    run: Any, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAILOPEN_STORE", store_url)
    assert run("override", "off", "--reason", "env store").code == 0
    assert EnforcementFlag(store=FileStore.from_url(store_url)).state.reason == "env store"


@pytest.mark.parametrize("argv", [("--store", "memory:"), ()])
def test_override_refuses_the_memory_store(run: Any, argv: tuple[str, ...]) -> None:
    result = run("override", "off", *argv)
    assert result.code == 2
    assert "memory:" in result.err
    assert "process" in result.err  # why: it lives inside each server process
    assert "file:///" in result.err  # what to do instead
    assert "Traceback" not in result.err


@pytest.mark.parametrize(
    "store", ["redis://127.0.0.1:{port}/0", "bogus", "file://relative/override.json"]
)
def test_override_unusable_store_exits_2(run: Any, store: str) -> None:
    port = free_port()
    result = run("override", "show", "--store", store.format(port=port))
    assert result.code == 2
    assert (f"connection to 127.0.0.1:{port} failed" if store.startswith("redis")
            else "--store") in result.err


@pytest.mark.parametrize(
    ("content", "why"),
    [
        pytest.param(b'{"enforce": false, "rea', "is not valid JSON", id="bad-json"),
        pytest.param(b'{"enforce": "no", "set_at": 1}', "'enforce' must be true or false",
                     id="bad-field"),
        pytest.param(b'{"enforce": false, "reason": "old", "set_at": 1800000000}',
                     "no expiry", id="endless-off"),
    ],
)
@pytest.mark.parametrize("json_out", [False, True])
def test_override_show_says_why_a_corrupt_store_is_unusable(
    run: Any, store_url: str, content: bytes, why: str, json_out: bool
) -> None:
    Path(store_url.removeprefix("file://")).write_bytes(content)
    result = run("override", "show", "--store", store_url, *(["--json"] if json_out else []))
    assert result.code == 2
    assert why in result.err
    assert "no override" not in result.out
    assert result.out == ""


def test_override_show_says_why_a_refused_file_is_unusable(run: Any, store_url: str) -> None:
    path = Path(store_url.removeprefix("file://"))
    EnforcementFlag(store=FileStore.from_url(store_url)).force_on("drill")
    path.chmod(0o666)  # writable by anyone: whoever wrote it cannot be trusted
    result = run("override", "show", "--store", store_url)
    assert result.code == 2
    assert "refusing" in result.err and "writable by other users" in result.err
    assert "no override" not in result.out


def test_override_over_a_corrupt_store_replaces_it(run: Any, store_url: str) -> None:
    """Placing or lifting an override writes a good file over a bad one: the way out."""
    path = Path(store_url.removeprefix("file://"))
    path.write_bytes(b"{not json")
    result = run("override", "auto", "--store", store_url)
    assert result.code == 0, result.err
    assert "no override" in result.out
    assert run("override", "show", "--store", store_url).code == 0


@pytest.mark.parametrize("verb", ["show", "off", "auto"])
def test_override_never_shows_a_store_password(
    run: Any, verb: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cret-Pa55"
    port = free_port()  # nothing listens there: the store is unreachable
    result = run("override", verb, "--store", f"redis://:{secret}@127.0.0.1:{port}/0")
    assert result.code == 2 and f"redis://:***@127.0.0.1:{port}" in result.err
    monkeypatch.setenv("FAILOPEN_STORE", f"rediss://u:{secret}@127.0.0.1:{port}")
    again = run("override", verb)
    assert again.code == 2 and "rediss://u:***@127.0.0.1" in again.err
    assert secret not in result.out + result.err + again.out + again.err


def test_override_store_in_a_missing_directory(run: Any, tmp_path: Path) -> None:
    result = run("override", "off", "--store", (tmp_path / "nope" / "o.json").as_uri())
    assert result.code == 2
    assert "does not exist" in result.err


def test_override_across_two_processes(store_url: str) -> None:
    env = clean_env(FAILOPEN_STORE=store_url)
    placed = failopen("override", "off", "--ttl", "2h", "--reason", "vendor outage", env=env)
    assert placed.code == 0, placed.err
    shown = failopen("override", "show", "--json", env=env)
    assert shown.code == 0, shown.err
    override = shown.json()["override"]
    assert (override["enforce"], override["reason"]) == (False, "vendor outage")
    assert EnforcementFlag(store=FileStore.from_url(store_url)).state.enforce is False

    lifted = failopen("override", "auto", "--store", store_url)
    assert lifted.code == 0, lifted.err
    assert failopen("override", "show", "--json", env=env).json() == {"override": None}


# --- configuration errors and secrets ----------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "name", "value"),
    # Only settings the verb uses stop it (issue 12); tests/test_cli_conventions.py checks
    # that the others are warned about instead.
    [("watch", "FAILOPEN_POLL_INTERVAL", "abc"), ("watch", "FAILOPEN_POLL_INTERVAL", "-1"),
     ("status", "FAILOPEN_BYPASS_ON", "operational"),
     ("watch", "FAILOPEN_BYPASS_ON", "operational"),
     ("status", "FAILOPEN_STATUS_TIMEOUT", "-1"), ("watch", "FAILOPEN_STORE", "ftp://x")],
)
def test_configuration_error_exits_2_naming_the_variable(
    run: Any, url: str, monkeypatch: pytest.MonkeyPatch, name: str, value: str, verb: str
) -> None:
    monkeypatch.setenv(name, value)
    result = run(verb, "--status-url", url, "--count", "1") if verb == "watch" else run(
        verb, "--status-url", url
    )
    assert result.code == 2
    assert "configuration error" in result.err
    assert name in result.err
    assert "Traceback" not in result.err


def test_configuration_error_for_override(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAILOPEN_STORE", "ftp://x")
    result = run("override", "show")
    assert result.code == 2
    assert "FAILOPEN_STORE" in result.err


def test_private_key_is_never_printed(
    run: Any, url: str, store_url: str, page: FakeStatusPage, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    monkeypatch.setenv("FAILOPEN_PRIVATE_KEY", SECRET)
    monkeypatch.setenv("FAILOPEN_VERIFY_URL", "http://127.0.0.1:9/api/v4/verify/")
    monkeypatch.setenv("FAILOPEN_STORE", store_url)
    seen: list[str] = []
    for argv in (
        ("-v", "status", "--status-url", url),
        ("status", "--status-url", url, "--json"),
        ("watch", "--status-url", url, "--interval", "0.01", "--count", "1"),
        ("watch", "--status-url", url, "--interval", "0.01", "--count", "1", "--json"),
        ("override", "off", "--ttl", "1h"),
        ("override", "show", "--json"),
        ("override", "auto"),
    ):
        result = run(*argv)
        assert result.code == 0, (argv, result.err)
        seen.append(result.out + result.err)
    page.set_fault("500")
    seen.append(run("status", "--status-url", url).err)
    # Configuration errors next to the key must not echo it either.
    for name, value in (("FAILOPEN_VERIFY_TIMEOUT", "abc"),
                        ("FAILOPEN_VERIFY_URL", "http://verify.example.com/api/v4/verify/")):
        with monkeypatch.context() as m:
            m.setenv(name, value)
            result = run("status", "--status-url", url)
            assert result.code == 2
            assert name in result.err
            seen.append(result.out + result.err)
    assert all(SECRET not in text for text in seen)
    assert SECRET not in caplog.text


# --- failopen emulate ----------------------------------------------------------------------------


def _start(*argv: str, lines: int) -> tuple[subprocess.Popen[str], list[str]]:
    """Start ``failopen emulate ...`` and read the banner it prints once it is serving."""
    proc = subprocess.Popen(
        [str(FAILOPEN), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=clean_env(),
    )
    assert proc.stdout is not None
    return proc, [proc.stdout.readline() for _ in range(lines)]


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    return proc.returncode, out, err


def test_emulate_status_serves_until_sigterm() -> None:
    proc, banner = _start("emulate", "status", "--port", "0", "--global", "major_outage",
                          "--region", "eu-west-1=partial_outage", lines=3)
    try:
        first = banner[0]
        url = first.split(": ", 1)[1].strip()
        assert first.startswith("fake status page: http://127.0.0.1:"), first
        port = int(url.rsplit(":", 1)[1])
        assert port > 0
        answer = httpx.get(f"{url}/api/v2/components.json", timeout=5)
        assert answer.status_code == 200
        statuses = {c["description"]: c["status"] for c in answer.json()["components"]}
        assert statuses == {
            None: "major_outage", "us-east-1": "operational", "eu-west-1": "partial_outage",
        }
    finally:
        code, _, err = _stop(proc)
    assert code == 0, err
    assert banner[2].strip() == f"FAILOPEN_STATUS_URL=http://127.0.0.1:{port}"
    assert "Traceback" not in err


def test_emulate_status_with_a_fault_makes_status_exit_2(run: Any) -> None:
    proc, banner = _start("emulate", "status", "--port", "0", "--fault", "500", lines=1)
    try:
        url = banner[0].split(": ", 1)[1].strip()
        assert run("status", "--status-url", url).code == 2
    finally:
        code, _, err = _stop(proc)
    assert code == 0, err


def test_emulate_verify_serves_until_sigterm() -> None:
    proc, banner = _start("emulate", "verify", "--port", "0", "--private-key", "k-123", lines=4)
    try:
        verify_url = banner[0].split(": ", 1)[1].strip()
        assert verify_url.endswith(FakeVerifyAPI.path)
        good = httpx.post(verify_url, json={"private_key": "k-123",
                                            "session_token": FakeVerifyAPI.GOOD}, timeout=5)
        assert good.json()["session_details"]["solved"] is True
        bad = httpx.post(verify_url, json={"private_key": "k-123",
                                           "session_token": FakeVerifyAPI.BAD}, timeout=5)
        assert bad.json()["session_details"]["solved"] is False
    finally:
        code, _, err = _stop(proc)
    assert code == 0, err
    assert banner[1].strip() == f"FAILOPEN_VERIFY_URL={verify_url}"
    assert "k-123" in banner[2]  # the fake's own key, given on the command line


@pytest.mark.parametrize("fake", ["status", "verify", "rai"])
def test_emulate_on_a_busy_port_is_one_line_and_exit_2(run: Any, fake: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        result = run("emulate", fake, "--port", str(port))
    assert result.code == 2
    assert result.err.strip() == (
        f"failopen emulate {fake}: cannot listen on port {port}: Address already in use"
    )
    assert result.out == ""
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


@pytest.mark.parametrize(("argv", "message"), [
    (["--region", "nowhere=major_outage"], "--region nowhere: no such region"),
    (["--region", "eu-west-1"], "'eu-west-1' is not NAME=STATUS"),
    (["--regions", "us-east-1,,eu-west-1"], "--regions: region labels are non-empty"),
    (["--port", "70000"], "not a port number"),
])
def test_emulate_status_refuses_bad_arguments_without_a_traceback(
    run: Any, argv: list[str], message: str
) -> None:
    result = run("emulate", "status", *argv)
    assert result.code == 2
    assert message in result.err
    assert "Traceback" not in result.err


def test_emulate_needs_a_fake(run: Any) -> None:
    result = run("emulate")
    assert result.code == 2
    assert "usage" in result.err


def test_emulate_rejects_an_unknown_fault(run: Any) -> None:
    result = run("emulate", "status", "--fault", "meltdown")
    assert result.code == 2
    assert "--fault" in result.err


@pytest.mark.parametrize(("argv", "named"), [
    (["override", "show", "--ttl", "30m"], "--ttl"),
    (["override", "show", "--reason", "x"], "--reason"),
    (["override", "auto", "--ttl", "30m"], "--ttl"),
])
def test_override_refuses_options_that_do_not_apply(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--store", "file:///nonexistent/never-read.json"]) == 2
    assert named in capsys.readouterr().err


def test_status_json_has_one_shape_readable_or_not(capsys: pytest.CaptureFixture[str]) -> None:
    from failopen.testing import FakeStatusPage

    page = FakeStatusPage()
    with page.serve() as server:
        main(["status", "--status-url", server.url, "--json"])
        good = json.loads(capsys.readouterr().out)
        page.set_fault("500")
        main(["status", "--status-url", server.url, "--json"])
        bad = json.loads(capsys.readouterr().out)
    assert set(good) == set(bad)
    assert bad["global_status"] is None and bad["error"]
