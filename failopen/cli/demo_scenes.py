"""What every vendor's ``failopen demo`` shares: the printer, a scene, and the scenes that play
alike whoever the vendor is (the operator's override, the outage policies' fallback).

A vendor's kit (:mod:`failopen.cli.demo_vendors`) says only what differs: its fakes, how its
outages are played and which tokens its users send.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TextIO

from failopen._internal.terminal import printable
from failopen.config import Config
from failopen.engine.decision import Decision
from failopen.engine.flag import rfc3339
from failopen.providers.status_documents import StatusReport
from failopen.runtime import FailOpen
from failopen.testing.fallback import solve_challenge
from failopen.testing.providers import CaptchaVerifyFake
from failopen.testing.status_page import FakeStatusPage
from failopen.testing.verify_api import FakeVerifyAPI
from failopen.web import RoutePolicies, challenge_answer

__all__ = [
    "CLIENT", "DEMO_FALLBACK_COST", "DemoKit", "Printer", "Scene", "VerifyFake", "World",
    "override_scene", "play_fallback", "settle", "verdict",
]

#: The spec's vendor's fake, or another vendor's (failopen.testing.providers).
VerifyFake = FakeVerifyAPI | CaptchaVerifyFake

# The demo's fallback challenge: a twentieth of the default cost (100,000, about 0.66 s in a
# browser), so that Python solves it in milliseconds and the demo stays quick.
DEMO_FALLBACK_COST = 5_000
CLIENT = "203.0.113.7"


class Printer:
    """Writes the demo's lines, one at a time whichever thread prints."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        """Write ``text``, each line shown as text."""
        # Reasons, errors and audit lines quote outside text: each line shown, never obeyed
        # (the demo's own line breaks kept).
        shown = "\n".join(printable(part) for part in text.split("\n"))
        with self.lock:
            self.out.write(shown + "\n")
            self.out.flush()


@dataclass
class World:
    """What a scene may change: the fakes, and (for the operator's scene) the runtime."""

    page: FakeStatusPage | None  # None: the vendor publishes no page a machine can read
    verify: VerifyFake
    runtime: FailOpen
    printer: Printer
    step: float
    #: The scene's three log-in attempts (valid, bad and no token), each printed.
    attempts: Callable[[], None]
    #: Why the fallback scene cannot play (the extra is missing), else None.
    fallback_missing: str | None = None


@dataclass(frozen=True)
class Scene:
    """One step of the story: what changes, and what the flag must say once it has played."""

    title: str
    setup: Callable[[World], None]
    enforce: bool  # what the flag says once the scene has played
    note: str = ""
    #: Plays the scene after setup; the default lets the watcher catch up, then tries to log in.
    play: Callable[[World, bool], None] | None = None


class DemoKit(ABC):
    """One vendor's side of the demo, made fresh for each run: its fakes (not yet served), the
    settings that point failopen at them, its scenes and the tokens its users send."""

    #: The vendor's name, as ``--vendor`` and ``FAILOPEN_VENDOR`` take it.
    vendor: ClassVar[str]
    #: What the poll lines call the component that decides.
    label: ClassVar[str] = "global"
    #: What the flag follows when no operator overrides it (the ops epilogue says so).
    evidence: ClassVar[str] = "the status page"
    #: Print each scene's expected value once it has played. The spec's vendor's story keeps
    #: the output it had before there were other vendors (tests/test_demo.py pins it).
    states_expectation: ClassVar[bool] = True
    #: Start-up warnings the demo prints, as (logger, event) pairs; they stay out of the log.
    startup_warnings: ClassVar[tuple[tuple[str, str], ...]] = ()
    verify: VerifyFake
    page: FakeStatusPage | None

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """The Config fields that point failopen at this kit's fakes, once they are served."""

    @abstractmethod
    def header(self, config: Config, runtime: FailOpen) -> list[str]:
        """The demo's first lines: the vendor, where its fakes answer and what is watched."""

    @abstractmethod
    def scenes(self) -> tuple[Scene, ...]:
        """The story, in order."""

    @abstractmethod
    def tokens(self) -> tuple[tuple[str, str | None], ...]:
        """Each scene's three users: a freshly solved token, a bad one, none."""

    def impaired(self, report: StatusReport) -> str:
        """What else the page reports impaired, for the poll line ("" when nothing is)."""
        return ""


def verdict(d: Decision) -> str:
    """How a decision reads in the demo's rows."""
    if d.allow:
        return "admitted (bypassed)" if d.bypassed else "admitted"
    return f"refused {d.status_code}"


def settle(runtime: FailOpen, want: bool, *, grace: float) -> None:
    """Give a slow machine up to ``grace`` more seconds to reach the scene's expected state."""
    deadline = time.monotonic() + grace
    while runtime.flag.state.enforce != want and time.monotonic() < deadline:
        time.sleep(0.01)


def override_scene(healthy: Callable[[World], None]) -> Scene:
    """The operator's ``override off`` with a ttl, the vendor healthy (``healthy`` makes it so)."""

    def setup(world: World) -> None:
        healthy(world)
        settle(world.runtime, True, grace=2 * world.step)

    return Scene("operator override: `override off` until its expiry", setup, True,
                 play=_play_override_off)


def _play_override_off(world: World, want: bool) -> None:
    """The operator turns enforcement off with a ttl; it lapses back to enforcement by itself."""
    runtime, printer = world.runtime, world.printer
    # The runbook's `failopen override off --ttl 30m`, with a ttl the demo can wait out.
    ttl = 3 * world.step
    state = runtime.flag.force_off("demo: ops turns enforcement off for a vendor incident",
                                   ttl=ttl, set_by="demo")
    printer.line(f"    override off placed: enforce={state.enforce} source={state.source} "
                 f"expires {rfc3339(state.expires_at)} (in {ttl:g}s)")
    world.attempts()
    expires = state.expires_at if state.expires_at is not None else time.time()
    time.sleep(max(0.0, expires - time.time()))
    settle(runtime, want, grace=2 * world.step)
    after = runtime.flag.state
    printer.line(f"    override lapsed at its expiry: enforce={after.enforce} "
                 f"source={after.source}")
    world.attempts()


def play_fallback(world: World, want: bool) -> None:
    """Sign-up during the outage on a ``fallback`` route; password reset on a ``closed`` one."""
    runtime, printer = world.runtime, world.printer
    settle(runtime, want, grace=2 * world.step)
    if world.fallback_missing is not None:
        printer.line(f"    skipped: {world.fallback_missing}")
        return
    config = runtime.config
    policies = RoutePolicies.from_config(config)

    def row(label: str, verdict_: str, why: str) -> None:
        printer.line(f"      {label:<24} -> {verdict_:<20} {why}")

    def ask(path: str, solution: str | None = None) -> Decision:
        # What the adapters do: the route the path counts under, and that route's policy.
        route, policy = policies.for_path(path) or (path, config.outage_policy)
        return runtime.decide(None, path=path, client=CLIENT, policy=policy, route=route,
                              solution=solution)

    printer.line(f"    /signup's policy is {policies.policy_of('/signup')}: no vendor check, "
                 "but a solved proof-of-work challenge, used once;\n"
                 f"    cost {config.fallback_cost:,} here so the demo stays quick (the default "
                 "100,000 takes a browser ~0.66 s)")
    d = ask("/signup")
    row("sign-up, no solution", verdict(d), f"{d.outcome}: {d.reason}")
    status, challenge = challenge_answer(runtime.state, runtime.challenges, mode=config.mode)
    if status != 200:  # enforcement came back meanwhile: the scene's check says so
        row("GET /failopen/challenge", str(status), str(challenge))
        return
    row("GET /failopen/challenge", str(status),
        f"maxnumber={challenge['maxnumber']}, HMAC-signed, valid {config.fallback_ttl:g}s")
    started = time.process_time()
    solution = solve_challenge(challenge)  # what the browser's Web Worker does
    row("solve it", f"{(time.process_time() - started) * 1000:.1f} ms CPU",
        "the work a browser, or a bot, does for each admission")
    d = ask("/signup", solution)
    row("sign-up, solved", verdict(d), f"{d.outcome}: {d.reason}")
    d = ask("/signup", solution)
    row("sign-up, same solution", verdict(d), f"{d.outcome}: {d.reason}")
    printer.line(f"    each admission counts toward the outage rate limit ({config.outage_rate} "
                 "per client and route)")
    printer.line(f"    /password-reset's policy is {policies.policy_of('/password-reset')}: "
                 "where a bot's success is worst, nobody gets in")
    d = ask("/password-reset")
    row("password reset", verdict(d),
        f"{d.outcome} (Retry-After: {d.retry_after} s): {d.reason}")
