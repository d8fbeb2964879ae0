"""The ``failopen rai sync`` command line: flags, exit codes and the ``--json`` run summary."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from failopen._internal.durations import duration_arg
from failopen.rai._arguments import check_public_keys, format_rfc3339, to_instant
from failopen.rai._client import Client
from failopen.rai._command import (
    DEFAULT_PAGE_SIZE,
    ENV_BASE_URL,
    EXIT_AUTH,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_USAGE,
    exit_status,
    max_pages_flag,
    page_size_arg,
    parallel_arg,
    positive_arg,
    report,
)
from failopen.rai._formats import FORMATS
from failopen.rai._manifest import new_run_id, write_manifest
from failopen.rai._output import Progress, Terminated, UsageError, sigterm_raises
from failopen.rai._sink import DirSink, Sink, StdoutSink
from failopen.rai._state import StateError, SyncState, locked
from failopen.rai.exceptions import RaiError, RaiValidationError
from failopen.rai.sync import CLOCK_SKEW, REACH, MissingSince, Summary, SyncOptions, run_sync

__all__ = ["register_sync", "SYNC_DESCRIPTION", "DEFAULT_LOOKBACK", "EXIT_GAP"]

DEFAULT_LOOKBACK = "30d"
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process the signal ended
#: The run completed, but a key was last listed more than 30 days before it (see Summary.gaps).
EXIT_GAP = 6
_FLOOR = datetime(1970, 1, 1, tzinfo=timezone.utc)
_DURATION = re.compile(r"(\d+)([smhd])", re.ASCII)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

SYNC_DESCRIPTION = """\
Fetch each new cohort and its sessions exactly once, run after run.

  failopen rai sync --public-key pk_live_1 --state sync-state.json \\
      --out-dir /data/rai --since 2024-05-01T00:00:00Z

Each run lists the cohorts of each key from where the last run ended, less
--lookback (default and at most 30d, the longest window the API lists), up to
--until (default: now; later than now is refused), skips the cohorts already
delivered, and writes the new ones and their sessions. So a cohort the API shows
up to 30 days after its window start or its created_at (the API filters on one
of them) is delivered by the next run, once. --lookback below 30d lists less (a
cost knob): a cohort created later than that after its window start can then be
missed; the run says so when cohorts come close (late_cohorts). --since is
needed the first time for each key (a backfill may reach back any distance), and
is ignored once the state file knows the key: it records a key's --since before
its first run fetches anything, so a first run killed at any point is resumed by
the same command without --since.

Output: new files per batch in Hive partitions by the record's UTC day,
DIR/kind=cohorts/dt=YYYY-MM-DD/<run id>-<batch>.jsonl (by cohort_window_start)
and DIR/kind=sessions/dt=YYYY-MM-DD/... (by session_created), records exactly as
received (no usable time: dt=__HIVE_DEFAULT_PARTITION__). A file is written under
a hidden .part name, fsynced, recorded in the state and only then renamed; a
visible file is never appended to, rewritten or truncated. A run killed or
failing mid-batch leaves nothing visible: the next run writes those records
again, as new files. Each run that got as far as listing writes
DIR/_manifests/<run id>.json (its files with records and bytes, counts per kind
and key, the watermark), also on failure and SIGTERM. --out-dir - writes one
line per record, {"kind":"sessions","record":{...}}, to stdout (at least once:
after a crash the last batch may be written again) and the --json summary to
stderr.

--state (JSON, replaced atomically) holds, per key, where the last run ended and
the ids of the cohorts delivered in the last 60 days (ids only, whatever the
flags: a wider --lookback or a re-run writes nothing twice). A run killed at any
point resumes without gaps or duplicates, refetching unfinished cohorts from
their first page. A second run on the same state file refuses to start
(<state>.lock).

A key the service refuses (403: not the credentials' key) is named in one line;
the other keys are synced and the run exits 3 at the end. SIGTERM finishes the
batch being written, stops fetching, prints a line and the --json summary, and
exits 143; the next run delivers the rest, once.

Exit codes: 0 done, 1 the output, state or lock file could not be used, 2 bad
arguments (or a 400), 3 unauthorized or forbidden (a refused key: after the
others), 4 not found, 5 server or network failure after the retries, or a
listing the service never ends (100 empty pages in a row still carrying a
next_page_token, or --max-pages pages), 6 done, but a key was last listed more
than 30 days before (what the API no longer lists could have been missed; the
message says what to check; the next run exits 0), 143 SIGTERM. On failure the
state keeps every cohort written before it; the next run goes on from there.
"""


def _lookback(text: str) -> timedelta:
    if text.strip() == "0":
        return timedelta(0)
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90m, 2h or 1d")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


def _instant(text: str | None, name: str) -> datetime | None:
    if text is None:
        return None
    try:
        return to_instant(text, name=name)
    except RaiValidationError as exc:
        raise UsageError(str(exc)) from None


def _window(args: argparse.Namespace, now: datetime) -> tuple[datetime | None, datetime]:
    """--since and --until, refused when no run could ever list that window (UsageError)."""
    if args.lookback > REACH:
        raise UsageError(f"--lookback is at most {DEFAULT_LOOKBACK} (the longest window the "
                         "API lists, and the default); leave it out")  # fmt: skip
    since = _instant(args.since, "--since")
    until = _instant(args.until, "--until") or now
    latest = now + CLOCK_SKEW
    for name, moment in (("--since", since), ("--until", until)):
        if moment is None:
            continue
        if moment > latest:
            # A run lists only what exists: a later --until would record the key as listed
            # through a time that has not come, and no later run would list what appears.
            raise UsageError(f"{name} {format_rfc3339(moment)} is later than now "
                             f"({format_rfc3339(now)}, allowing 5 minutes of clock skew); "
                             "leave --until out (it defaults to now)")  # fmt: skip
        if moment < _FLOOR:
            raise UsageError(f"{name} {format_rfc3339(moment)} is before 1970-01-01")
    if since is not None and since >= until:
        raise UsageError(f"--since {format_rfc3339(since)} must be before --until "
                         f"{format_rfc3339(until)}")  # fmt: skip
    return since, until


def _notes(prog: str, summary: Summary) -> int:
    """Say what a completed run could not vouch for, and what to do; its exit code."""
    if summary.late:
        hours = round(summary.late_max / 3600)
        report(prog, "late_cohorts", f"{summary.late} cohort(s) were created more than half the "
               f"lookback after their window started (up to {hours} h): if the API filters by "
               "window start, a cohort created later than --lookback after it is missed; keep "
               f"--lookback at {DEFAULT_LOOKBACK} (the default)", None)  # fmt: skip
    for gap in summary.gaps:
        report(prog, "gap", f"{gap['public_key']} was last listed through "
               f"{gap['listed_through']}, more than 30 days before this run (or in the future): "
               "a cohort the API showed only after that, in a window it no longer lists, could "
               "have been missed. Everything it still lists was delivered. Check the support "
               "tickets of that period (each cohort has one) against the cohorts delivered, and "
               "run the sync at least daily; the next run exits 0", None)  # fmt: skip
    return EXIT_GAP if summary.gaps else EXIT_OK


def _sink(args: argparse.Namespace) -> Sink:
    if args.out_dir == "-":
        if args.format != "jsonl":
            raise UsageError(f"--out-dir - writes JSON lines; drop --format {args.format}")
        return StdoutSink(sys.stdout.buffer, owner=_state_path(args))
    try:
        FORMATS[args.format].require()  # before anything is fetched
    except ImportError as exc:
        raise UsageError(f"--format {args.format}: {exc}") from None
    return DirSink(args.out_dir, args.format, owner=_state_path(args))


def _state_path(args: argparse.Namespace) -> str:
    """The state file with symlinks resolved: a link to it takes the same lock (two runs on one
    state would deliver the same cohorts twice), and a save replaces the file, not the link."""
    return os.path.realpath(str(args.state))


def _manifest(prog: str, args: argparse.Namespace, summary: Summary, code: int,
              outcome: dict[str, Any]) -> int:  # fmt: skip
    """Write the run's manifest (a run that got as far as listing, into a directory); the exit
    code, EXIT_OUTPUT when it could not be written."""
    outcome["manifest"] = None
    if not summary.listing or args.out_dir == "-":
        return code
    finished = format_rfc3339(datetime.now(timezone.utc).replace(microsecond=0))
    try:
        path = write_manifest(os.path.abspath(args.out_dir), summary, code, finished)
    except OSError as exc:
        report(prog, "output_error", f"the run's manifest could not be written: "
               f"{exc.strerror or exc} ({exc.filename or args.out_dir})", None)  # fmt: skip
        return code if code != EXIT_OK else EXIT_OUTPUT
    outcome["manifest"] = path
    return code


def _sync(args: argparse.Namespace, make_client: Callable[[argparse.Namespace], Client]) -> int:
    prog = "failopen rai sync"
    summary = Summary()
    progress = Progress(sys.stderr)
    code = EXIT_OK
    started = False
    try:
        with sigterm_raises():
            try:
                keys = check_public_keys(args.public_keys, name="--public-key")
            except RaiValidationError as exc:
                raise UsageError(str(exc)) from None
            now = datetime.now(timezone.utc).replace(microsecond=0)
            summary.run_id = new_run_id(now)
            summary.started_at = format_rfc3339(now)
            since, until = _window(args, now)
            options = SyncOptions(keys, since, args.lookback, until, parallel=args.parallel,
                                  page_size=args.page_size,
                                  batch_records=args.batch_records)  # fmt: skip
            sink = _sink(args)
            sink.check()
            state_path = _state_path(args)
            with locked(state_path):
                state = SyncState.load(state_path)
                started = True
                client = make_client(args)
                with client:
                    run_sync(client, state, sink, options, progress, summary)
        code = _notes(prog, summary)
    except Terminated as exc:
        # Fetching stopped; every batch written is recorded and the rest was discarded, so the
        # files and the state are as a crash would leave them at worst (the next run cleans up).
        report(prog, "terminated", "SIGTERM: stopped; every cohort written so far is recorded "
               "in the state, the next run delivers the rest", None)  # fmt: skip
        code = int(exc.code) if isinstance(exc.code, int) else EXIT_TERMINATED
    except UsageError as exc:
        report(prog, "invalid_argument", str(exc), None)
        code = EXIT_USAGE
    except MissingSince as exc:
        key, exists = exc.args
        where = f"the state file has no {key!r} yet" if exists else (
            f"no state file yet ({args.state}): this is the first run"
        )  # fmt: skip
        report(
            prog,
            "invalid_argument",
            f"{where}: give --since for its first run "
            "(later runs, even after one was killed, go on without it)",
            None,
        )

        code = EXIT_USAGE
    except StateError as exc:
        report(prog, "state_error", str(exc), None)
        code = EXIT_OUTPUT
    except RaiError as exc:
        code, fallback = exit_status(exc)
        report(prog, exc.code or fallback, exc.message, exc.request_id, exc.status_code)
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OUTPUT
    except OSError as exc:
        where = exc.filename or "stdout"
        after = "; the state was not advanced past the last complete batch" if started else ""
        report(prog, "output_error", f"{exc.strerror or exc} ({where}){after}", None)
        code = EXIT_OUTPUT
    finally:
        progress.finish()
    for key, error in summary.refused.items():
        report(prog, error.code or "forbidden", f"public key {key!r} was skipped (not the "
               f"credentials' key, or no right to it): {error.message}; the other keys are "
               "synced", error.request_id, error.status_code)  # fmt: skip
    if summary.refused and code in (EXIT_OK, EXIT_GAP):
        code = EXIT_AUTH
    outcome: dict[str, Any] = {}
    code = _manifest(prog, args, summary, code, outcome)
    if args.json:
        outcome = {**summary.to_json(code), **outcome}
        stream = sys.stderr if args.out_dir == "-" else sys.stdout
        print(json.dumps(outcome, separators=(",", ":")), file=stream, flush=True)
    return code


def register_sync(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
    make_client: Callable[[argparse.Namespace], Client],
) -> None:
    """Add ``failopen rai sync``; ``make_client`` builds the client from the common flags."""
    sync = verbs.add_parser(
        "sync", help="incremental, resumable sync of new cohorts and sessions to files",
        description=SYNC_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    sync.add_argument("--public-key", dest="public_keys", action="append", required=True,
                      metavar="KEY", help="public key; repeat for several")  # fmt: skip
    sync.add_argument("--state", required=True, metavar="FILE",
                      help="the state file (created by the first run)")  # fmt: skip
    sync.add_argument(
        "--out-dir",
        required=True,
        metavar="DIR",
        help="directory of the partitions and manifests, or - for JSON lines on stdout",
    )
    sync.add_argument("--format", choices=tuple(FORMATS), default="jsonl",
                      help="jsonl: records exactly as received; jsonl.gz: the same, "
                      "gzip-compressed; csv: spec columns + extra_fields; parquet: typed by "
                      'the shipped schema (pip install "failopen[parquet]") (default: jsonl)')
    sync.add_argument(
        "--since",
        metavar="RFC3339",
        help="where the first run of a key starts (required the first time)",
    )
    sync.add_argument("--lookback", type=_lookback, default=_lookback(DEFAULT_LOOKBACK),
                      metavar="DURATION", help="how far back each run lists cohorts again, "
                      f"at most and by default {DEFAULT_LOOKBACK} (less is a cost knob: late "
                      "cohorts can be missed)")  # fmt: skip
    sync.add_argument("--until", metavar="RFC3339", help="end of this run (default: now)")
    sync.add_argument("--parallel", type=parallel_arg, default=4, metavar="N",
                      help="cohorts fetched at once, 1-32 (default: 4)")  # fmt: skip
    sync.add_argument(
        "--batch-records",
        type=positive_arg,
        default=20_000,
        metavar="N",
        help="write files and record progress every N records at least (default: "
        "20000; smaller redoes less after a crash, costs more fsyncs)",
    )
    sync.add_argument("--json", action="store_true",
                      help="print a one-line JSON summary of the run")  # fmt: skip
    sync.add_argument("--base-url", help=f"service base URL (default: ${ENV_BASE_URL})")
    sync.add_argument(
        "--page-size",
        type=page_size_arg,
        default=DEFAULT_PAGE_SIZE,
        help=f"records per request, 1-1000 (default: {DEFAULT_PAGE_SIZE})",
    )
    max_pages_flag(sync)
    sync.add_argument("--timeout", type=duration_arg, default=30.0,
                      help="time per attempt: 30s, 2m, ... (default: 30s)")  # fmt: skip
    sync.add_argument(
        "--max-attempts",
        type=int,
        default=4,
        help="attempts per request on server or network errors (default: 4)",
    )
    # The factory is cli.py's, which owns the exports' client (this module cannot import that
    # one, which imports this one): a test that replaces ``cli.Client`` replaces it for both.
    sync.set_defaults(func=functools.partial(_sync, make_client=make_client))
