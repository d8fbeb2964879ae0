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
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TextIO

from failopen.cli.demo_scenes import (
    CLIENT,
    DEMO_FALLBACK_COST,
    DemoKit,
    World,
    settle,
    verdict,
)
from failopen.cli.demo_scenes import Printer as _Printer
from failopen.cli.demo_vendors import demo_kit
from failopen.config import Config
from failopen.engine.flag import FlagState
from failopen.engine.watcher import PollResult
from failopen.exceptions import ConfigError
from failopen.fallback.settings import require_extra
from failopen.providers.registry import DEFAULT_VENDOR
from failopen.runtime import FailOpen

__all__ = ["run_demo"]

_DEMO_FALLBACK_SECRET = "demo-fallback-secret-" + "x" * 16  # 32+ characters, as required


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


def _attempts(runtime: FailOpen, kit: DemoKit, printer: _Printer) -> None:
    for label, token in kit.tokens():
        d = runtime.decide(token, path="/login", client=CLIENT)
        printer.line(f"      log-in with {label:<12} -> {verdict(d):<20} {d.reason}")


@contextmanager
def _startup_warnings(wanted: tuple[tuple[str, str], ...]) -> Iterator[list[str]]:
    """The start-up warnings ``wanted`` ((logger, event) pairs) while the runtime is built: kept
    for the demo to print in its own layout rather than left to the log on stderr."""
    found: list[str] = []
    loggers = {name: logging.getLogger(name) for name, _event in wanted}
    events = {event for _name, event in wanted}
    saved = {name: logger.level for name, logger in loggers.items()}

    def catch(record: logging.LogRecord) -> bool:
        if getattr(record, "event", None) in events:
            found.append(record.getMessage())
            return False  # the demo prints it: not twice
        return True

    for logger in loggers.values():
        if not logger.isEnabledFor(logging.WARNING):
            logger.setLevel(logging.WARNING)
        logger.addFilter(catch)
    try:
        yield found
    finally:
        for name, logger in loggers.items():
            logger.removeFilter(catch)
            logger.setLevel(saved[name])


def _fallback_missing() -> str | None:
    """Why the fallback scene cannot play (its extra is not installed), else None."""
    try:
        require_extra("the fallback scene")
    except ConfigError as exc:
        return str(exc)
    return None


def _config(kit: DemoKit, step: float, *, fallback: bool) -> Config:
    """The demo's settings: quick polls and short timeouts, then what the vendor's kit says."""
    interval = step / 4
    shared: dict[str, Any] = {
        "protected_paths": ("/login", "/signup", "/password-reset") if fallback else ("/login",),
        "outage_policy_routes": (("/signup", "fallback"), ("/password-reset", "closed"))
        if fallback else (),
        "fallback_secret": _DEMO_FALLBACK_SECRET if fallback else None,
        "fallback_cost": DEMO_FALLBACK_COST,
        "poll_interval": interval,
        "poll_jitter": 0.0,
        # Loopback answers come in milliseconds; a time-out of one short interval would turn
        # a busy machine into status page "errors" the script did not ask for.
        "status_timeout": max(interval, 1.0),
        "verify_timeout": max(interval, 1.0),
        "confirm_ttl": interval,
        "stale_after": interval * 2,
        # The default backoff while enforcing (up to ten intervals, doubling per failed poll)
        # would leave the watcher asleep through the scene after the status page errors.
        "backoff_max": interval,
        "store_refresh": interval,
        "audit": "each",  # a handful of requests: show every bypass, not a summary
    }
    return Config(**{**shared, **kit.settings()})


def run_demo(*, step: float = 0.6, out: TextIO | None = None,
             vendor: str = DEFAULT_VENDOR) -> int:
    """Play the outage against ``vendor``'s fakes; returns the exit code (0 when every scene
    behaved as it should)."""
    printer = _Printer(out if out is not None else sys.stdout)
    fallback_missing = _fallback_missing()
    kit = demo_kit(vendor)
    with ExitStack() as serving:
        if kit.page is not None:
            serving.enter_context(kit.page.serve())
        serving.enter_context(kit.verify.serve())
        config = _config(kit, step, fallback=fallback_missing is None)

        last_seen: list[tuple[object, ...]] = [()]

        def on_poll(result: PollResult) -> None:
            seen = result.report.global_status if result.report is not None else "unreadable"
            state = runtime.flag.state
            impaired = kit.impaired(result.report) if result.report is not None else ""
            shown = (seen, impaired, state.enforce, state.stale, result.error)
            if shown == last_seen[0]:
                return  # print what changes, not every poll
            last_seen[0] = shown
            note = f" ({result.error})" if result.error else ""
            note += f" {impaired}" if impaired else ""
            printer.line(
                f"    poll: {kit.label}={seen:<14} enforce={state.enforce!s:<5} "
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

        with _startup_warnings(kit.startup_warnings) as warnings:
            runtime = FailOpen(config, on_poll=on_poll)
        runtime.flag.add_listener(on_transition)
        audit = _AuditPrinter(printer)
        for line in kit.header(config, runtime):
            printer.line(line)
        for warning in warnings:
            printer.line(f"  start-up warning: {warning}")
        world = World(kit.page, kit.verify, runtime, printer, step,
                      lambda: _attempts(runtime, kit, printer), fallback_missing)
        scenes = kit.scenes()
        ok = True
        runtime.start()
        try:
            for number, scene in enumerate(scenes, start=1):
                printer.line(f"\n[{number}/{len(scenes)}] {scene.title}")
                if scene.note:
                    printer.line(f"    {scene.note}")
                scene.setup(world)
                if scene.play is not None:
                    scene.play(world, scene.enforce)
                else:
                    time.sleep(step)
                    settle(runtime, scene.enforce, grace=2 * step)
                    world.attempts()
                if runtime.flag.state.enforce != scene.enforce:
                    ok = False
                    printer.line(f"  !! expected enforce={scene.enforce}")
                elif kit.states_expectation:
                    printer.line(f"  == enforce={scene.enforce}, as this scene expects")
            printer.line(
                f"\nops: `failopen override on --ttl 30m` forces enforcement whatever "
                f"{kit.evidence} says; `failopen override auto` hands back to the watcher."
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
