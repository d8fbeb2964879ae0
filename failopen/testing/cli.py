"""``failopen emulate status|verify|vendor|rai``: serve a fake on loopback for a dev server."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from failopen._internal.durations import duration_arg, duration_or_zero_arg
from failopen.testing._control_cli import control
from failopen.testing._emulate_basics import (
    DEFAULT_PORTS,
    serve_until_signalled,
    serving_port,
    usage_error,
)

__all__ = ["register_emulate_fakes", "register_emulate_rai"]

def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return port


def _region_status(text: str) -> tuple[str, str]:
    name, sep, status = text.partition("=")
    if not sep or not name.strip() or not status.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=STATUS")
    return name.strip(), status.strip()


# --- serving ------------------------------------------------------------------------------------


DEFAULT_REGIONS = "us-east-1,eu-west-1"
DEFAULT_PRIVATE_KEY = "test-private-key"
_SPEC_VENDOR = "enforcement"  # FAILOPEN_VENDOR's default: the fakes above
CONTROL_HINT = "  change it while it runs: failopen emulate {fake} --set {example}"


def _status(args: argparse.Namespace) -> int:
    if args.set or args.show:
        return _control("status", args)
    if args.url is not None:
        return usage_error("status", "--url names a running fake for --set or --show")
    from failopen.testing.status_page import FakeStatusPage
    from failopen.testing.vendor_status_pages import SHAPES

    global_status = args.global_status if args.global_status is not None else "operational"
    if args.shape is not None:
        if args.regions is not None or args.region:
            return usage_error("status", f"--regions and --region shape the spec's page; "
                                         f"--shape {args.shape} has its vendor's components")
        page: FakeStatusPage = SHAPES[args.shape]()
    else:
        regions = args.regions if args.regions is not None else DEFAULT_REGIONS
        try:
            page = FakeStatusPage(regions=tuple(r.strip() for r in regions.split(",")))
        except ValueError as exc:
            return usage_error("status", f"--regions: {exc}")
    page.set_global(global_status)
    for name, status in args.region or []:
        if name not in page.region_ids:
            return usage_error("status", f"--region {name}: no such region; "
                                f"--regions has {', '.join(page.region_ids)}")  # fmt: skip
        page.set_region(name, status)
    if args.fault:
        page.set_fault(args.fault)
    port = serving_port(args, "status")
    return serve_until_signalled(
        "status", port, lambda: page.serve(port, control=True), lambda url: (
            f"fake status page: {url}\n"
            f"  global component: {global_status}"
            + ("" if args.shape is None else f" ({SHAPES[args.shape].DECIDES})") + "\n"
            f"  FAILOPEN_STATUS_URL={url}\n"
            + CONTROL_HINT.format(fake="status", example="global=major_outage")
            + ("" if port == DEFAULT_PORTS["status"] else f" --url {url}")
        ))  # fmt: skip


def _verify(args: argparse.Namespace) -> int:
    if args.set or args.show:
        return _control("verify", args)
    if args.url is not None:
        return usage_error("verify", "--url names a running fake for --set or --show")
    if args.vendor != _SPEC_VENDOR:
        return _captcha_verify(args)
    from failopen.testing.verify_api import FakeVerifyAPI

    if args.fault is not None and args.fault not in FakeVerifyAPI.FAULTS:
        return usage_error("verify", f"--fault {args.fault}: a fault of --vendor turnstile only")

    key = args.private_key if args.private_key is not None else DEFAULT_PRIVATE_KEY
    # No session lifetime: the built-in tokens began when the emulator started, perhaps long
    # before someone first tries them by hand.
    api = FakeVerifyAPI(private_key=key, session_lifetime=None)
    if args.fault:
        api.set_fault(args.fault)
    port = serving_port(args, "verify")
    return serve_until_signalled(
        "verify", port, lambda: api.serve(port, control=True), lambda url: (
            f"fake verify API: {url}{api.path}\n"
            f"  FAILOPEN_VERIFY_URL={url}{api.path}\n"
            f"  FAILOPEN_PRIVATE_KEY={key}\n"
            f"  tokens: each solve of `failopen emulate vendor` with this key, and {api.GOOD}, "
            f"once each like a real solve; {api.BAD} (unsolved), {api.DENIED} (denied)\n"
            + CONTROL_HINT.format(fake="verify", example="fault=503")
            + ("" if port == DEFAULT_PORTS["verify"] else f" --url {url}")
        ))  # fmt: skip


def _captcha_verify(args: argparse.Namespace) -> int:
    """``emulate verify --vendor NAME``: that vendor's verify API, as its docs describe it."""
    from failopen.testing.providers import fake_verify_api

    api = fake_verify_api(args.vendor, private_key=args.private_key)
    if args.fault:
        if args.fault not in api.FAULTS:
            return usage_error("verify", f"--fault {args.fault}: not a fault of the "
                                         f"{args.vendor} fake ({', '.join(sorted(api.FAULTS))})")
        api.set_fault(args.fault)
    port = serving_port(args, "verify")
    name = args.vendor
    return serve_until_signalled(
        "verify", port, lambda: api.serve(port, control=True), lambda url: (
            f"fake {name} verify API: {url}{api.path}\n"
            f"  FAILOPEN_VENDOR={name}\n"
            f"  FAILOPEN_VERIFY_URL={url}{api.path}\n"
            f"  FAILOPEN_PRIVATE_KEY={api.private_key}\n"
            f"  FAILOPEN_PUBLIC_KEY={api.public_key}\n"
            f"  tokens: `failopen emulate token --vendor {name} --private-key "
            f"{api.private_key}`, once each like a real solve; {api.GOOD} once; {api.BAD} never\n"
            + CONTROL_HINT.format(fake="verify", example="fault=503")
            + ("" if port == DEFAULT_PORTS["verify"] else f" --url {url}")
        ))  # fmt: skip


def _vendor_mode(text: str) -> str:
    from failopen.testing._vendor_modes import SCRIPT_KINDS, WIDGET_KINDS, parse_mode

    # Any script's mode here; the one --vendor names refuses what it cannot play when it runs.
    try:
        parse_mode(text, SCRIPT_KINDS | WIDGET_KINDS)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _vendor(args: argparse.Namespace) -> int:
    if args.set or args.show:
        return _control("vendor", args)
    if args.url is not None:
        return usage_error("vendor", "--url names a running fake for --set or --show")
    if args.vendor != _SPEC_VENDOR:
        from failopen.testing._emulate_script import serve_browser_script

        return serve_browser_script(args)
    from failopen.testing.vendor_script import FakeVendorScript

    # No verify API in this process: each solve's token is signed with the private key, so
    # ``failopen emulate verify`` (same key) accepts every fresh solve once, as the vendor would.
    mode = args.mode if args.mode is not None else "ok"
    key = args.private_key if args.private_key is not None else DEFAULT_PRIVATE_KEY
    vendor = FakeVendorScript(signing_key=key)
    vendor.set_mode(mode)
    port = serving_port(args, "vendor")
    return serve_until_signalled(
        "vendor", port, lambda: vendor.serve(port, control=True), lambda url: (
            f"fake vendor script: {url}/v2/<public key>/api.js\n"
            f"  mode: {mode}\n"
            f"  FAILOPEN_VENDOR_URL={url}\n"
            + CONTROL_HINT.format(fake="vendor", example="down=true")
            + ("" if port == DEFAULT_PORTS["vendor"] else f" --url {url}")
        ))  # fmt: skip


# --- controlling a running fake -----------------------------------------------------------------


def _control(fake: str, args: argparse.Namespace) -> int:
    return control(fake, args)


def _add_control_flags(parser: argparse.ArgumentParser, fake: str, example: str) -> None:
    group = parser.add_argument_group(
        "control a running fake (POST /_control on loopback; the fake is not restarted)")
    group.add_argument("--set", action="append", metavar="NAME=VALUE",
                       help=f"change the running fake, e.g. --set {example} (repeatable; "
                            "exit 2 when the value is invalid or nothing listens)")
    group.add_argument("--show", action="store_true", help="print the running fake's state")
    group.add_argument("--url", help=f"the running fake (default http://127.0.0.1:PORT, PORT "
                                     f"from --port or {DEFAULT_PORTS[fake]})")


def _token(args: argparse.Namespace) -> int:
    if args.vendor != _SPEC_VENDOR:
        return _captcha_token(args)
    if args.score is not None or args.action is not None:
        return usage_error("token", "--score and --action are for --vendor recaptcha, "
                                    "recaptcha-enterprise or turnstile (--action)")
    from failopen.testing.verify_api import signed_token

    key = args.private_key if args.private_key is not None else DEFAULT_PRIVATE_KEY
    # Signed, not registered: the running fake accepts it without being told, once, as it
    # accepts a solve of `failopen emulate vendor` with the same key.
    for _ in range(args.count):
        print(signed_token(key))
    return 0


def _captcha_token(args: argparse.Namespace) -> int:
    from failopen.testing.providers import FAKES, mint_token

    fake = FAKES[args.vendor]
    key = args.private_key if args.private_key is not None else fake.DEFAULT_PRIVATE_KEY
    try:
        tokens = [mint_token(args.vendor, key, score=args.score, action=args.action)
                  for _ in range(args.count)]
    except (TypeError, ValueError) as exc:
        return usage_error("token", str(exc))
    for token in tokens:
        print(token)
    return 0


def _score(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a score from 0.0 to 1.0, got {text!r}")
    return value


def _whole_seconds(text: str) -> int:
    return max(1, round(duration_arg(text)))


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 1000, got {text!r}")
    return value


def register_emulate_fakes(emulators: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``status``, ``verify`` and ``vendor`` under ``failopen emulate``."""
    from failopen.testing.status_page import FakeStatusPage
    from failopen.testing.vendor_status_pages import SHAPES
    from failopen.testing.verify_api import FakeVerifyAPI

    status = emulators.add_parser("status", help="a fake status page (interface B)")
    status.add_argument("--port", type=_port,
                        help="0 picks a free port (default 8401)")
    status.add_argument("--regions", help=f"comma-separated region labels (default "
                                          f"{DEFAULT_REGIONS})")
    status.add_argument("--global", dest="global_status",
                        help="status of the global component (default operational)")
    status.add_argument("--region", action="append", type=_region_status, metavar="NAME=STATUS",
                        help="status of one region (repeatable)")
    status.add_argument("--fault", choices=sorted(FakeStatusPage.FAULTS))
    status.add_argument("--shape", choices=sorted(SHAPES),
                        help="serve a page shaped like Cloudflare's (Turnstile among ~330 PoPs) "
                             "or hCaptcha's (Captcha API) instead of the spec's; --global sets "
                             "the component the vendor preset reads")
    _add_control_flags(status, "status", "global=major_outage, eu-west-1=degraded_performance, "
                                         "fault=500 or fault=none")
    status.set_defaults(func=_status)

    verify = emulators.add_parser("verify", help="a fake verify endpoint")
    verify.add_argument("--port", type=_port,
                        help="0 picks a free port (default 8402)")
    verify.add_argument("--private-key",
                        help="the key the fake accepts (a test value, never a real one; "
                             f"default {DEFAULT_PRIVATE_KEY})")
    # Every vendor's faults; the one a vendor lacks (Turnstile's internal_error) is refused.
    verify.add_argument("--fault", choices=sorted(FakeVerifyAPI.FAULTS | {"internal_error"}))
    _add_vendor_flag(verify)
    _add_control_flags(verify, "verify", "fault=503 or fault=none")
    verify.set_defaults(func=_verify)

    vendor = emulators.add_parser("vendor", help="the vendor's client script (api.js) for browsers")
    vendor.add_argument("--port", type=_port,
                        help="0 picks a free port (default 8404)")
    vendor.add_argument("--mode", type=_vendor_mode,
                        help="ok, http404, silent, error_then_ok:N, error, failed or slow:MS "
                             "(default ok); with --vendor expire:MS instead of failed")
    vendor.add_argument("--private-key",
                        help="sign each solve's token with this key, which `failopen emulate "
                             f"verify` must share (a test value; default {DEFAULT_PRIVATE_KEY}, "
                             "with --vendor that vendor fake's)")
    _add_vendor_flag(vendor, "whose browser script")
    _add_control_flags(vendor, "vendor", "down=true, down=false or mode=MODE")
    vendor.set_defaults(func=_vendor)

    token = emulators.add_parser(
        "token", help="print a fresh token that `failopen emulate verify` accepts once")
    token.add_argument("--private-key",
                       help="the key of the running fake verify API (a test value; default "
                            f"{DEFAULT_PRIVATE_KEY})")
    token.add_argument("--count", type=_count, default=1, help="how many tokens (default 1)")
    _add_vendor_flag(token)
    token.add_argument("--score", type=_score,
                       help="the token's score (reCAPTCHA v3 and Enterprise)")
    token.add_argument("--action", help="the action the token was minted for (reCAPTCHA v3, "
                                        "Enterprise, Turnstile)")
    token.set_defaults(func=_token)


def _add_vendor_flag(parser: argparse.ArgumentParser, whose: str = "whose verify API") -> None:
    from failopen.testing.providers import FAKES

    parser.add_argument("--vendor", choices=[_SPEC_VENDOR, *FAKES], default=_SPEC_VENDOR,
                        help=f"{whose} (default {_SPEC_VENDOR}, the spec's vendor)")


def _sessions_range(text: str) -> int | tuple[int, int]:
    low, _, high = text.partition("-")
    if not low.isdigit() or (high and not high.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not N or LOW-HIGH")
    return (int(low), int(high)) if high else int(low)


def _serve_rai(args: argparse.Namespace) -> int:
    from failopen.rai.cli import ENV_BASE_URL, ENV_CLIENT_ID, ENV_CLIENT_SECRET
    from failopen.testing._rai_control import played_time_banner, rai_control, wants_control
    from failopen.testing.rai_emulator import RaiEmulator

    if wants_control(args):
        return rai_control(args)
    try:
        emulator = RaiEmulator(
            client_id=args.client_id, client_secret=args.client_secret,
            public_keys=args.public_keys or ("pk_live_test",), cohorts=args.cohorts,
            sessions_per_cohort=args.sessions_per_cohort, seed=args.seed,
            token_ttl=args.token_ttl, fail_every=args.fail_every, latency=args.latency,
            slow_pages=args.slow_pages, unknown_fields=args.unknown_fields,
            start=args.start, span_days=args.span_days or 20.0, live=bool(args.live),
            cohort_filter=args.cohort_filter,
        )  # fmt: skip
    except ValueError as exc:
        return usage_error("rai", str(exc))
    start, end = emulator.data_window

    def banner(url: str) -> str:
        return (
            f"Session-intelligence API emulator on {url} (Ctrl-C to stop)\n"
            f"export {ENV_BASE_URL}={url}\n"
            f"export {ENV_CLIENT_ID}={emulator.client_id}\n"
            f"export {ENV_CLIENT_SECRET}={emulator.client_secret}  # test credentials\n"
            f"# {emulator.total_sessions} sessions in {emulator.cohort_count} cohorts, "
            f"public keys {', '.join(emulator.public_keys)}, data from {start} to {end}\n"
            f"# failopen rai sessions --from {start} --to {end} "
            f"--public-key {emulator.public_keys[0]} --out sessions.jsonl"
        ) + (played_time_banner(emulator, start, url) if args.live else "")

    return serve_until_signalled("rai", args.port,
                                 lambda: emulator.serve(port=args.port, control=True), banner)


def register_emulate_rai(emulate_subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``failopen emulate rai``: serve the API emulator on 127.0.0.1 until interrupted."""
    from failopen.testing._rai_control import add_played_time_flags

    emulate = emulate_subparsers.add_parser(
        "rai", help="the session-intelligence API (interface A) emulator",
        description="Serve the session-intelligence API emulator on 127.0.0.1 until Ctrl-C.",
    )  # fmt: skip
    emulate.add_argument("--port", type=_port, default=8403,
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
    emulate.add_argument("--token-ttl", type=_whole_seconds, default=3600,
                         help="token lifetime: 3600, 1h, ... (default 1h)")
    emulate.add_argument("--latency", type=duration_or_zero_arg, default=0.0,
                         help="simulated network latency per request: 0.05, 50ms, ...")
    emulate.add_argument("--fail-every", type=int, metavar="N",
                         help="every Nth data request answers 500 internal")  # fmt: skip
    emulate.add_argument("--slow-pages", type=float, default=0.0, metavar="SECONDS",
                         help="each list page stalls this long mid-body")  # fmt: skip
    emulate.add_argument("--unknown-fields", action="store_true",
                         help="add fields the spec does not list (tolerance tests)")
    add_played_time_flags(emulate)
    emulate.add_argument("--cohort-filter", choices=("window_start", "created_at"),
                         default="window_start", help="what list cohorts' from/to select on "
                         "(the spec does not say; default window_start)")  # fmt: skip
    emulate.set_defaults(func=_serve_rai)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: failopen emulate status|verify|vendor|rai")
