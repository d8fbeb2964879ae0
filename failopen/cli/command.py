"""The ``failopen`` command: check the status page, watch it, override the flag, run the demo.

Every verb reads the same ``FAILOPEN_*`` variables as the library; flags win over them. A verb
checks the settings it uses: a bad setting it does not use is named in a warning on stderr and
left out (an operator must be able to read the status page or override during an outage,
whatever else is misconfigured). Errors name what the user typed: ``--status-url`` for the
flag, ``FAILOPEN_STATUS_URL`` for the variable.
Exit codes: 0 success (``status``: no outage — operational, or a known status that is not in
FAILOPEN_BYPASS_ON), 1 ``status``: outage (would bypass), ``check``: a problem found, 2 bad
arguments, an unknown or unreadable status, a store error, or an unexpected error (never 1:
scripts read 1 as "outage" or "problem").
Bare ``failopen`` prints the help to stdout and exits 0; each verb's ``--help`` lists its own
exit codes and an example (failopen/cli/help.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from failopen._internal.terminal import printable
from failopen._variables import unknown_variables
from failopen.cli.config import (
    STATUS_FIELDS,
    command_config,
    poll_count,
    positive_float,
    watch_config,
)
from failopen.cli.override import parse_duration
from failopen.cli.terminal_log import log_to_terminal
from failopen.config import Config
from failopen.engine.flag import FlagState, rfc3339
from failopen.exceptions import ConfigError, FailopenError, StatusError
from failopen.providers.registry import DEFAULT_VENDOR

if TYPE_CHECKING:
    from failopen.cli.check import ExtraCheck
    from failopen.providers.status import StatusClient

__all__ = ["main", "build_parser", "parse_duration"]

EXIT_OK, EXIT_OUTAGE, EXIT_UNKNOWN = 0, 1, 2

#: Builds the Config from keyword overrides; adapters pass their own (Django: its settings).
ConfigFactory = Callable[..., Config]


def _emit(out: TextIO, data: dict[str, Any]) -> None:
    out.write(json.dumps(data, sort_keys=True) + "\n")
    out.flush()


# --- failopen status ----------------------------------------------------------------------------

# More components than this (Cloudflare lists hundreds of data centres): only those not
# operational are listed one by one.
_ALL_REGIONS_SHOWN = 40


def _watched_line(config: Config) -> str | None:
    """``watching Turnstile: <page>, component <id>`` for another vendor than the spec's (whose
    output stays as it always was), else None."""
    if config.vendor == DEFAULT_VENDOR or config.status_url is None:
        return None
    component = config.global_component or "the page's global component"
    return printable(f"watching {config.provider.title}: {config.status_url}, component "
                     f"{component}")



def _cmd_status(args: argparse.Namespace) -> int:
    from failopen.providers.status import StatusClient

    config = command_config(
        args, uses=STATUS_FIELDS, status_url=args.status_url,
        global_component=args.global_component,
        indicator_fallback=True if args.indicator_fallback else None,
    )
    if config.status_url is None:
        raise ConfigError("FAILOPEN_STATUS_URL: give --status-url or set FAILOPEN_STATUS_URL")
    with StatusClient(
        config.status_url, global_component=config.global_component,
        timeout=config.status_timeout, max_bytes=config.status_max_bytes,
        indicator_fallback=config.indicator_fallback,
    ) as client:
        watched = _watched_line(config)
        if watched is not None and not args.json:
            print(watched)
        if args.components:
            return _print_components(args, client)
        try:
            report = client.fetch()
        except StatusError as exc:
            if args.json:
                # The same keys as a good reading, so a consumer never branches on the shape.
                _emit(sys.stdout, {
                    "global_status": None, "known": False, "source": None,
                    "fetched_at": None, "page_updated_at": None, "global_component": None,
                    "regions": [], "impaired_regions": [], "odd": [], "chosen_by": None,
                    "would_bypass": False, "error": f"{type(exc).__name__}: {exc}",
                    "vendor": config.vendor,
                })
            else:
                print(printable(f"status page unusable: {type(exc).__name__}: {exc}"),
                      file=sys.stderr)
            return EXIT_UNKNOWN
    would_bypass = report.global_status in config.bypass_on
    if args.json:
        _emit(sys.stdout, {**report.to_dict(), "would_bypass": would_bypass, "error": None,
                           "vendor": config.vendor})
    else:
        # Everything but the labels comes from the status page: shown as text, never obeyed.
        print(printable(f"global: {report.global_status}")
              + ("  (would bypass)" if would_bypass else ""))
        regions = report.regions
        if len(regions) > _ALL_REGIONS_SHOWN:  # Cloudflare's hundreds of data centres
            impaired = [r for r in regions if r.status != "operational"]
            print(printable(f"  {len(regions) - len(impaired)} of {len(regions)} other "
                            "components operational; the rest:"))
            regions = tuple(impaired)
        for region in regions:
            print(printable(f"  {region.description or region.name}: {region.status}"))
        for line in report.odd:
            print(printable(f"  odd (the reading still counts): {line}"))
    if would_bypass:
        return EXIT_OUTAGE
    return EXIT_OK if report.known else EXIT_UNKNOWN


def _cell(value: object, width: int) -> str:
    text = "-" if value is None or value == "" else str(value)
    # A newline or an escape sequence in a name must not break the table: shown escaped.
    text = printable(text).replace("\t", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def _print_components(args: argparse.Namespace, client: StatusClient) -> int:
    """``failopen status --components``: every component, to find the global one's id."""
    try:
        listing = client.fetch_components()
    except StatusError as exc:
        if args.json:
            _emit(sys.stdout, {"components": [], "global_component": None, "chosen_by": None,
                               "odd": [], "error": f"{type(exc).__name__}: {exc}"})
        else:
            print(printable(f"status page unusable: {type(exc).__name__}: {exc}"),
                  file=sys.stderr)
        return EXIT_UNKNOWN
    if args.json:
        _emit(sys.stdout, listing.to_dict())
    else:
        # Ids and names are never cut: the reader copies one into FAILOPEN_GLOBAL_COMPONENT.
        id_width = max([2, *(len(_cell(c.id, 10**6)) for c in listing.components)])
        name_width = max([4, *(len(_cell(c.name, 10**6)) for c in listing.components)])
        columns = (("id", id_width), ("name", name_width), ("description", 40), ("status", 22),
                   ("group", id_width + 3))
        print("  ".join(name.ljust(width) for name, width in columns).rstrip())
        for c in listing.components:
            group = "group" if c.group else (f"in {c.group_id}" if c.group_id else "")
            cells = (c.id, c.name, c.description, c.status or None, group)
            print("  ".join(_cell(v, w).ljust(w)
                            for v, (_, w) in zip(cells, columns, strict=True)).rstrip())
        for line in listing.odd:
            print(printable(f"odd: {line}"))
        if listing.global_id is not None:
            chosen = next(c for c in listing.components if c.id == listing.global_id)
            print(printable(f"global component: {chosen.id} ({chosen.name}), "
                            f"chosen by {listing.chosen_by}"))
        else:
            print(printable(f"global component: cannot tell: {listing.error}"))
    # Never 1 (scripts read it as "outage"): 2 when failopen could not use this page.
    return EXIT_OK if listing.global_id is not None else EXIT_UNKNOWN


# --- failopen watch -----------------------------------------------------------------------------


def _cmd_watch(args: argparse.Namespace) -> int:
    from failopen.engine.watcher import PollResult
    from failopen.runtime import FailOpen

    # With --json, what an outage would do to each protected route: read once, on every line.
    config, outage = watch_config(args, outage=args.json, status_url=args.status_url,
                                  poll_interval=args.interval, store=args.store)
    if config.status_url is None:
        raise ConfigError("FAILOPEN_STATUS_URL: give --status-url or set FAILOPEN_STATUS_URL")
    done = threading.Event()
    polls = 0

    def on_poll(result: PollResult) -> None:
        nonlocal polls
        if args.count and polls >= args.count:
            return  # a poll that began before stop() took effect: --count is exact
        polls += 1
        state = runtime.flag.state
        if args.json:
            _emit(sys.stdout, {
                "enforce": state.enforce, "global_status": (
                    result.report.global_status if result.report is not None else None
                ),
                "source": state.source, "reason": state.reason, "stale": state.stale,
                "error": result.error, "reading": result.reading,
                "at": rfc3339(time.time()),
                # Fleet mode: does this process poll for the fleet, and is it following Redis
                # ("redis") or fallen back to its own polling ("local")?
                **({} if runtime.fleet is None else {
                    "leader": runtime.fleet.leader, "store": runtime.fleet.store_state}),
                # FAILOPEN_EVIDENCE=status,probe: the verify probe's state (else null).
                "probe": None if runtime.probe is None else runtime.probe.describe(),
                **runtime.watcher.watching,  # the vendor, and the component that decides
                **outage,
            })
        else:
            seen = result.report.global_status if result.report is not None else "unreadable"
            print(printable(
                f"{rfc3339(time.time())} global={seen} "
                f"enforce={state.enforce} source={state.source} reason={state.reason}"
                + (f" error={result.error}" if result.error else "")), flush=True)
        if args.count and polls >= args.count:
            done.set()

    runtime = FailOpen(config, on_poll=on_poll)

    def on_transition(old: FlagState, new: FlagState) -> None:
        # Only real transitions (the value changed): a new reason, source or poll error under
        # the same value is in the next poll line.
        if not args.json and old.enforce != new.enforce:
            print(printable(f"transition: enforce {old.enforce} -> {new.enforce} "
                            f"({new.source}: {new.reason})"), flush=True)

    runtime.flag.add_listener(on_transition)
    watched = _watched_line(config)
    if watched is not None and not args.json:
        print(watched, flush=True)
    # Restored afterwards, so main() called in-process (tests, embedding) leaves Ctrl-C working.
    previous = {s: signal.signal(s, lambda *_: done.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    runtime.start()
    try:
        done.wait()
    finally:
        runtime.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return EXIT_OK


# --- the parser ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The full ``failopen`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="failopen",
        description="Fail open on a confirmed bot-protection outage, and only then.",
        epilog="Exit codes: 0 success; 1 status: an outage (would bypass), check: a problem,\n"
               "demo: a scene misbehaved; 2 bad arguments or settings, an unreadable status, a\n"
               "store error; 130 interrupted. failopen rai has more (failopen rai --help);\n"
               "each verb's --help lists its own.\n\n"
               "Example:\n  failopen status --status-url https://status.vendor.example\n"
               "  failopen watch -v",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")
    from failopen import __version__

    parser.add_argument("--version", action="version", version=f"failopen {__version__}")
    # Not required: bare ``failopen`` prints this help and exits 0 (see main).
    verbs = parser.add_subparsers(dest="command", metavar="COMMAND")

    status = verbs.add_parser("status", help="check the status page once")
    status.add_argument("--status-url", help="default: FAILOPEN_STATUS_URL")
    status.add_argument("--global-component",
                        help="id or exact name of the global component "
                             "(default: FAILOPEN_GLOBAL_COMPONENT)")
    status.add_argument("--components", action="store_true",
                        help="list every component (id, name, description, status, group) "
                             "and which one failopen takes as global")
    status.add_argument("--indicator-fallback", action="store_true",
                        help="fall back to /api/v2/status.json when components fail")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(func=_cmd_status)

    watch = verbs.add_parser("watch", help="run the status watcher in the foreground")
    watch.add_argument("--status-url", help="default: FAILOPEN_STATUS_URL")
    # Named as the variable is (FAILOPEN_POLL_INTERVAL); --interval is the older spelling.
    watch.add_argument("--poll-interval", "--interval", dest="interval", type=positive_float,
                       help="time between polls: 30s, 5m, ... (default: "
                            "FAILOPEN_POLL_INTERVAL, 30s)")
    watch.add_argument("--store", help="override store URL (default: FAILOPEN_STORE)")
    watch.add_argument("--json", action="store_true",
                       help="one JSON object per poll, with the outage policies")
    watch.add_argument("--count", type=poll_count, metavar="N",
                       help="stop after N polls, N >= 1 (default: until Ctrl-C)")
    watch.set_defaults(func=_cmd_watch)

    from failopen.cli.override import register_override

    register_override(verbs)

    from failopen.cli.fleet import register_fleet

    register_fleet(verbs)

    from failopen.cli.audit import register_audit

    register_audit(verbs)

    from failopen.cli.check import register_check

    register_check(verbs)

    from failopen.cli.demo_command import register_demo

    register_demo(verbs)

    emulate = verbs.add_parser("emulate", help="serve a test-kit fake on loopback")
    emulators = emulate.add_subparsers(dest="emulator", metavar="FAKE", required=True)
    _register_optional(verbs, emulators)
    from failopen.cli.help import finish

    finish(parser)
    return parser


def _register_optional(verbs: Any, emulators: Any) -> None:
    from failopen.testing.cli import register_emulate_fakes

    register_emulate_fakes(emulators)
    try:
        from failopen.rai.cli import register_rai
        from failopen.testing.cli import register_emulate_rai
    except ImportError:  # pragma: no cover - the interface A client ships with the package
        return
    register_rai(verbs)
    register_emulate_rai(emulators)


def main(argv: Sequence[str] | None = None, *, config_factory: ConfigFactory | None = None,
         extra_checks: Sequence[ExtraCheck] = (),
         as_written: Callable[[str], str] | None = None) -> int:
    """Entry point of the ``failopen`` command.

    ``config_factory(**overrides)`` replaces ``Config.from_env`` (the Django command passes one
    that reads ``settings.FAILOPEN``); ``extra_checks`` are an adapter's own lines for
    ``failopen check`` (Django: its view of the protected views); ``as_written(text)`` names
    the settings in a configuration error or a check's line as the adapter's users write them
    (Django: ``FAILOPEN['STATUS_URL']`` for a key of its dict; the core writes variables).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        # What users expect of a bare command: the help, on stdout, and success.
        parser.print_help()
        return EXIT_OK
    args.config_factory = config_factory if config_factory is not None else Config.from_env
    args.extra_checks = tuple(extra_checks)
    args.as_written = as_written
    log_to_terminal(verbose=args.verbose)
    # Django's command: its AppConfig.ready said it already; check says it in its own line.
    if config_factory is None and args.command != "check":
        for line in unknown_variables():
            print(printable(f"failopen: warning: {line}"), file=sys.stderr)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        message = str(exc) if as_written is None else as_written(str(exc))
        print(printable(f"failopen: configuration error: {message}"), file=sys.stderr)
        return EXIT_UNKNOWN
    except FailopenError as exc:  # its text may quote a status page or a store: as text
        print(printable(f"failopen: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return EXIT_UNKNOWN
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # ``failopen audit windows --json FILE | head``: the reader has what it wanted. Python
        # would complain again while flushing stdout at exit; point it at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception:
        # Exit 1 means "outage" to scripts: a crash must never say that.
        logging.getLogger("failopen").exception("failopen: unexpected error")
        return EXIT_UNKNOWN
    return code

