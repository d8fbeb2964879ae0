"""``failopen audit windows [FILE ...]``: the bypass windows of audit files, for review after an
outage.

A window is every line with the same window id (see :mod:`failopen.observe.audit_file`); windows of
the same source whose times overlap (the processes of a fleet, each with the second it saw the
outage) are joined into one row that lists every id. Given a base name, the rotated backups
(``FILE.5`` .. ``FILE.1``) are read too; several files may be given (one per host). Lines that
are not audit lines are counted and reported on stderr; a last line cut short by a crash or a
copy in progress is skipped with a note.

Output: a table, or with ``--json`` JSON lines, one object per window, oldest first, with the
keys ``window``, ``ids``, ``source``, ``start``, ``end``, ``reason``, ``requests``, ``clients``,
``paths`` (the five busiest, with counts), ``outcomes`` (requests per outcome: a fallback route's
``bypassed_fallback`` is a bypass too, told apart from the free ``bypassed_flag_off``),
``enforcement_back`` (when the flag turned back to enforcing, from the file's
``enforcement_back`` lines; null when none says so) and ``back_reason``. ``start`` and ``end``
span the window's lines (its requests, and the flag turning off and back), ``start`` rounded
down and ``end`` up to the second, so they can be pasted into ``failopen rai sessions --from
START --to END``. With no FILE, ``FAILOPEN_AUDIT_FILE`` names it, as for the servers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, Any

from failopen._internal.terminal import printable

__all__ = ["Window", "audit_files", "read_windows", "register_audit"]

EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE = 0, 2, 2
# Malformed lines shown on stderr one by one; the rest are only counted.
_SHOWN = 5


@dataclass
class Window:
    """The bypasses of one window, as read from the files."""

    ids: list[str]
    source: str
    start: float
    end: float
    reasons: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    clients: set[str] = field(default_factory=set)
    paths: Counter[str] = field(default_factory=Counter)
    #: How each request was admitted: free (``bypassed_flag_off``), with a solved proof of work
    #: (``bypassed_fallback``), or after a failing verify call (``bypassed_confirmed_outage``).
    outcomes: Counter[str] = field(default_factory=Counter)
    #: When enforcement came back (the latest ``enforcement_back`` line of the window's
    #: processes) and why; None when no line says so (still off, or the process died first).
    back: float | None = None
    back_reason: str = ""

    def add(self, at: float, line: dict[str, Any]) -> None:
        """Count one line: a bypassed request, or the flag turning (``event``)."""
        self.start, self.end = min(self.start, at), max(self.end, at)
        event = line.get("event")
        if event is not None:
            if event == "enforcement_back" and (self.back is None or at >= self.back):
                self.back, self.back_reason = at, str(line.get("reason", ""))
            return
        self.requests += 1
        self.reasons[str(line.get("reason", ""))] += 1
        self.clients.add(str(line.get("client", "")))
        self.paths[str(line.get("path", ""))] += 1
        self.outcomes[str(line.get("outcome", ""))] += 1

    def join(self, other: Window) -> None:
        """Take in an overlapping window of the same source (another process's)."""
        self.ids.extend(i for i in other.ids if i not in self.ids)
        self.start, self.end = min(self.start, other.start), max(self.end, other.end)
        self.reasons.update(other.reasons)
        self.requests += other.requests
        self.clients |= other.clients
        self.paths.update(other.paths)
        self.outcomes.update(other.outcomes)
        if other.back is not None and (self.back is None or other.back >= self.back):
            self.back, self.back_reason = other.back, other.back_reason

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; times to the second, start down and end up (a window that covers)."""
        return {
            "window": self.ids[0], "ids": list(self.ids), "source": self.source,
            "start": _second(math.floor(self.start)), "end": _second(math.ceil(self.end)),
            "reason": self.reasons.most_common(1)[0][0] if self.reasons else "",
            "requests": self.requests, "clients": len(self.clients),
            "paths": dict(self.paths.most_common(5)),
            "outcomes": dict(sorted(self.outcomes.items())),
            "enforcement_back": _second(math.ceil(self.back)) if self.back is not None else None,
            "back_reason": self.back_reason if self.back is not None else None,
        }


@dataclass
class Problems:
    """What could not be read: malformed lines (counted, a few shown) and cut last lines."""

    malformed: int = 0
    truncated: int = 0
    shown: list[str] = field(default_factory=list)

    def bad(self, where: str, why: str) -> None:
        self.malformed += 1
        if len(self.shown) < _SHOWN:
            self.shown.append(f"{where}: {why}")


def _second(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return moment.timestamp()


def audit_files(names: Iterable[str]) -> list[str]:
    """The files to read, oldest first: for each name, its backups ``.N`` .. ``.1``, then it."""
    found: list[str] = []
    for name in names:
        backups = []
        n = 1
        while os.path.exists(f"{name}.{n}"):
            backups.append(f"{name}.{n}")
            n += 1
        found.extend(reversed(backups))
        found.append(name)
    # A backup also named on the command line (a shell glob) is read once.
    seen: set[str] = set()
    unique = []
    for path in found:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            unique.append(path)
    return unique


def _lines(handle: IO[bytes], where: str, problems: Problems) -> Iterator[dict[str, Any]]:
    number = 0
    for raw in handle:
        number += 1
        try:
            line = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            line = None
        if not isinstance(line, dict):
            if not raw.endswith(b"\n"):
                problems.truncated += 1  # the writer or a copy stopped mid-line: not corrupt
            else:
                problems.bad(f"{where}:{number}", "not a JSON object")
            continue
        yield line | {"_where": f"{where}:{number}"}


def read_windows(paths: Iterable[str], problems: Problems) -> list[Window]:
    """Every window in the files, overlapping ones of one source joined, oldest first.

    Raises OSError for a file that cannot be opened."""
    by_id: dict[str, Window] = {}
    for path in paths:
        with open(path, "rb") as handle:
            for line in _lines(handle, path, problems):
                at = _parse_time(line.get("time"))
                window = line.get("window")
                if at is None or not isinstance(window, str) or not window:
                    problems.bad(line["_where"], "no valid time or window")
                    continue
                current = by_id.get(window)
                if current is None:
                    source = window.split(":", 1)[0]
                    current = by_id[window] = Window([window], source, at, at)
                current.add(at, line)
    joined: list[Window] = []
    for window in sorted(by_id.values(), key=lambda w: (w.start, w.ids[0])):
        # A window of the same source that began before this one ended: the same outage, seen
        # by another process (status-page windows start when each process saw it).
        same = next((w for w in reversed(joined)
                     if w.source == window.source and window.start <= w.end), None)
        if same is not None:
            same.join(window)
        else:
            joined.append(window)
    return joined


def _table(windows: list[Window], out: IO[str]) -> None:
    rows = [("START", "END", "ENFORCING AGAIN", "REQUESTS", "CLIENTS", "SOURCE", "REASON")]
    for window in windows:
        shown = window.to_dict()
        # Source and reason come from the file: escaped before the widths are measured, so
        # the columns line up as the operator sees them.
        rows.append((shown["start"], shown["end"], shown["enforcement_back"] or "not recorded",
                     str(shown["requests"]), str(shown["clients"]), printable(shown["source"]),
                     printable(shown["reason"])))
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    for row in rows:
        cells = [row[i].ljust(widths[i]) for i in range(6)] + [row[6]]
        out.write("  ".join(cells) + "\n")


def _cmd_windows(args: argparse.Namespace) -> int:
    problems = Problems()
    names = args.files or [os.environ.get("FAILOPEN_AUDIT_FILE", "").strip()]
    if not names[0]:
        print("failopen audit windows: name an audit file, or set FAILOPEN_AUDIT_FILE as the "
              "servers have it", file=sys.stderr)
        return EXIT_USAGE
    paths = audit_files(names)
    try:
        windows = read_windows(paths, problems)
    except OSError as exc:
        print(printable(f"failopen audit windows: cannot read {exc.filename}: {exc.strerror}"),
              file=sys.stderr)
        return EXIT_UNREADABLE
    if args.json:
        for window in windows:
            sys.stdout.write(json.dumps(window.to_dict(), sort_keys=True) + "\n")
    elif windows:
        _table(windows, sys.stdout)
    else:
        print("no bypass windows")
    for line in problems.shown:
        print(printable(f"failopen audit windows: malformed line {line}"), file=sys.stderr)
    if problems.malformed:
        print(f"failopen audit windows: {problems.malformed} malformed line(s) skipped",
              file=sys.stderr)
    if problems.truncated:
        print(f"failopen audit windows: {problems.truncated} incomplete last line(s) skipped "
              "(a writer was interrupted or is still writing)", file=sys.stderr)
    sys.stdout.flush()
    return EXIT_OK


def register_audit(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``failopen audit windows``."""
    # Descriptions, exit codes and examples: failopen/cli/help.py.
    audit = verbs.add_parser(
        "audit", help="review the audit file (FAILOPEN_AUDIT_FILE) after an outage")
    kinds = audit.add_subparsers(dest="audit_verb", metavar="VERB", required=True)
    windows = kinds.add_parser(
        "windows", help="the bypass windows: start, end, reason, requests, distinct clients")
    windows.add_argument("files", nargs="*", metavar="FILE",
                         help="an audit file (its .1 .. .N backups are read too); several "
                              "files (one per host) are merged (default: FAILOPEN_AUDIT_FILE)")
    windows.add_argument("--json", action="store_true",
                         help="JSON lines: one object per window, oldest first")
    windows.set_defaults(func=_cmd_windows)
