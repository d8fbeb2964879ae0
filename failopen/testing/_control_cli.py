"""``failopen emulate status|verify|vendor --set NAME=VALUE`` / ``--show``: the client of
:mod:`failopen.testing.control`, changing or reading a fake that is already running."""

from __future__ import annotations

import argparse
from typing import Any

from failopen._internal.terminal import printable
from failopen.testing._emulate_basics import serving_port, usage_error

__all__ = ["control", "control_target"]

# The flags that configure a fake being started; --set and --show talk to one already running.
_SERVING_FLAGS = {
    "status": (("regions", "--regions"), ("global_status", "--global"), ("region", "--region"),
               ("fault", "--fault"), ("shape", "--shape")),
    "verify": (("private_key", "--private-key"), ("fault", "--fault")),
    "vendor": (("mode", "--mode"),),
}


def control_target(args: argparse.Namespace) -> str:
    """The base URL ``--set``/``--show`` talk to: ``--url``, else 127.0.0.1 and ``--port``
    (default: the emulator's default port)."""
    if args.url:
        return str(args.url).rstrip("/")
    return f"http://127.0.0.1:{serving_port(args, args.emulator)}"


def _pair(item: str) -> tuple[str, str]:
    from failopen.testing.control import ControlError

    name, sep, value = item.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise ControlError(f"--set {item}: expected NAME=VALUE, e.g. --set global=major_outage")
    return name.strip(), value.strip()


def _fault_value(item: str, value: str, faults: frozenset[str]) -> str | None:
    from failopen.testing.control import check_fault

    if value.lower() in ("none", "null", "off"):
        return None
    return check_fault(value, faults, where=f"--set {item}")


def _control_body(fake: str, sets: list[str]) -> dict[str, Any]:
    """The JSON body for ``--set`` items; ControlError naming the item the user typed."""
    from failopen.testing._vendor_modes import SCRIPT_KINDS, WIDGET_KINDS, parse_mode
    from failopen.testing.control import ControlError, check_status
    from failopen.testing.status_page import FakeStatusPage
    from failopen.testing.verify_api import FakeVerifyAPI

    body: dict[str, Any] = {}
    regions: dict[str, str] = {}
    for item in sets:
        name, value = _pair(item)
        where = f"--set {item}"
        if fake == "status":
            if name == "fault":
                body["fault"] = _fault_value(item, value, FakeStatusPage.FAULTS)
            elif name == "global":
                body["global"] = check_status(value, where)
            else:  # a region label: the running page knows its own regions
                regions[name] = check_status(value, where)
        elif fake == "verify":
            if name != "fault":
                raise ControlError(f"{where}: the verify fake takes fault=FAULT (or fault=none)")
            # Any vendor's fault: the running fake refuses one it has not (Turnstile alone has
            # internal_error), and says so.
            from failopen.testing.providers import FAKES

            faults = FakeVerifyAPI.FAULTS.union(*(fake.FAULTS for fake in FAKES.values()))
            body["fault"] = _fault_value(item, value, faults)
        elif name == "down":
            if value.lower() not in ("true", "false", "yes", "no", "on", "off", "1", "0"):
                raise ControlError(f"{where}: true or false")
            body["down"] = value.lower() in ("true", "yes", "on", "1")
        elif name == "mode":
            # Any vendor script's mode: the running fake refuses one it cannot play (the spec's
            # has no expire:MS, a captcha widget's no failed), and says so.
            try:
                parse_mode(value, SCRIPT_KINDS | WIDGET_KINDS)
            except ValueError as exc:
                raise ControlError(f"{where}: {exc}") from None
            body["mode"] = value
        else:
            raise ControlError(f"{where}: the vendor fake takes down=true|false or mode=MODE")
    if regions:
        body["regions"] = regions
    return body


def _describe(fake: str, url: str, state: dict[str, Any]) -> str:
    if fake == "status":
        regions = " ".join(f"{name}={status}" for name, status in state["regions"].items())
        return (f"fake status page {url}: global={state['global']} {regions} "
                f"fault={state['fault'] or 'none'}")
    if fake == "verify":
        return f"fake verify API {url}: fault={state['fault'] or 'none'}"
    down = " (down: api.js answers 404)" if state["down"] else ""
    return f"fake vendor script {url}: mode={state['mode']}{down}"


def control(fake: str, args: argparse.Namespace) -> int:
    """``--set``/``--show``: change or read the fake running at ``control_target(args)``."""
    from failopen.testing.control import ControlError, read_control, send_control

    for attribute, flag in _SERVING_FLAGS[fake]:
        if getattr(args, attribute) is not None:
            verb = "--set changes" if args.set else "--show reads"
            return usage_error(fake, f"{verb} a running fake; {flag} configures a new one "
                                      "(drop one of them)")  # fmt: skip
    if args.url is None and args.port == 0:
        return usage_error(fake, "--port 0 picks a free port for a new fake; name the running "
                                  "one with --url or --port N")  # fmt: skip
    url = control_target(args)
    try:
        state = send_control(url, _control_body(fake, args.set)) if args.set else read_control(url)
    except ControlError as exc:
        return usage_error(fake, str(exc))
    if state.get("fake") != fake:
        return usage_error(fake, f"{url} is the {state.get('fake')!r} fake, not {fake!r}")
    print(printable(_describe(fake, url, state)), flush=True)  # the server's words: as text
    return 0
