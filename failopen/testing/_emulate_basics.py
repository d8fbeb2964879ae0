"""What every ``failopen emulate`` verb shares, serving a fake or talking to a running one: the
exit code of a usage error, the default ports, how a usage error is printed, and how a fake is
served until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from failopen._internal.terminal import printable

if TYPE_CHECKING:
    from failopen.testing._server import LoopbackServer

__all__ = ["DEFAULT_PORTS", "EXIT_USAGE", "serve_until_signalled", "serving_port", "usage_error"]

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


def serve_until_signalled(
    command: str, port: int, serve: Callable[[], LoopbackServer], banner: Callable[[str], str]
) -> int:
    """Start ``serve()``, print ``banner(url)``, serve until SIGINT or SIGTERM, then stop.

    A port that cannot be bound is a one-line message and exit 2, not a traceback. The previous
    signal handlers are restored afterwards, so main() called in-process leaves Ctrl-C working.
    """
    done = threading.Event()
    previous = {s: signal.signal(s, lambda *_: done.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            server = serve()
        except OSError as exc:
            return usage_error(command, f"cannot listen on port {port}: {exc.strerror or exc}")
        with server:
            print(banner(server.url), flush=True)
            done.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0
