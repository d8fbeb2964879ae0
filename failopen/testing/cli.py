"""``failopen emulate status|verify``: serve a fake on loopback for a development server to use."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

__all__ = ["register_emulate_fakes"]


def _serve_until_interrupted(server: Any, lines: list[str]) -> int:
    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())
    with server:
        for line in lines:
            print(line.format(url=server.url), flush=True)
        done.wait()
    return 0


def _status(args: argparse.Namespace) -> int:
    from failopen.testing.status_page import FakeStatusPage

    page = FakeStatusPage(regions=tuple(args.regions.split(",")))
    page.set_global(args.global_status)
    for item in args.region or []:
        name, _, status = item.partition("=")
        page.set_region(name, status)
    if args.fault:
        page.set_fault(args.fault)
    return _serve_until_interrupted(page.serve(args.port), [
        "fake status page: {url}",
        f"  global component: {args.global_status}",
        "  FAILOPEN_STATUS_URL={url}",
    ])


def _verify(args: argparse.Namespace) -> int:
    from failopen.testing.verify_api import FakeVerifyAPI

    api = FakeVerifyAPI(private_key=args.private_key)
    if args.fault:
        api.set_fault(args.fault)
    return _serve_until_interrupted(api.serve(args.port), [
        "fake verify API: {url}" + api.path,
        "  FAILOPEN_VERIFY_URL={url}" + api.path,
        f"  FAILOPEN_PRIVATE_KEY={args.private_key}",
        f"  tokens: {api.GOOD} (valid), {api.BAD} (unsolved), {api.DENIED} (denied)",
    ])


def register_emulate_fakes(emulators: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``status`` and ``verify`` under ``failopen emulate``."""
    from failopen.testing.status_page import FakeStatusPage
    from failopen.testing.verify_api import FakeVerifyAPI

    status = emulators.add_parser("status", help="a fake status page (interface B)")
    status.add_argument("--port", type=int, default=8401)
    status.add_argument("--regions", default="us-east-1,eu-west-1",
                        help="comma-separated region labels")
    status.add_argument("--global", dest="global_status", default="operational",
                        help="status of the global component")
    status.add_argument("--region", action="append", metavar="NAME=STATUS",
                        help="status of one region (repeatable)")
    status.add_argument("--fault", choices=sorted(FakeStatusPage.FAULTS))
    status.set_defaults(func=_status)

    verify = emulators.add_parser("verify", help="a fake verify endpoint")
    verify.add_argument("--port", type=int, default=8402)
    verify.add_argument("--private-key", default="test-private-key")
    verify.add_argument("--fault", choices=sorted(FakeVerifyAPI.FAULTS))
    verify.set_defaults(func=_verify)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: failopen emulate status|verify")
