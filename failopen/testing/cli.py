"""``failopen emulate status|verify|rai``: serve a fake on loopback for a development server."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType
from typing import Any

__all__ = ["register_emulate_fakes", "register_emulate_rai"]


def _serve_until_interrupted(server: Any, lines: list[str]) -> int:
    done = threading.Event()
    # Restored afterwards, so main() called in-process leaves Ctrl-C working.
    previous = {s: signal.signal(s, lambda *_: done.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with server:
            for line in lines:
                print(line.format(url=server.url), flush=True)
            done.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
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


def _sessions_range(text: str) -> int | tuple[int, int]:
    low, _, high = text.partition("-")
    if not low.isdigit() or (high and not high.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not N or LOW-HIGH")
    return (int(low), int(high)) if high else int(low)


def _serve_rai(args: argparse.Namespace) -> int:
    from failopen.rai.cli import ENV_BASE_URL, ENV_CLIENT_ID, ENV_CLIENT_SECRET, EXIT_USAGE
    from failopen.testing.rai_emulator import RaiEmulator

    emulator = RaiEmulator(
        client_id=args.client_id, client_secret=args.client_secret,
        public_keys=args.public_keys or ("pk_live_test",), cohorts=args.cohorts,
        sessions_per_cohort=args.sessions_per_cohort, seed=args.seed, token_ttl=args.token_ttl,
        fail_every=args.fail_every, latency=args.latency, slow_pages=args.slow_pages,
        unknown_fields=args.unknown_fields,
    )  # fmt: skip
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        server = emulator.serve(port=args.port)
    except OSError as exc:
        signal.signal(signal.SIGTERM, previous)
        print(f"failopen emulate rai: cannot listen on port {args.port}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    start, end = emulator.data_window
    print(
        f"Session-intelligence API emulator on {server.url} (Ctrl-C to stop)\n"
        f"export {ENV_BASE_URL}={server.url}\n"
        f"export {ENV_CLIENT_ID}={emulator.client_id}\n"
        f"export {ENV_CLIENT_SECRET}={emulator.client_secret}  # test credentials\n"
        f"# {emulator.total_sessions} sessions in {emulator.cohort_count} cohorts, "
        f"public keys {', '.join(emulator.public_keys)}, data from {start} to {end}\n"
        f"# failopen rai sessions --from {start} --to {end} "
        f"--public-key {emulator.public_keys[0]} --out sessions.jsonl",
        flush=True,
    )
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
    return 0


def register_emulate_rai(emulate_subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``failopen emulate rai``: serve the API emulator on 127.0.0.1 until interrupted."""
    emulate = emulate_subparsers.add_parser(
        "rai", help="the session-intelligence API (interface A) emulator",
        description="Serve the session-intelligence API emulator on 127.0.0.1 until Ctrl-C.",
    )  # fmt: skip
    emulate.add_argument("--port", type=int, default=8403,
                         help="0 picks a free port (default 8403)")  # fmt: skip
    emulate.add_argument("--seed", type=int, default=0, help="same seed, same data")
    emulate.add_argument("--cohorts", type=int, default=12, help="number of cohorts")
    emulate.add_argument("--sessions-per-cohort", type=_sessions_range, default=(20, 80),
                         metavar="N|LOW-HIGH", help="sessions in each cohort (default 20-80)")
    emulate.add_argument("--public-key", dest="public_keys", action="append", metavar="KEY",
                         help="a key the test client owns; repeat (default pk_live_test)")
    emulate.add_argument("--client-id", default="test-client")
    emulate.add_argument("--client-secret", default="test-secret",
                         help="the emulator's test secret (never a real one)")  # fmt: skip
    emulate.add_argument("--token-ttl", type=int, default=3600, help="token lifetime, seconds")
    emulate.add_argument("--latency", type=float, default=0.0,
                         help="seconds of simulated network latency per request")  # fmt: skip
    emulate.add_argument("--fail-every", type=int, metavar="N",
                         help="every Nth data request answers 500 internal")  # fmt: skip
    emulate.add_argument("--slow-pages", type=float, default=0.0, metavar="SECONDS",
                         help="each list page stalls this long mid-body")  # fmt: skip
    emulate.add_argument("--unknown-fields", action="store_true",
                         help="add fields the spec does not list (tolerance tests)")
    emulate.set_defaults(func=_serve_rai)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: failopen emulate status|verify|rai")
