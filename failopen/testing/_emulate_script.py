"""``failopen emulate vendor --vendor NAME``: a captcha vendor's browser-script fake on loopback.

The spec's vendor script stays ``failopen emulate vendor`` without ``--vendor``. With a vendor's
name, the fake of that vendor's own script (:mod:`failopen.testing.browser_scripts`) answers at
the path the vendor uses (Turnstile ``/turnstile/v0/api.js``, hCaptcha ``/1/api.js``, ...), so a
dev server with ``FAILOPEN_VENDOR=NAME`` and ``FAILOPEN_VENDOR_URL`` pointing here renders that
vendor's widget through failopen.js. No verify fake in this process: each solve's token is
minted with ``--private-key`` (default: the vendor fake's own), which ``failopen emulate verify
--vendor NAME`` accepts once, as the vendor would.
"""

from __future__ import annotations

import argparse

from failopen.testing._emulate_basics import (
    DEFAULT_PORTS,
    serve_until_signalled,
    serving_port,
    usage_error,
)

__all__ = ["serve_browser_script"]

_CONTROL_HINT = "  change it while it runs: failopen emulate vendor --set down=true"


def serve_browser_script(args: argparse.Namespace) -> int:
    """Serve ``args.vendor``'s browser-script fake until Ctrl-C; the exit code."""
    from failopen.testing.browser_scripts import fake_browser_script
    from failopen.testing.providers import FAKES

    verify = FAKES[args.vendor]
    key = args.private_key if args.private_key is not None else verify.DEFAULT_PRIVATE_KEY
    script = fake_browser_script(args.vendor, signing_key=key)
    mode = args.mode if args.mode is not None else "ok"
    try:
        script.set_mode(mode)
    except ValueError as exc:
        # `failed` is the spec's vendor script's only: a captcha widget lets a person retry.
        return usage_error("vendor", f"--mode: {exc}")
    port = serving_port(args, "vendor")
    name = args.vendor
    return serve_until_signalled(
        "vendor", port, lambda: script.serve(port, control=True), lambda url: (
            f"fake {name} browser script: {url}{script.script_path}\n"
            f"  mode: {mode}\n"
            f"  FAILOPEN_VENDOR={name}\n"
            f"  FAILOPEN_VENDOR_URL={url}\n"
            f"  tokens: minted with {key}, the key `failopen emulate verify --vendor {name}` "
            "accepts by default, once each\n"
            + _CONTROL_HINT
            + ("" if port == DEFAULT_PORTS["vendor"] else f" --url {url}")
        ))  # fmt: skip
