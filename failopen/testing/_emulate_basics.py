"""What every ``failopen emulate`` verb shares, serving a fake or talking to a running one: the
exit code of a usage error, the default ports, and how a usage error is printed."""

from __future__ import annotations

import argparse
import sys

from failopen._internal.terminal import printable

__all__ = ["DEFAULT_PORTS", "EXIT_USAGE", "serving_port", "usage_error"]

EXIT_USAGE = 2  # as for every other usage error of the failopen command
DEFAULT_PORTS = {"status": 8401, "verify": 8402, "vendor": 8404}


def usage_error(command: str, message: str) -> int:
    """Print a usage error of ``failopen emulate COMMAND`` on stderr; the exit code to return."""
    # The message may quote a running fake's answer (``--set``, ``--show``): shown as text.
    print(printable(f"failopen emulate {command}: {message}"), file=sys.stderr)
    return EXIT_USAGE


def serving_port(args: argparse.Namespace, fake: str) -> int:
    """The port a fake serves on, or is reached on: ``--port``, else the fake's default."""
    return int(args.port) if args.port is not None else DEFAULT_PORTS[fake]
