"""``failopen demo``: a short outage, played against the test kit's fakes on loopback.

Nothing is mocked but the vendor: the real watcher thread polls a real HTTP status page, and the
real guard calls a real verify endpoint, while the script changes what the fakes report. Each
scene prints what the status page says, what the flag does, and how three log-in attempts fare.
One scene shows the outage policies (issue 20): sign-up on a ``fallback`` route, password reset on
a ``closed`` one; it needs the ``fallback`` extra and says so when it is missing.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from failopen._internal.terminal import printable
from failopen.config import Config
from failopen.engine.decision import Decision
from failopen.engine.flag import FlagState, rfc3339
from failopen.engine.watcher import PollResult
from failopen.exceptions import ConfigError
from failopen.fallback.settings import require_extra
from failopen.runtime import FailOpen
from failopen.testing.fallback import solve_challenge
from failopen.testing.status_page import FakeStatusPage
from failopen.testing.verify_api import FakeVerifyAPI
from failopen.web import RoutePolicies, challenge_answer

__all__ = ["run_demo"]


@dataclass
class _World:
    """What a scene may change: the fakes, and (for the operator's scene) the runtime."""

    page: FakeStatusPage
    verify: FakeVerifyAPI
    runtime: FailOpen
    printer: _Printer
    step: float
    #: Why the fallback scene cannot play (the extra is missing), else None.
    fallback_missing: str | None = None


@dataclass(frozen=True)
class _Scene:
    title: str
    setup: Callable[[_World], None]
    enforce: bool  # what the flag says once the scene has played
    note: str = ""
    #: Plays the scene after setup; the default lets the watcher catch up, then tries to log in.
    play: Callable[[_World, bool], None] | None = None


def _healthy(world: _World) -> None:
    page, verify = world.page, world.verify
    page.set_fault(None)
    page.set_global("operational")
    for region in ("us-east-1", "eu-west-1"):
        page.set_region(region, "operational")
    verify.set_fault(None)


def _regional(world: _World) -> None:
    world.page.set_region("eu-west-1", "major_outage")  # failover done: global stays operational


def _global_outage(world: _World) -> None:
    world.page.set_global("major_outage")
    world.verify.set_fault("503")


def _status_errors(world: _World) -> None:
    world.page.set_fault("500")


def _verify_down(world: _World) -> None:
    world.verify.set_fault("503")  # the status page still says operational


def _override_off(world: _World) -> None:
    _healthy(world)
    _settle(world.runtime, True, grace=2 * world.step)


def _play_override_off(world: _World, want: bool) -> None:
    """The operator turns enforcement off with a ttl; it lapses back to enforcement by itself."""
    runtime, printer = world.runtime, world.printer
    # The runbook's `failopen override off --ttl 30m`, with a ttl the demo can wait out.
    ttl = 3 * world.step
    state = runtime.flag.force_off("demo: ops turns enforcement off for a vendor incident",
                                   ttl=ttl, set_by="demo")
    printer.line(f"    override off placed: enforce={state.enforce} source={state.source} "
                 f"expires {rfc3339(state.expires_at)} (in {ttl:g}s)")
    _attempts(runtime, world.verify, printer)
    expires = state.expires_at if state.expires_at is not None else time.time()
    time.sleep(max(0.0, expires - time.time()))
    _settle(runtime, want, grace=2 * world.step)
    after = runtime.flag.state
    printer.line(f"    override lapsed at its expiry: enforce={after.enforce} "
                 f"source={after.source}")
    _attempts(runtime, world.verify, printer)


# The demo's fallback challenge: a twentieth of the default cost (100,000, about 0.66 s in a
# browser), so that Python solves it in milliseconds and the demo stays quick.
DEMO_FALLBACK_COST = 5_000
_DEMO_FALLBACK_SECRET = "demo-fallback-secret-" + "x" * 16  # 32+ characters, as required
_CLIENT = "203.0.113.7"


def _verdict(d: Decision) -> str:
    if d.allow:
        return "admitted (bypassed)" if d.bypassed else "admitted"
    return f"refused {d.status_code}"


def _play_fallback(world: _World, want: bool) -> None:
    """Sign-up during the outage on a ``fallback`` route; password reset on a ``closed`` one."""
    runtime, printer = world.runtime, world.printer
    _settle(runtime, want, grace=2 * world.step)
    if world.fallback_missing is not None:
        printer.line(f"    skipped: {world.fallback_missing}")
        return
    config = runtime.config
    policies = RoutePolicies.from_config(config)

    def row(label: str, verdict: str, why: str) -> None:
        printer.line(f"      {label:<24} -> {verdict:<20} {why}")

    def ask(path: str, solution: str | None = None) -> Decision:
        # What the adapters do: the route the path counts under, and that route's policy.
        route, policy = policies.for_path(path) or (path, config.outage_policy)
        return runtime.decide(None, path=path, client=_CLIENT, policy=policy, route=route,
                              solution=solution)

    printer.line(f"    /signup's policy is {policies.policy_of('/signup')}: no vendor check, "
                 "but a solved proof-of-work challenge, used once;\n"
                 f"    cost {config.fallback_cost:,} here so the demo stays quick (the default "
                 "100,000 takes a browser ~0.66 s)")
    d = ask("/signup")
    row("sign-up, no solution", _verdict(d), f"{d.outcome}: {d.reason}")
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
    row("sign-up, solved", _verdict(d), f"{d.outcome}: {d.reason}")
    d = ask("/signup", solution)
    row("sign-up, same solution", _verdict(d), f"{d.outcome}: {d.reason}")
    printer.line(f"    each admission counts toward the outage rate limit ({config.outage_rate} "
                 "per client and route)")
    printer.line(f"    /password-reset's policy is {policies.policy_of('/password-reset')}: "
                 "where a bot's success is worst, nobody gets in")
    d = ask("/password-reset")
    row("password reset", _verdict(d),
        f"{d.outcome} (Retry-After: {d.retry_after} s): {d.reason}")


_SCENES = (
    _Scene("healthy: every component operational", _healthy, True),
    _Scene("regional impairment: eu-west-1 down, failover complete", _regional, True),
    _Scene("global outage: the platform is down, verify calls fail", _global_outage, False),
    _Scene("sign-up during the outage with `fallback`; password reset `closed`", _global_outage,
           False, play=_play_fallback),
    _Scene(
        "status page erroring (HTTP 500): the last good reading stands", _status_errors, False,
        note="an error is no evidence either way: the last good reading (global=major_outage) "
             "stands;\n    had it been operational, enforcement would go on",
    ),
    _Scene("recovery: everything operational again", _healthy, True),
    _Scene("verify API down, status page operational: cannot verify now, never a bypass",
           _verify_down, True,
           note="the verify call fails, so the guard asks the status page: operational, so no "
                "outage is confirmed"),
    _Scene("operator override: `override off` until its expiry", _override_off, True,
           play=_play_override_off),
)


class _Printer:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        # Reasons, errors and audit lines quote outside text: each line shown, never obeyed
        # (the demo's own line breaks kept).
        shown = "\n".join(printable(part) for part in text.split("\n"))
        with self.lock:
            self.out.write(shown + "\n")
            self.out.flush()


class _AuditPrinter(logging.Handler):
    """Shows the audit trail in the demo's layout; keeps failopen's other logs out of it."""

    def __init__(self, printer: _Printer) -> None:
        super().__init__(logging.INFO)
        self.printer = printer
        self.loggers = [logging.getLogger("failopen.audit"), logging.getLogger("failopen")]
        self.saved = [(lg.level, lg.propagate) for lg in self.loggers]
        audit, failopen = self.loggers
        audit.addHandler(self)
        audit.setLevel(logging.INFO)
        audit.propagate = False
        failopen.setLevel(logging.CRITICAL)  # the poll lines already say what the watcher saw

    def emit(self, record: logging.LogRecord) -> None:
        self.printer.line(f"      audit: {record.getMessage()}")

    def close(self) -> None:
        self.loggers[0].removeHandler(self)
        for logger, (level, propagate) in zip(self.loggers, self.saved, strict=True):
            logger.setLevel(level)
            logger.propagate = propagate
        super().close()


def _attempts(runtime: FailOpen, verify: FakeVerifyAPI, printer: _Printer) -> None:
    for label, token in (
        # A token is verified once: each scene's users take a fresh challenge (one solves it,
        # one fails it), so the bad token reads as unsolved, not as a replay of the last scene's.
        ("valid token", verify.issue_token()),
        ("bad token", verify.issue_token(solved=False, verified=False)),
        ("no token", None),
    ):
        d = runtime.decide(token, path="/login", client=_CLIENT)
        printer.line(f"      log-in with {label:<12} -> {_verdict(d):<20} {d.reason}")


def _settle(runtime: FailOpen, want: bool, *, grace: float) -> None:
    """Give a slow machine up to ``grace`` more seconds to reach the scene's expected state."""
    deadline = time.monotonic() + grace
    while runtime.flag.state.enforce != want and time.monotonic() < deadline:
        time.sleep(0.01)


def _fallback_missing() -> str | None:
    """Why the fallback scene cannot play (its extra is not installed), else None."""
    try:
        require_extra("the fallback scene")
    except ConfigError as exc:
        return str(exc)
    return None


def run_demo(*, step: float = 0.6, out: TextIO | None = None) -> int:
    """Play the outage; returns the exit code (0 when every scene behaved as it should)."""
    printer = _Printer(out if out is not None else sys.stdout)
    fallback_missing = _fallback_missing()
    fallback = fallback_missing is None
    page = FakeStatusPage(regions=("us-east-1", "eu-west-1"))
    verify = FakeVerifyAPI(private_key="demo-private-key")
    interval = step / 4
    with page.serve() as status_server, verify.serve() as verify_server:
        config = Config(
            status_url=status_server.url,
            verify_url=verify_server.url + verify.path,
            private_key="demo-private-key",
            protected_paths=("/login", "/signup", "/password-reset") if fallback else ("/login",),
            outage_policy_routes=(("/signup", "fallback"), ("/password-reset", "closed"))
            if fallback else (),
            fallback_secret=_DEMO_FALLBACK_SECRET if fallback else None,
            fallback_cost=DEMO_FALLBACK_COST,
            poll_interval=interval,
            poll_jitter=0.0,
            # Loopback answers come in milliseconds; a time-out of one short interval would turn
            # a busy machine into status page "errors" the script did not ask for.
            status_timeout=max(interval, 1.0),
            verify_timeout=max(interval, 1.0),
            confirm_ttl=interval,
            stale_after=interval * 2,
            # The default backoff while enforcing (up to ten intervals, doubling per failed poll)
            # would leave the watcher asleep through the scene after the status page errors.
            backoff_max=interval,
            store_refresh=interval,
            audit="each",  # a handful of requests: show every bypass, not a summary
        )

        last_seen: list[tuple[object, ...]] = [()]

        def on_poll(result: PollResult) -> None:
            seen = result.report.global_status if result.report is not None else "unreadable"
            state = runtime.flag.state
            regions = ",".join(
                f"{c.description}={c.status}" for c in result.report.impaired_regions()
            ) if result.report is not None else ""
            shown = (seen, regions, state.enforce, state.stale, result.error)
            if shown == last_seen[0]:
                return  # print what changes, not every poll
            last_seen[0] = shown
            note = f" ({result.error})" if result.error else ""
            note += f" impaired regions: {regions}" if regions else ""
            printer.line(
                f"    poll: global={seen:<14} enforce={state.enforce!s:<5} "
                f"stale={state.stale!s:<5}{note}"
            )

        def on_transition(old: FlagState, new: FlagState) -> None:
            # Only real transitions: the value changed. A new reason or source under the same
            # value is in the poll lines; going stale is worth its own line.
            if old.enforce != new.enforce:
                stale = " (stale: no good reading lately)" if new.stale else ""
                printer.line(
                    f"  >> flag: enforce {old.enforce} -> {new.enforce} [{new.source}] "
                    f"{new.reason}{stale}"
                )
            elif new.stale and not old.stale:
                printer.line(f"  .. flag: still enforce={new.enforce}, but stale: no good "
                             f"reading lately")

        runtime = FailOpen(config, on_poll=on_poll)
        runtime.flag.add_listener(on_transition)
        audit = _AuditPrinter(printer)
        printer.line(f"status page {status_server.url}  verify {verify_server.url}")
        printer.line(
            f"polling every {interval:g}s; bypass on {', '.join(sorted(config.bypass_on))}"
        )
        world = _World(page, verify, runtime, printer, step, fallback_missing)
        ok = True
        runtime.start()
        try:
            for number, scene in enumerate(_SCENES, start=1):
                printer.line(f"\n[{number}/{len(_SCENES)}] {scene.title}")
                if scene.note:
                    printer.line(f"    {scene.note}")
                scene.setup(world)
                if scene.play is not None:
                    scene.play(world, scene.enforce)
                else:
                    time.sleep(step)
                    _settle(runtime, scene.enforce, grace=2 * step)
                    _attempts(runtime, verify, printer)
                if runtime.flag.state.enforce != scene.enforce:
                    ok = False
                    printer.line(f"  !! expected enforce={scene.enforce}")
            printer.line(
                "\nops: `failopen override on --ttl 30m` forces enforcement whatever the "
                "status page says; `failopen override auto` hands back to the watcher."
            )
            runtime.flag.force_on("demo: ops forces enforcement", ttl=step)
            printer.line(f"    override placed -> enforce={runtime.flag.state.enforce}")
            time.sleep(step * 1.2)
            printer.line(f"    after its ttl    -> source={runtime.flag.state.source}")
        finally:
            runtime.stop()
            audit.close()
    printer.line("\ndemo finished: " + ("every scene behaved as expected" if ok else "FAILED"))
    return 0 if ok else 1
