"""The ``failopen`` command behaves like the commands users know: ``--version``, help when run
bare, ``-v`` on either side of the verb, every sub-command's help with a description, exit codes
and an example, errors that name what the user typed, and verbs that use only what they need."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import failopen
from failopen.cli.command import build_parser
from failopen.cli.help import walk
from failopen.testing import FakeStatusPage


@pytest.fixture
def page() -> Iterator[FakeStatusPage]:
    fake = FakeStatusPage()
    with fake.serve():
        yield fake


def test_version(run: Any) -> None:
    shown = run("--version")
    assert shown.code == 0 and shown.out.strip() == f"failopen {failopen.__version__}"


def test_bare_failopen_prints_help_to_stdout_and_exits_0(run: Any) -> None:
    shown = run()
    assert shown.code == 0 and shown.err == ""
    assert shown.out.startswith("usage: failopen")
    for verb in ("status", "watch", "override", "audit", "rai", "emulate"):
        assert verb in shown.out


@pytest.mark.parametrize("argv", [
    ["-v", "watch"], ["watch", "-v"], ["watch", "--verbose"], ["audit", "windows", "f", "-v"],
    ["-v", "audit", "windows", "f"], ["rai", "sessions", "-v", "--from", "a", "--to", "b",
                                      "--public-key", "k"],
])
def test_verbose_works_before_and_after_the_verb(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).verbose is True


def test_verbose_is_off_unless_asked() -> None:
    assert build_parser().parse_args(["watch"]).verbose is False


def test_verbose_after_the_verb_turns_debug_logging_on(
    run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[int] = []
    monkeypatch.setattr("logging.basicConfig", lambda **kw: seen.append(kw["level"]))
    (tmp_path / "a.jsonl").write_text("")
    assert run("audit", "windows", str(tmp_path / "a.jsonl"), "-v").code == 0
    assert seen == [10]


def _every_subparser() -> list[tuple[str, argparse.ArgumentParser]]:
    return [(" ".join(path), sub) for path, sub in walk(build_parser())]


@pytest.mark.parametrize("name,sub", _every_subparser(), ids=lambda v: v
                         if isinstance(v, str) else "")
def test_every_sub_command_help_has_a_description_exit_codes_and_an_example(
    name: str, sub: argparse.ArgumentParser,
) -> None:
    text = sub.format_help()
    assert sub.description, f"failopen {name}: no description"
    first = sub.description.strip().splitlines()[0]
    assert 10 < len(first) <= 100, f"failopen {name}: the first line is the one-line summary"
    assert "Exit codes" in text, f"failopen {name}: its exit codes"
    assert "Example" in text and f"failopen {name}" in text.split("Example", 1)[1], (
        f"failopen {name}: an example that runs it")
    # RawDescriptionHelpFormatter: the epilog's line breaks survive.
    assert "\n  failopen " in text


def test_the_walk_reaches_every_level() -> None:
    names = {name for name, _ in _every_subparser()}
    assert {"status", "watch", "override", "fleet", "demo", "audit windows", "emulate status",
            "emulate rai", "rai sessions", "rai sync"} <= names


def test_watch_count_0_is_refused(run: Any) -> None:
    shown = run("watch", "--count", "0", "--status-url", "https://status.example.com")
    assert shown.code == 2 and "--count" in shown.err and "at least 1" in shown.err


@pytest.mark.parametrize("flag", ["--interval", "--poll-interval"])
def test_a_negative_interval_says_it_is_negative(run: Any, flag: str) -> None:
    shown = run("watch", flag, "-5", "--status-url", "https://status.example.com")
    assert shown.code == 2 and "--poll-interval" in shown.err
    assert "'-5' is negative" in shown.err
    # With a unit, argparse reads "-5s" as an option unless it is attached with "=".
    shown = run("watch", f"{flag}=-5s", "--status-url", "https://status.example.com")
    assert shown.code == 2 and "'-5s' is negative" in shown.err


@pytest.mark.parametrize(("argv", "said"), [
    (("watch", "--poll-interval", "1h", "--count", "0"), "--count"),
    (("rai", "sessions", "--timeout", "-1"), "'-1' is negative"),
    (("rai", "sync", "--timeout", "0"), "'0' is zero"),
    (("demo", "--step", "-1"), "'-1' is negative"),
    (("emulate", "rai", "--latency=-2ms"), "'-2ms' is negative")])
def test_every_duration_flag_reads_units_and_refuses_with_a_reason(run: Any, argv: tuple[str, ...],
                                                                   said: str) -> None:
    shown = run(*argv)
    assert shown.code == 2 and said in shown.err, shown.err


def test_watch_takes_the_interval_as_the_variable_writes_it(run: Any) -> None:
    # FAILOPEN_POLL_INTERVAL=30s and --poll-interval 30s: the same spelling everywhere.
    shown = run("watch", "--poll-interval", "nonsense")
    assert shown.code == 2 and "not a duration like 30s, 5m, 1h" in shown.err


def test_a_bad_status_url_flag_is_named_as_the_flag(run: Any) -> None:
    shown = run("status", "--status-url", "ftp://status.example.com")
    assert shown.code == 2
    assert "--status-url" in shown.err and "FAILOPEN_STATUS_URL" not in shown.err


def test_a_bad_status_url_variable_is_named_as_the_variable(
    run: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAILOPEN_STATUS_URL", "ftp://status.example.com")
    shown = run("status")
    assert shown.code == 2 and "FAILOPEN_STATUS_URL" in shown.err


def test_a_bad_store_flag_is_named_as_the_flag(run: Any) -> None:
    shown = run("override", "show", "--store", "mongodb://x")
    assert shown.code == 2 and "--store" in shown.err and "FAILOPEN_STORE:" not in shown.err


@pytest.mark.parametrize("name,value", [
    ("FAILOPEN_STORE", "mongodb://nope"),
    ("FAILOPEN_PROTECTED_PATHS", "login"),
    ("FAILOPEN_AUDIT_FILE", "/nonexistent-dir/audit.jsonl"),
    ("FAILOPEN_FLEET_LEASE", "-1"),
])
def test_status_is_not_stopped_by_a_setting_it_does_not_use(
    run: Any, page: FakeStatusPage, monkeypatch: pytest.MonkeyPatch, name: str, value: str,
) -> None:
    monkeypatch.setenv(name, value)
    shown = run("status", "--status-url", page.url)
    assert shown.code == 0, shown.err
    assert "global: operational" in shown.out
    assert name in shown.err and "ignored" in shown.err  # said, not silently dropped


def test_status_still_refuses_a_bad_setting_it_uses(
    run: Any, page: FakeStatusPage, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAILOPEN_BYPASS_ON", "sunny")
    shown = run("status", "--status-url", page.url)
    assert shown.code == 2 and "FAILOPEN_BYPASS_ON" in shown.err


def test_override_is_not_stopped_by_a_setting_it_does_not_use(
    run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # During an outage an operator must be able to override, whatever else is misconfigured.
    monkeypatch.setenv("FAILOPEN_PROTECTED_PATHS", "login")
    shown = run("override", "off", "--ttl", "5m", "--store",
                (tmp_path / "override.json").as_uri())
    assert shown.code == 0, shown.err
    assert "enforce=False" in shown.out


def test_fleet_checks_only_the_store_settings(
    run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAILOPEN_PROTECTED_PATHS", "login")
    shown = run("fleet", "--store", (tmp_path / "o.json").as_uri())
    # Past the unrelated setting (warned about), to the store itself: a file store has no fleet.
    assert shown.code == 2 and "FAILOPEN_PROTECTED_PATHS" in shown.err
    assert "reads a redis:// store" in shown.err
    named = run("fleet", "--store", "mongodb://x")
    assert named.code == 2 and "--store" in named.err


def test_a_closed_pipe_is_a_quiet_exit_0(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    path = tmp_path / "audit.jsonl"
    lines = [json.dumps({"time": f"2026-11-23T{h:02d}:{m:02d}:00.000Z",
                         "window": f"override:2026-11-23T{h:02d}:{m:02d}:00Z", "client": "c",
                         "path": "/login", "reason": "drill"})
             for h in range(24) for m in range(60)]
    path.write_text("\n".join(lines) + "\n")
    # ``| head -1``: the reader goes away after the first line of ~300 KB of output.
    proc = subprocess.Popen([sys.executable, "-m", "failopen.cli", "audit", "windows", "--json",
                             str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"{")
    proc.stdout.close()
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(60) == 0 and b"Traceback" not in err, err
