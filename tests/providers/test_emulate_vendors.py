"""``failopen emulate verify --vendor NAME`` and ``emulate token --vendor NAME``: a vendor's verify
API served on loopback by one process, tokens minted by another, accepted once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from failopen.cli.command import main
from failopen.providers.registry import PROVIDERS
from failopen.providers.verify import HttpVerifier, VerifyOutcome
from failopen.testing import fake_verify_api

FAILOPEN = Path(sys.executable).with_name("failopen")
VENDORS = ["turnstile", "hcaptcha", "recaptcha", "recaptcha-enterprise", "friendly-captcha"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}


def mint(vendor: str, *extra: str) -> list[str]:
    done = subprocess.run([str(FAILOPEN), "emulate", "token", "--vendor", vendor, *extra],
                          capture_output=True, text=True, timeout=30, env=_env())
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.slow
@pytest.mark.parametrize("vendor", VENDORS)
def test_a_served_vendor_accepts_a_minted_token_once(vendor: str) -> None:
    proc = subprocess.Popen([str(FAILOPEN), "emulate", "verify", "--vendor", vendor, "--port",
                             "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())
    assert proc.stdout is not None
    try:
        banner = [proc.stdout.readline() for _ in range(6)]
        settings = dict(line.strip().split("=", 1) for line in banner[1:5])
        assert settings["FAILOPEN_VENDOR"] == vendor
        token, other = mint(vendor, "--count", "2")
        verifier = HttpVerifier(settings["FAILOPEN_VERIFY_URL"],
                                settings["FAILOPEN_PRIVATE_KEY"], provider=PROVIDERS[vendor],
                                public_key=settings["FAILOPEN_PUBLIC_KEY"])
        with verifier:
            assert verifier.verify(token, remote_ip="127.0.0.1").valid
            assert verifier.verify(token).outcome is VerifyOutcome.INVALID  # once
            assert verifier.verify(other).valid
            assert verifier.verify("junk-" + token[5:]).outcome is VerifyOutcome.INVALID
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
    assert proc.returncode == 0


def test_a_minted_score_and_action_reach_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emulate", "token", "--vendor", "recaptcha", "--score", "0.3",
                 "--action", "login"]) == 0
    token = capsys.readouterr().out.strip()
    fake = fake_verify_api("recaptcha")
    with HttpVerifier("https://www.google.com/recaptcha/api/siteverify", fake.private_key,
                      provider=PROVIDERS["recaptcha"], transport=fake.transport()) as verifier:
        result = verifier.verify(token)
    assert result.outcome is VerifyOutcome.INVALID and result.low_score and result.score == 0.3


def test_a_claim_the_vendor_has_not_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emulate", "token", "--vendor", "friendly-captcha", "--score", "0.9"]) == 2
    assert "score" in capsys.readouterr().err
    assert main(["emulate", "token", "--score", "0.9"]) == 2  # the spec's vendor has no scores


def test_a_fault_the_vendor_has_not_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emulate", "verify", "--fault", "internal_error", "--port", "0"]) == 2
    assert "turnstile" in capsys.readouterr().err


@pytest.mark.slow
def test_a_running_turnstile_fake_takes_its_own_fault_by_set() -> None:
    proc = subprocess.Popen([str(FAILOPEN), "emulate", "verify", "--vendor", "turnstile",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env())
    assert proc.stdout is not None
    try:
        url = proc.stdout.readline().split(": ", 1)[1].strip().rsplit("/turnstile/", 1)[0]
        done = subprocess.run([str(FAILOPEN), "emulate", "verify", "--url", url, "--set",
                               "fault=internal_error"], capture_output=True, text=True,
                              timeout=30, env=_env())
        assert done.returncode == 0, done.stderr
        with HttpVerifier(url + "/turnstile/v0/siteverify", "k" * 20,
                          provider=PROVIDERS["turnstile"]) as verifier:
            result = verifier.verify("a-token-of-the-widget")
        assert result.outcome is VerifyOutcome.UNAVAILABLE and "internal-error" in result.reason
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
