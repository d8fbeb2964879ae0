"""``failopen demo``'s arguments: the terminal story (``--step``) or the page (``--web``,
``--port``), either with ``--vendor``. A flag that goes with the other one is refused, never
silently ignored.

The demo's modules load only when the verb runs: ``failopen --help`` stays quick.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from failopen.cli.config import positive_float
from failopen.providers.registry import DEFAULT_VENDOR, PROVIDERS

__all__ = ["register_demo"]

EXIT_UNKNOWN = 2


def register_demo(verbs: Any) -> None:
    """Add ``failopen demo`` to the command's verbs."""
    demo = verbs.add_parser("demo", help="play an outage against the embedded fakes")
    demo.add_argument("--step", type=positive_float, default=None,
                      help="time per scene of the terminal story (default 0.6s)")
    demo.add_argument("--vendor", choices=list(PROVIDERS), default=None,
                      help=f"whose fakes play the vendor, in the terminal story or the page "
                           f"(default {DEFAULT_VENDOR}, the spec's vendor)")
    demo.add_argument("--web", action="store_true",
                      help="serve the demo as a page on 127.0.0.1 until Ctrl-C")
    demo.add_argument("--port", type=int, default=None,
                      help="with --web: the port (default 8400; 0 picks a free one)")
    demo.set_defaults(func=_cmd_demo)


def _refuse(message: str) -> int:
    print(f"failopen demo: {message}", file=sys.stderr)
    return EXIT_UNKNOWN


def _cmd_demo(args: argparse.Namespace) -> int:
    vendor = DEFAULT_VENDOR if args.vendor is None else args.vendor
    if args.web:
        # The page runs at the visitor's pace: a flag silently ignored would mislead.
        if args.step is not None:
            return _refuse("--step goes with the terminal story, not with --web")
        from failopen.cli.demo_web import DEFAULT_PORT, run_web_demo

        return run_web_demo(port=DEFAULT_PORT if args.port is None else args.port,
                            vendor=vendor)
    if args.port is not None:
        return _refuse("--port goes with --web")
    from failopen.cli.demo import run_demo

    return run_demo(step=0.6 if args.step is None else args.step, vendor=vendor)
