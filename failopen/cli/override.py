"""``failopen override``: force enforcement off or on, back to automatic, or show what is in force,
in the store every server process reads (a ``file://`` or ``redis://`` store; never ``memory:``).

``off``, ``on`` and ``auto`` then wait (``--wait``, 5s by default, ``0`` not at all) for the live
processes of this deployment to apply the change, and say "reached N of M processes"
(:mod:`failopen.engine.override_reach`); a file store keeps no heartbeats, so there the reach is
said to be unmeasured rather than guessed.

Exit codes: 0 done (or shown); 2 bad arguments or settings, an unusable store or override,
nothing changed; 3 stored, but no live process applied it within the wait (or none was seen,
or the store could not be read again to count them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from failopen._internal import durations
from failopen._internal.terminal import printable
from failopen.cli.config import STORE_FIELDS, command_config
from failopen.engine.flag import EnforcementFlag, Override, check_stored_override
from failopen.engine.fleet_identity import Watched
from failopen.engine.override_reach import DEFAULT_WAIT, Reach, measure_reach
from failopen.exceptions import ConfigError, StoreError, StoreUnavailable
from failopen.stores import OverrideStore, open_store
from failopen.web import describe_override

__all__ = ["parse_duration", "register_override"]

#: 3: the override is stored but reached no live process: it must not read as success.
EXIT_OK, EXIT_UNKNOWN, EXIT_NOT_REACHED = 0, 2, 3

#: argparse type of ``--ttl``: ``90``, ``90s``, ``30m``, ``2h``, ``1d`` -> seconds above 0.
parse_duration = durations.duration_arg


def _override_store(args: argparse.Namespace) -> tuple[OverrideStore, str | None]:
    """The store, and the hash of the status page this deployment watches (None: not set)."""
    config = command_config(args, uses=STORE_FIELDS, store=args.store)
    url = config.store
    if url.startswith("memory:"):
        raise ConfigError(
            "FAILOPEN_STORE: the memory: store lives inside each server process, so a command "
            "cannot reach it; configure a shared store (redis://host:port/db or file:///path) in "
            "the app and pass it here with --store or FAILOPEN_STORE"
        )
    store = open_store(url, prefix=config.redis_prefix, password=config.store_password)
    return store, Watched.of(config.status_url, config.global_component, None).page


def _stored_override(store: OverrideStore) -> Override | None:
    """What the store says, as servers would apply it now; StoreError when it cannot be used.

    Not through ``EnforcementFlag(store=...)``: that logs an unusable store and carries on with
    no override, as a server must, which here would print "no override" over a refused or corrupt
    file that the servers are ignoring; and applying it logs a transition (a WARNING for a
    force-off) that ``show``, which changes nothing, must not.
    """
    return check_stored_override(store.load(), time.time())


def _cmd_override(args: argparse.Namespace) -> int:
    ignored = [name for name, value, verbs in (("--ttl", args.ttl, ("show", "auto")),
                                               ("--reason", args.reason, ("show",)),
                                               ("--wait", args.wait, ("show",)))
               if value is not None and args.verb in verbs]
    if ignored:
        # Silently dropping an operator's --ttl would leave them believing it applies.
        print(f"failopen override {args.verb}: {' and '.join(ignored)} do not apply here",
              file=sys.stderr)
        return EXIT_UNKNOWN
    store, page = _override_store(args)
    try:
        if args.verb != "show":
            _check_reachable(store)
        return _apply(args, store, page)
    except StoreUnavailable as exc:
        # Not "the override is unusable": nothing was read, so nothing is known about it.
        done = "nothing read" if args.verb == "show" else "nothing changed"
        print(f"failopen override {args.verb}: {done}: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN


def _check_reachable(store: OverrideStore) -> None:
    """StoreUnavailable when the store cannot be reached or refuses us (a wrong password), said
    once and first; garbage in it is no obstacle (the new override replaces it)."""
    try:
        store.load()
    except StoreUnavailable:
        raise
    except StoreError:
        pass


def _apply(args: argparse.Namespace, store: OverrideStore, page: str | None) -> int:
    reach: Reach | None = None
    if args.verb == "show":
        try:
            override = _stored_override(store)
        except StoreUnavailable:
            raise
        except StoreError as exc:
            # The error may quote what is stored: shown as text.
            print(printable(
                f"failopen override show: the override in {store.describe()} is unusable: "
                f"{exc}. Servers ignore it and keep the override they last knew (none if they "
                "started since); place a new one with failopen override off|on|auto."),
                file=sys.stderr)
            return EXIT_UNKNOWN
    else:
        flag = EnforcementFlag(store=store)
        reason = args.reason or f"failopen override {args.verb} from the command line"
        try:
            if args.verb == "off":
                flag.force_off(reason, ttl=args.ttl, set_by="cli")
            elif args.verb == "on":
                flag.force_on(reason, ttl=args.ttl, set_by="cli")
            else:
                flag.automatic(reason)
        except ValueError as exc:  # a --ttl beyond the limits; the message names them
            print(f"failopen override {args.verb}: --ttl: {exc}", file=sys.stderr)
            return EXIT_UNKNOWN
        override = flag.override
        try:
            reach = measure_reach(store, override, page=page,
                                  wait=DEFAULT_WAIT if args.wait is None else args.wait)
        except StoreError as exc:
            # Stored, but nobody is known to have applied it: not a success to read as one.
            reach = Reach("unknown", note=f"the store could not be read after writing: {exc}")
    shown = describe_override(override)
    if reach is not None:
        shown.update(reach.to_json())  # added beside "override", never renaming it
    if args.json:
        sys.stdout.write(json.dumps(shown, sort_keys=True) + "\n")
    elif shown["override"] is None:
        print("no override: the status page decides")
    else:
        o = shown["override"]
        # The reason and who placed it come from the store: shown as text, never obeyed.
        print(printable(f"override: enforce={o['enforce']} until={o['expires_at'] or 'lifted'} "
                        f"by={o['set_by'] or 'unknown'} reason={o['reason']}"))
    if reach is None:
        return EXIT_OK
    if not args.json:
        print(reach.line())
    warning = reach.warning()
    if warning:
        print(f"failopen override {args.verb}: warning: {warning}", file=sys.stderr)
    return EXIT_NOT_REACHED if reach.unconfirmed else EXIT_OK


def register_override(verbs: Any) -> None:
    """Add ``failopen override`` to the command's verbs."""
    override = verbs.add_parser("override", help="force enforcement off or on, or back to auto")
    override.add_argument("verb", choices=["off", "on", "auto", "show"])
    override.add_argument("--ttl", type=parse_duration,
                          help="lapse after this long: 90s, 30m, 2h, 1d (off: default 1h, at "
                               "most 7d; on: at most 30d, default until lifted)")
    override.add_argument("--reason", help="why (recorded and logged)")
    override.add_argument("--wait", type=durations.duration_or_zero_arg,
                          help="wait this long for the live processes to apply it and say how "
                               "many did: 5s (default), 30s, 0 (do not wait)")
    override.add_argument("--store", help="store URL (default: FAILOPEN_STORE)")
    override.add_argument("--json", action="store_true")
    override.set_defaults(func=_cmd_override)
