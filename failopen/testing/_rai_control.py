"""Run-time control of a served :class:`~failopen.testing.RaiEmulator`, both ends.

The server side (``RaiEmulator.serve(control=True)``, which ``failopen emulate rai`` uses) is the
``/_control`` route of :mod:`failopen.testing.control`, loopback only. ``GET`` answers
``{"fake": "rai", "live": ..., "now": ..., "cohorts": N, "listed": N, "next_created_at": ...,
"unknown_fields": ..., "requests": N}``; ``POST`` takes ``{"unknown_fields": true}`` (every
record from then on, cohorts already served too) and ``{"add_cohort": {"window_start":
"now-3d", "window_end": ..., "created_at": "now", "sessions": 40}}`` (only ``window_start`` is
required; times RFC 3339 or ``now[+-DURATION]``), and answers the state with ``added``, the new
cohort's record. A body that is not valid as a whole changes nothing.

The client side: ``failopen emulate rai --set unknown_fields=true``, ``--show``, and
``--add-cohort WINDOW_START [--window-end T] [--created-at T] [--sessions N]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol

from failopen._internal.terminal import printable
from failopen.testing._emulate_basics import usage_error
from failopen.testing._rai_data import format_rfc3339
from failopen.testing._rai_time import MAX_SESSIONS, MAX_SPAN_DAYS, PlayedDataset, cohort_times
from failopen.testing.control import ControlError, Controls

__all__ = ["ControlledRai", "RaiControls", "add_played_time_flags", "played_time_banner",
           "rai_control", "wants_control"]

_ADD_KEYS = ("window_start", "window_end", "created_at", "sessions")
_DEFAULT_SESSIONS = 50


class ControlledRai(Protocol):
    """What the controls use of :class:`~failopen.testing.RaiEmulator` (which imports this)."""

    unknown_fields: bool
    requests: int
    cohort_count: int
    public_keys: tuple[str, ...]

    @property
    def timeline(self) -> PlayedDataset: ...

    def add_cohort(self, window_start: str, *, window_end: str | None = None,
                   created_at: str | None = None, sessions: int = 50) -> dict[str, Any]: ...


class RaiControls(Controls):
    """Control of a served :class:`~failopen.testing.RaiEmulator`."""

    kind = "rai"
    keys = ("unknown_fields", "add_cohort")
    example = '{"add_cohort": {"window_start": "now-3d", "created_at": "now", "sessions": 40}}'

    def __init__(self, emulator: ControlledRai) -> None:
        self.emulator = emulator
        self.data = emulator.timeline
        self.added: dict[str, Any] | None = None

    def state(self) -> dict[str, Any]:
        """Played time or not, now, cohorts (all, and served now), the next to come, the rest."""
        listed, upcoming = self.data.listed_now()
        state = {
            "fake": self.kind, "live": self.data.live,
            "now": format_rfc3339(self.data.now_ms(), fraction=False),
            "cohorts": self.data.cohort_count, "listed": listed,
            "next_created_at": None if upcoming is None else format_rfc3339(upcoming,
                                                                             fraction=False),
            "unknown_fields": self.emulator.unknown_fields, "requests": self.emulator.requests,
        }  # fmt: skip
        if self.added is not None:
            state["added"] = self.added
        return state

    def plan(self, body: dict[str, Any]) -> list[Callable[[], None]]:
        """Checks the whole body first; the cohort's times are fixed now, not when it is added."""
        changes: list[Callable[[], None]] = []
        if "add_cohort" in body:
            spec = body["add_cohort"]
            if not isinstance(spec, dict):
                raise ControlError(f"add_cohort: an object like {self.example[15:-1]}, "
                                   f"not {type(spec).__name__}")
            unknown = sorted(set(spec) - set(_ADD_KEYS))
            if unknown:
                raise ControlError(f"add_cohort: unknown key {unknown[0]!r}; it takes "
                                   f"{', '.join(_ADD_KEYS)}")
            if "window_start" not in spec:
                raise ControlError("add_cohort: window_start is required, e.g. now-3d")
            try:
                cohort = cohort_times(spec["window_start"], spec.get("window_end"),
                                      spec.get("created_at"),
                                      spec.get("sessions", _DEFAULT_SESSIONS), self.data.now_ms())
            except ValueError as exc:
                raise ControlError(f"add_cohort: {exc}") from None
            changes.append(lambda: self._add(cohort.start_ms, cohort.end_ms, cohort.created_ms,
                                             cohort.sessions))
        if "unknown_fields" in body:
            value = body["unknown_fields"]
            if not isinstance(value, bool):
                raise ControlError(f"unknown_fields: true or false, not {value!r}")
            changes.append(lambda: setattr(self.emulator, "unknown_fields", value))
        return changes

    def _add(self, start_ms: int, end_ms: int, created_ms: int, sessions: int) -> None:
        def stamp(ms: int) -> str:
            return format_rfc3339(ms, fraction=False)

        self.added = self.emulator.add_cohort(stamp(start_ms), window_end=stamp(end_ms),
                                              created_at=stamp(created_ms), sessions=sessions)


# --- failopen emulate rai: flags, banner, and the client of /_control ---------------------------


def _span_days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not 0 < days <= MAX_SPAN_DAYS:  # nan and inf too
        raise argparse.ArgumentTypeError(f"expected days above 0 and at most {MAX_SPAN_DAYS}, "
                                         f"got {text!r}")
    return days


def _sessions(text: str) -> int:
    if not text.isdigit() or int(text) > MAX_SESSIONS:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {MAX_SESSIONS}, "
                                         f"got {text!r}")
    return int(text)


def add_played_time_flags(parser: argparse.ArgumentParser) -> None:
    """``--live``, ``--start``, ``--span-days`` and the control group of ``emulate rai``."""
    parser.add_argument("--live", action="store_true", default=None,
                        help="play time: serve each cohort from its created_at on (some are "
                             "created days after their window), on the wall clock")
    parser.add_argument("--start", metavar="TIME",
                        help="start of the data: RFC 3339 or now-2d (default "
                             "2024-05-01T00:00:00Z; with --live, --span-days before now)")
    parser.add_argument("--span-days", type=_span_days, metavar="DAYS",
                        help=f"days the cohort windows spread over (default 20; at most "
                             f"{MAX_SPAN_DAYS})")
    group = parser.add_argument_group(
        "control a running emulator (POST /_control on loopback; it is not restarted)")
    group.add_argument("--set", action="append", metavar="NAME=VALUE",
                       help="unknown_fields=true or false: every answer from then on, cohorts "
                            "already served too (exit 2 when invalid or nothing listens)")
    group.add_argument("--show", action="store_true",
                       help="print the running emulator's cohorts and clock")
    group.add_argument("--url", help="the running emulator (default http://127.0.0.1:PORT)")
    group.add_argument("--add-cohort", metavar="WINDOW_START",
                       help="add a cohort whose window starts then: RFC 3339 or now-3d")
    group.add_argument("--window-end", metavar="TIME",
                       help="its window's end (default: an hour after its start)")
    group.add_argument("--created-at", metavar="TIME",
                       help="when it is created, and listed from (default: now, or its "
                            "window's end when later)")
    group.add_argument("--sessions", type=_sessions, metavar="N",
                       help=f"its sessions, 0 to {MAX_SESSIONS} (default {_DEFAULT_SESSIONS})")


_SERVING = (("live", "--live"), ("start", "--start"), ("span_days", "--span-days"),
            ("public_keys", "--public-key"), ("fail_every", "--fail-every"))
_WITH_ADD = (("window_end", "--window-end"), ("created_at", "--created-at"),
             ("sessions", "--sessions"))


def wants_control(args: argparse.Namespace) -> bool:
    """Whether the command talks to a running emulator rather than starting one."""
    return bool(args.set or args.show or args.url is not None or args.add_cohort is not None
                or any(getattr(args, attribute) is not None for attribute, _ in _WITH_ADD))


def _body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for item in args.set or []:
        name, sep, value = (part.strip() for part in item.partition("="))
        if name != "unknown_fields" or not sep:
            raise ControlError(f"--set {item}: the rai emulator takes unknown_fields=true|false "
                               "(add cohorts with --add-cohort)")
        if value.lower() not in ("true", "false", "yes", "no", "on", "off", "1", "0"):
            raise ControlError(f"--set {item}: true or false")
        body["unknown_fields"] = value.lower() in ("true", "yes", "on", "1")
    if args.add_cohort is not None:
        spec = {"window_start": args.add_cohort, "window_end": args.window_end,
                "created_at": args.created_at, "sessions": args.sessions}
        body["add_cohort"] = {key: value for key, value in spec.items() if value is not None}
    return body


def rai_control(args: argparse.Namespace) -> int:
    """``--set``/``--show``/``--add-cohort``: change or read the emulator running at ``--url``
    (default 127.0.0.1 and ``--port``)."""
    from failopen.testing.control import read_control, send_control

    for attribute, flag in _SERVING:
        if getattr(args, attribute) is not None:
            return usage_error("rai", f"{flag} configures a new emulator; --set, --show and "
                                      "--add-cohort talk to a running one (drop one of them)")
    if args.add_cohort is None:
        for attribute, flag in _WITH_ADD:
            if getattr(args, attribute) is not None:
                return usage_error("rai", f"{flag} goes with --add-cohort WINDOW_START")
    if args.url is None and args.port == 0:
        return usage_error("rai", "--port 0 picks a free port for a new emulator; name the "
                                  "running one with --url or --port N")
    url = str(args.url).rstrip("/") if args.url else f"http://127.0.0.1:{args.port}"
    try:
        body = _body(args)
        state = send_control(url, body) if body else read_control(url)
    except ControlError as exc:
        return usage_error("rai", str(exc))
    if state.get("fake") != "rai":
        return usage_error("rai", f"{url} is the {state.get('fake')!r} fake, not the rai emulator")
    lines = []
    added = state.get("added") if "add_cohort" in body else None
    if isinstance(added, dict):
        lines.append(f"added cohort {added.get('cohort_id')} ({added.get('public_key')}): window "
                     f"{added.get('cohort_window_start')} to {added.get('cohort_window_end')}, "
                     f"{added.get('session_count')} sessions, created_at "
                     f"{added.get('created_at')} (listed from then on)")
    upcoming = state.get("next_created_at")
    lines.append(
        f"rai emulator {url}: {state.get('cohorts')} cohorts, {state.get('listed')} listed at "
        f"{state.get('now')}" + (f", the next created at {upcoming}" if upcoming else "")
        + (", played time" if state.get("live") else "")
        + f", unknown_fields={str(state.get('unknown_fields')).lower()}"
    )  # fmt: skip
    for line in lines:
        print(printable(line), flush=True)  # the server's words: as text
    return 0


def played_time_banner(emulator: ControlledRai, start: str, url: str) -> str:
    """The banner's lines for ``--live``: what is listed now, and a sync that rehearses a job."""
    listed, upcoming = emulator.timeline.listed_now()
    following = "" if upcoming is None else (
        f"; the next at {format_rfc3339(upcoming, fraction=False)}")
    return (
        f"\n# played time: {listed} of {emulator.cohort_count} cohorts listed now, each from its "
        f"created_at{following}\n"
        f"# failopen rai sync --public-key {emulator.public_keys[0]} --state rai-state.json "
        f"--out-dir rai-out --since {start}\n"
        "# add a cohort: failopen emulate rai --add-cohort now-3d --created-at now --sessions 40"
        + ("" if url.endswith(":8403") else f" --url {url}")
    )
