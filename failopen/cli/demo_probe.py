"""``failopen demo --vendor`` for the vendors with no status page a machine can read (reCAPTCHA,
reCAPTCHA Enterprise, Friendly Captcha): the verify probe alone is the evidence
(``FAILOPEN_EVIDENCE=probe``, :mod:`failopen.engine.probe`).

The story: healthy; a flood of junk tokens, which never turns enforcement off (the probe gets its
answer); the vendor down for everyone, which the probe turns off within its streak; sign-up on a
``fallback`` route and password reset on a ``closed`` one meanwhile; recovery, which the probe
ends; the operator's override. ``/login`` keeps the default outage policy (``open``) so that the
bypass shows, and the demo prints the start-up warning that says why a real site should not.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from typing import Any, ClassVar

from failopen.cli.demo_scenes import (
    CLIENT,
    DemoKit,
    Scene,
    World,
    override_scene,
    play_fallback,
    settle,
    verdict,
)
from failopen.config import Config
from failopen.engine.probe import PROBE_QUIET_FACTOR, VerifyProbe
from failopen.providers.registry import provider_named
from failopen.runtime import FailOpen
from failopen.testing.providers import CaptchaVerifyFake, fake_verify_api

__all__ = ["FriendlyCaptchaKit", "RecaptchaEnterpriseKit", "RecaptchaKit"]

# Demo-fast: loopback answers in milliseconds. Probes are never closer than the longest of the
# probe interval, the verify timeout and the store refresh, so all three are short here: a quiet
# site's streak (2 x 3 failed probes) then takes about two seconds instead of minutes.
PROBE_INTERVAL = 0.3
VERIFY_TIMEOUT = 0.3
STORE_REFRESH = 0.1
# reCAPTCHA's tokens carry the action the widget was given; the demo's /login expects this one.
ACTION = "login"


def _probe(world: World) -> VerifyProbe:
    probe = world.runtime.probe
    assert probe is not None  # FAILOPEN_EVIDENCE=probe: the runtime always builds it
    return probe


class _ProbeKit(DemoKit):
    """A vendor without a readable status page: its verify API, and the probe as evidence."""

    evidence = "the verify probe"
    startup_warnings = (("failopen.probe", "failopen.probe_alone_opens"),)
    verify: CaptchaVerifyFake
    #: Its tokens carry a score and an action (reCAPTCHA v3, Enterprise): the demo's valid
    #: token scores 0.9 for the action /login expects.
    scored: ClassVar[bool] = False

    def __init__(self) -> None:
        self.page = None
        self.verify = fake_verify_api(self.vendor)
        self.title = provider_named(self.vendor).title

    def settings(self) -> dict[str, Any]:
        """The vendor, its verify API and the probe as the only evidence, demo-fast."""
        found: dict[str, Any] = {
            "vendor": self.vendor, "evidence": frozenset({"probe"}),
            "verify_url": self.verify.verify_url, "private_key": self.verify.private_key,
            "public_key": self.verify.public_key, "probe_interval": PROBE_INTERVAL,
            "verify_timeout": VERIFY_TIMEOUT, "store_refresh": STORE_REFRESH,
        }
        if self.scored:
            found["expected_actions"] = (("/login", ACTION),)
        return found

    def header(self, config: Config, runtime: FailOpen) -> list[str]:
        """The vendor, its fake, what the probe needs to open and to close."""
        probe = runtime.probe
        assert probe is not None
        lines = [
            f"vendor {self.title} (FAILOPEN_VENDOR={self.vendor}): its verify API at "
            f"{self.verify.url}",
            f"no status page ({self.title} publishes none a machine can read): watching the "
            "verify probe alone (FAILOPEN_EVIDENCE=probe)",
            f"a probe every {probe.spacing:g}s (the longest of the probe interval, the verify "
            f"timeout and the store refresh); enforcement goes off after "
            f"{probe.open_after} failed probes in a row ({PROBE_QUIET_FACTOR * probe.open_after} "
            "on a quiet site) while the requests' verify calls are mostly unavailable and none "
            f"verified; back after {config.close_after} healthy probes",
        ]
        if self.scored:
            lines.append(f"/login's tokens must score {config.min_score:g} or more and carry the "
                         f"action {ACTION!r} (FAILOPEN_EXPECTED_ACTIONS)")
        lines.append(f"/login keeps the default outage policy ({config.outage_policy}) so the "
                     "bypass shows; start-up warns against it:")
        return lines

    def tokens(self) -> tuple[tuple[str, str | None], ...]:
        """A freshly solved token (scoring well, where the vendor scores), a junk one, none."""
        fresh = (self.verify.issue_token(score=0.9, action=ACTION) if self.scored
                 else self.verify.issue_token())
        return (("valid token", fresh), ("bad token", self.verify.BAD), ("no token", None))

    def healthy(self, world: World) -> None:
        """The vendor answers."""
        self.verify.set_fault(None)

    def down(self, world: World) -> None:
        """The vendor down for everyone: the probe's calls and the requests' alike."""
        self.verify.set_fault("503")

    def scenes(self) -> tuple[Scene, ...]:
        """Healthy, junk, down, fallback, recovery, override."""
        title = self.title
        return (
            Scene(f"healthy: {title} answers, and so does the probe", self.healthy, True),
            Scene("a flood of junk tokens: every one refused, the probe answered: no outage",
                  self.healthy, True, play=self._play_junk),
            Scene(f"{title} down for everyone: the probe and every verify call fail",
                  self.down, False, play=self._play_down),
            Scene("sign-up during the outage with `fallback`; password reset `closed`",
                  self.down, False, play=play_fallback),
            Scene(f"recovery: {title} answers again, the probe sees it", self.healthy, True,
                  play=self._play_recovery),
            override_scene(self.healthy),
        )

    def _play_junk(self, world: World, want: bool) -> None:
        """Junk for longer than the longest streak the probe could need: it never opens."""
        runtime, probe = world.runtime, _probe(world)
        span = PROBE_QUIET_FACTOR * probe.open_after * probe.spacing
        before = dict(probe.counted)
        seen: Counter[str] = Counter()
        end = time.monotonic() + span
        while time.monotonic() < end:
            d = runtime.decide("junk-" + secrets.token_hex(20), path="/login", client=CLIENT)
            seen[f"{verdict(d)} ({d.outcome})"] += 1
            time.sleep(0.02)
        world.printer.line(
            f"    {sum(seen.values())} junk tokens in {span:.1f}s, longer than the probe's "
            f"longest streak: {', '.join(f'{n} {what}' for what, n in seen.items())}")
        answered = probe.counted["healthy"] - before["healthy"]
        failed = probe.counted["failed"] - before["failed"]
        world.printer.line(
            f"    the probe meanwhile: {answered} answered, {failed} failed: {self.title} "
            "refusing a token is an answer, not an outage")
        settle(runtime, want, grace=2 * world.step)
        world.attempts()

    def _play_down(self, world: World, want: bool) -> None:
        """Refused while the streak builds (503, never a bypass); then the probe opens."""
        runtime, probe, printer = world.runtime, _probe(world), world.printer
        down_at = time.monotonic()
        needed = PROBE_QUIET_FACTOR * probe.open_after
        printer.line("    until the probe's streak is complete: cannot verify now (503), never "
                     "a bypass")
        world.attempts()
        # The streak, after the last scene's verified token has left the requests' window.
        settle(runtime, want, grace=2 * (needed + 2) * probe.spacing + probe.window.seconds
               + 2 * world.step)
        if runtime.flag.state.enforce == want:
            printer.line(
                f"    the probe turned enforcement off {time.monotonic() - down_at:.1f}s after "
                f"{self.title} went down: {needed} failed probes in a row, {probe.spacing:g}s "
                f"apart (a quiet site: {PROBE_QUIET_FACTOR} x FAILOPEN_PROBE_OPEN_AFTER="
                f"{probe.open_after}), the requests' verify calls unavailable, none verified")
        world.attempts()

    def _play_recovery(self, world: World, want: bool) -> None:
        """The vendor answers again: the probe gives enforcement back after its healthy run."""
        runtime, probe = world.runtime, _probe(world)
        back_at = time.monotonic()
        close_after = runtime.config.close_after
        settle(runtime, want, grace=2 * (close_after + 2) * probe.spacing + 2 * world.step)
        if runtime.flag.state.enforce == want:
            world.printer.line(
                f"    the probe gave enforcement back {time.monotonic() - back_at:.1f}s after "
                f"{self.title} answered again: FAILOPEN_CLOSE_AFTER={close_after} healthy "
                "probes in a row")
        world.attempts()


class RecaptchaKit(_ProbeKit):
    """Google reCAPTCHA (v2 and v3): scores and actions."""

    vendor = "recaptcha"
    scored = True


class RecaptchaEnterpriseKit(_ProbeKit):
    """reCAPTCHA Enterprise: scores and actions, and each probe a billed assessment."""

    vendor = "recaptcha-enterprise"
    scored = True


class FriendlyCaptchaKit(_ProbeKit):
    """Friendly Captcha: a proof-of-work puzzle, no score."""

    vendor = "friendly-captcha"
