"""``failopen demo --vendor NAME``: every vendor's story plays, names the vendor and what is
watched, says each scene's expected value, and bypasses only where that vendor's evidence says.

One in-process run per vendor (step 0.2 s) is shared by the checks on its output; the spec's
vendor's own story is pinned by tests/test_demo.py.
"""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from failopen.cli.demo import run_demo
from failopen.cli.demo_vendors import DEMO_KITS, demo_kit
from failopen.providers.registry import DEFAULT_VENDOR, PROVIDERS

FAILOPEN = Path(sys.executable).with_name("failopen")
PAGES = {"turnstile": "m4jywscr0n0k", "hcaptcha": "Captcha API"}
PROBE_ONLY = ("recaptcha", "recaptcha-enterprise", "friendly-captcha")
VENDORS = (*PAGES, *PROBE_ONLY)
# What the flag says once each scene has played: the spec's story for a vendor with a status
# page; healthy, junk, down, fallback, recovery, override for the probe alone.
EXPECTED = {
    **dict.fromkeys(PAGES, (True, True, False, False, False, True, True, True)),
    **dict.fromkeys(PROBE_ONLY, (True, True, False, False, True, True)),
}


def _probe_logger() -> tuple[int, bool, tuple[logging.Handler, ...], tuple[object, ...]]:
    logger = logging.getLogger("failopen.probe")
    return logger.level, logger.propagate, tuple(logger.handlers), tuple(logger.filters)


class Played:
    """One run of one vendor's demo."""

    def __init__(self, vendor: str) -> None:
        self.vendor = vendor
        self.titles = [scene.title for scene in demo_kit(vendor).scenes()]
        out = io.StringIO()
        self.logging_before = _probe_logger()
        self.code = run_demo(step=0.2, out=out, vendor=vendor)
        self.logging_after = _probe_logger()
        self.output = out.getvalue()

    @property
    def header(self) -> str:
        return self.output.split("\n[1/", 1)[0]

    def scenes(self) -> dict[str, str]:
        """Each scene's section of the output, by title (the epilogue cut off the last one)."""
        body = self.output.split("\nops:", 1)[0]
        parts = re.split(rf"^\[(\d)/{len(self.titles)}\] (.*)$", body, flags=re.MULTILINE)
        return {parts[i + 1]: parts[i + 2] for i in range(1, len(parts) - 1, 3)}

    def scene(self, number: int) -> str:
        return self.scenes()[self.titles[number - 1]]


@pytest.fixture(scope="module", params=VENDORS)
def played(request: pytest.FixtureRequest) -> Played:
    return Played(request.param)


def bypasses(section: str) -> int:
    return section.count("admitted (bypassed)")


def test_every_vendor_has_a_demo_kit() -> None:
    assert set(DEMO_KITS) == set(PROVIDERS)
    assert list(DEMO_KITS)[0] == DEFAULT_VENDOR


def test_the_demo_exits_0_and_says_so(played: Played) -> None:
    assert played.code == 0, played.output
    assert "demo finished: every scene behaved as expected" in played.output
    assert "!! expected" not in played.output
    assert list(played.scenes()) == played.titles


def test_the_header_names_the_vendor_and_what_is_watched(played: Played) -> None:
    header = played.header
    assert f"vendor {PROVIDERS[played.vendor].title} (FAILOPEN_VENDOR={played.vendor})" in header
    if played.vendor in PAGES:
        assert f"watching {PAGES[played.vendor]} (" in header, header
    else:
        assert "no status page" in header
        assert "watching the verify probe alone (FAILOPEN_EVIDENCE=probe)" in header


def test_each_scene_says_its_expected_value(played: Played) -> None:
    for title, want in zip(played.titles, EXPECTED[played.vendor], strict=True):
        section = played.scenes()[title]
        assert section.rstrip().endswith(f"== enforce={want}, as this scene expects"), (
            title, section)


def test_log_ins_bypass_only_while_enforcement_is_off(played: Played) -> None:
    for title, want in zip(played.titles, EXPECTED[played.vendor], strict=True):
        section = played.scenes()[title]
        if want and "override" not in title:
            assert bypasses(section) == 0, section
            assert "audit: bypass" not in section
    healthy = played.scene(1)
    assert "log-in with valid token  -> admitted " in healthy  # scored tokens pass too
    assert "log-in with bad token    -> refused 403" in healthy
    assert "log-in with no token     -> refused 403" in healthy


@pytest.mark.parametrize("played", list(PAGES), indirect=True)
def test_only_the_captcha_component_decides(played: Played) -> None:
    label = {"turnstile": "Turnstile", "hcaptcha": "Captcha API"}[played.vendor]
    regional, outage = played.scene(2), played.scene(3)
    assert f"poll: {label}=operational" in regional
    assert "not operational elsewhere on the page: " in regional
    if played.vendor == "turnstile":
        assert "Singapore, Singapore - (SIN)" in regional
        assert "page as a whole reads major, but only the Turnstile component decides" in regional
    else:
        assert "elsewhere on the page: API loads" in regional
    assert f"poll: {label}=major_outage" in outage
    assert ">> flag: enforce True -> False [watcher]" in outage
    assert bypasses(outage) == 3 and "audit: bypass" in outage
    verify_down = played.scene(7)
    assert "-> refused 503          cannot verify now" in verify_down
    assert "no outage confirmed" in verify_down


@pytest.mark.parametrize("played", PROBE_ONLY, indirect=True)
def test_without_a_page_the_probe_alone_opens_and_closes(played: Played) -> None:
    header = played.header
    assert "start-up warning: FAILOPEN_EVIDENCE=probe: the verify probe alone can turn " \
           "enforcement off" in header
    assert "Prefer the fallback or closed outage policy there." in header
    junk = played.scene(2)
    assert re.search(r"\d+ junk tokens in [\d.]+s, longer than the probe's longest streak: "
                     r"\d+ refused 403 \(invalid_token\)$", junk, re.M), junk
    assert ">> flag" not in junk
    down = played.scene(3)
    before, after = down.split(">> flag: enforce True -> False [probe]", 1)
    assert "log-in with valid token  -> refused 503          cannot verify now" in before
    assert bypasses(before) == 0
    assert "no status page is watched (FAILOPEN_EVIDENCE=probe)" in after
    assert re.search(r"the probe turned enforcement off [\d.]+s after .* went down: 6 failed "
                     r"probes in a row", after), after
    assert bypasses(after) == 3
    fallback = played.scene(4)
    assert "sign-up, solved          -> admitted (bypassed)  bypassed_fallback" in fallback
    assert "password reset           -> refused 503          outage_closed" in fallback
    recovery = played.scene(5)
    assert ">> flag: enforce False -> True [probe]" in recovery
    assert "the probe gave enforcement back" in recovery
    assert "ops: `failopen override on --ttl 30m` forces enforcement whatever the verify probe " \
           "says" in played.output


def test_the_demo_leaves_the_probe_logger_as_it_found_it(played: Played) -> None:
    assert played.logging_after == played.logging_before


@pytest.mark.slow
def test_failopen_demo_vendor_command_exits_0() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    done = subprocess.run(
        [str(FAILOPEN), "demo", "--vendor", "hcaptcha", "--step", "0.2"], capture_output=True,
        text=True, timeout=60, env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "vendor hCaptcha (FAILOPEN_VENDOR=hcaptcha)" in done.stdout
    assert "every scene behaved as expected" in done.stdout
    assert "Traceback" not in done.stderr
