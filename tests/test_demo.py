"""``failopen demo``: the scripted outage behaves, says so, and leaves logging as it found it."""

from __future__ import annotations

import importlib.util
import io
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from failopen.cli.demo import run_demo

FAILOPEN = Path(sys.executable).with_name("failopen")
SCENES = (
    "healthy: every component operational",
    "regional impairment: eu-west-1 down, failover complete",
    "global outage: the platform is down, verify calls fail",
    "sign-up during the outage with `fallback`; password reset `closed`",
    "status page erroring (HTTP 500): the last good reading stands",
    "recovery: everything operational again",
    "verify API down, status page operational: cannot verify now, never a bypass",
    "operator override: `override off` until its expiry",
)
LOGGERS = ("failopen", "failopen.audit", "failopen.watcher", "failopen.guard", "failopen.flag")


def logging_state() -> dict[str, tuple[int, bool, tuple[logging.Handler, ...], bool]]:
    return {
        name: (lg.level, lg.propagate, tuple(lg.handlers), lg.disabled)
        for name, lg in ((n, logging.getLogger(n)) for n in LOGGERS)
    }


def scenes(output: str) -> dict[str, str]:
    """Each scene's section of the output, by title (the epilogue cut off the last one)."""
    body = output.split("\nops:", 1)[0]
    parts = re.split(rf"^\[(\d)/{len(SCENES)}\] (.*)$", body, flags=re.MULTILINE)
    # parts: [preamble, number, title, section, number, title, section, ...]
    return {parts[i + 1]: parts[i + 2] for i in range(1, len(parts) - 1, 3)}


def bypasses(section: str) -> int:
    return section.count("admitted (bypassed)")


@pytest.fixture(scope="module")
def played() -> tuple[int, str]:
    """One in-process run, shared by the checks on its output."""
    out = io.StringIO()
    code = run_demo(step=0.2, out=out)
    return code, out.getvalue()


def test_demo_exits_0_and_says_so(played: tuple[int, str]) -> None:
    code, output = played
    assert code == 0, output
    assert "demo finished: every scene behaved as expected" in output
    assert "!! expected" not in output


def test_demo_plays_every_scene_in_order(played: tuple[int, str]) -> None:
    _, output = played
    positions = [output.index(f"[{n}/{len(SCENES)}] {title}")
                 for n, title in enumerate(SCENES, start=1)]
    assert positions == sorted(positions)
    assert list(scenes(output)) == list(SCENES)


def test_demo_bypasses_only_during_the_outage(played: tuple[int, str]) -> None:
    _, output = played
    by_title = scenes(output)
    healthy, regional, outage, _fallback, errors, recovery = (by_title[t] for t in SCENES[:6])
    for section in (healthy, regional, recovery):
        assert bypasses(section) == 0, section
        assert "audit: bypass" not in section
        assert "log-in with valid token  -> admitted " in section
        assert "log-in with bad token    -> refused 403" in section
        assert "log-in with no token     -> refused 403" in section
    for section in (outage, errors):
        assert bypasses(section) >= 1, section
        assert "audit: bypass" in section
    assert "impaired regions: eu-west-1=major_outage" in regional
    assert "global=major_outage" in outage
    assert "global=unreadable" in errors


def test_demo_refuses_a_failed_challenge_for_what_it_is(played: tuple[int, str]) -> None:
    # Each scene's user fails a fresh challenge: a reader must see "not solved", not a replay
    # of the last scene's token (which the fake, like the vendor, reports as verified before).
    _, output = played
    refused = [line for line in output.splitlines()
               if "log-in with bad token    -> refused 403" in line]
    assert len(refused) == 4, output  # healthy, regional, recovery, after the override lapsed
    assert all("challenge not solved" in line for line in refused), refused


def test_demo_status_page_errors_keep_the_last_good_reading(played: tuple[int, str]) -> None:
    # A reader must not come away thinking errors cause a bypass: the outage read before the
    # errors is what keeps enforcement off, and the scene says so.
    _, output = played
    errors = scenes(output)[SCENES[4]]
    assert "an error is no evidence either way: the last good reading (global=major_outage) " \
           "stands" in errors
    assert "had it been operational, enforcement would go on" in errors
    assert "stale=True" in errors


def test_demo_verify_api_down_is_503_never_a_bypass(played: tuple[int, str]) -> None:
    _, output = played
    section = scenes(output)[SCENES[6]]
    assert bypasses(section) == 0, section
    assert "audit: bypass" not in section
    # "no outage confirmed" below is the guard's answer after it asked the status page. (The
    # flag's own "[confirmed]" line is not asserted: the confirm check may answer from the
    # reading it cached a moment before, which changes no state and prints nothing.)
    for label in ("valid token ", "bad token   "):
        line = next(li for li in section.splitlines() if f"log-in with {label}" in li)
        assert "-> refused 503" in line and "cannot verify now" in line, line
        assert "no outage confirmed" in line
    assert "log-in with no token     -> refused 403" in section


def test_demo_override_off_shows_its_expiry_and_lapses_to_enforcement(
    played: tuple[int, str]
) -> None:
    _, output = played
    section = scenes(output)[SCENES[7]]
    placed, after = section.split("override lapsed", 1)
    expiry = re.search(r"override off placed: enforce=False source=override "
                       r"expires (\d{4}-\d\d-\d\dT[\d:.]+Z) \(in [\d.]+s\)", placed)
    assert expiry, placed
    assert bypasses(placed) == 3, placed  # every attempt, while the operator said so
    assert "enforcement off (override)" in placed
    assert ">> flag: enforce True -> False [override]" in placed
    lapse = section.index(">> flag: enforce False -> True [watcher]")
    assert section.index("override off placed") < lapse < section.index("override lapsed")
    assert re.search(r": enforce=True source=watcher", after), after
    assert bypasses(after) == 0, after
    assert "log-in with valid token  -> admitted " in after
    assert "log-in with bad token    -> refused 403" in after


def row(section: str, label: str) -> str:
    """The line of ``section`` for one request of the fallback scene, by its label."""
    found = [line for line in section.splitlines() if line.startswith(f"      {label:<24} -> ")]
    assert len(found) == 1, (label, section)
    return found[0]


def test_demo_fallback_admits_a_solved_challenge_once(played: tuple[int, str]) -> None:
    _, output = played
    section = scenes(output)[SCENES[3]]
    assert "/signup's policy is fallback" in section
    assert "cost 5,000 here so the demo stays quick" in section  # said, not hidden
    assert "-> refused 403          fallback_required: " in row(section, "sign-up, no solution")
    challenge = row(section, "GET /failopen/challenge")
    assert "-> 200 " in challenge and "maxnumber=5000" in challenge, challenge
    assert " ms CPU " in row(section, "solve it")
    solved = row(section, "sign-up, solved")
    assert "-> admitted (bypassed)  bypassed_fallback: " in solved, solved
    assert "fallback challenge solved" in solved
    replayed = row(section, "sign-up, same solution")
    assert "-> refused 403          fallback_invalid: " in replayed, replayed
    assert "already used" in replayed
    assert bypasses(section) == 1, section  # the solved sign-up, and nothing else
    # The admission is audited like any bypass, with what let it through.
    audit = [line for line in section.splitlines() if "audit: bypass" in line]
    assert len(audit) == 1 and "path='/signup'" in audit[0], audit
    lines = section.splitlines()
    assert lines.index(row(section, "sign-up, no solution")) \
        < lines.index(row(section, "GET /failopen/challenge")) \
        < lines.index(row(section, "sign-up, solved")) \
        < lines.index(row(section, "sign-up, same solution"))


def test_demo_password_reset_is_closed_during_the_outage(played: tuple[int, str]) -> None:
    _, output = played
    section = scenes(output)[SCENES[3]]
    assert "/password-reset's policy is closed" in section
    reset = row(section, "password reset")
    assert "-> refused 503          outage_closed (Retry-After: 5 s): " in reset, reset
    assert "closed during an outage" in reset
    assert "outage rate limit (20/minute per client and route)" in section


def test_demo_without_the_fallback_extra_skips_that_scene_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The README's first line installs the extra; an older .venv made with `-e .` has not got it.
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None
                        if name in ("altcha", "limits") else find_spec(name, *a))
    out = io.StringIO()
    assert run_demo(step=0.1, out=out) == 0, out.getvalue()
    output = out.getvalue()
    section = scenes(output)[SCENES[3]]
    shown = [line.strip() for line in section.splitlines()
             if line.strip() and not line.lstrip().startswith(("poll:", ">> flag:"))]
    assert shown == ['skipped: the fallback scene needs altcha, which is not installed: pip '
                     'install "failopen[fallback]"'], section
    assert "demo finished: every scene behaved as expected" in output
    assert list(scenes(output)) == list(SCENES)


def test_demo_prints_the_transitions(played: tuple[int, str]) -> None:
    _, output = played
    assert ">> flag: enforce True -> False" in output
    assert ">> flag: enforce False -> True" in output
    assert "override placed -> enforce=True" in output


def test_demo_restores_logging() -> None:
    watcher = logging.getLogger("failopen.watcher")
    watcher.setLevel(logging.DEBUG)  # a non-default state the demo must give back
    try:
        before = logging_state()
        assert run_demo(step=0.1, out=io.StringIO()) == 0
        assert logging_state() == before
    finally:
        watcher.setLevel(logging.NOTSET)


def test_demo_restores_logging_when_it_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    import failopen.cli.demo as demo

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("scene broke")

    monkeypatch.setattr(demo, "_attempts", broken)
    before = logging_state()
    with pytest.raises(RuntimeError, match="scene broke"):
        run_demo(step=0.05, out=io.StringIO())
    assert logging_state() == before


def test_failopen_demo_command_exits_0() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    done = subprocess.run(
        [str(FAILOPEN), "demo", "--step", "0.05"], capture_output=True, text=True, timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every scene behaved as expected" in done.stdout
    for title in SCENES:
        assert title in done.stdout
    assert "Traceback" not in done.stderr
