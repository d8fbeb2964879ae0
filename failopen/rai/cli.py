"""``failopen rai``: export cohorts and sessions for SIEM and data-lake ingestion.

The user's contract (verbs, formats, the atomic ``--out``, exit codes) is :data:`DESCRIPTION`,
the plain text ``failopen rai --help`` prints. The writers are in ``_output.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from datetime import datetime
from typing import Any, TypeAlias

from failopen._internal.durations import duration_arg
from failopen.rai import Client, RaiError
from failopen.rai._arguments import check_cohort_id, check_id, check_public_keys, check_window
from failopen.rai._base import DEFAULT_MAX_PAGES
from failopen.rai._command import (
    COHORT_COLUMNS,
    DEFAULT_PAGE_SIZE,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_USAGE,
    SESSION_COLUMNS,
    exit_status,
    max_pages_flag,
    page_size_arg,
    parallel_arg,
    report,
    service_settings,
)
from failopen.rai._command import ENV_BASE_URL as ENV_BASE_URL  # failopen.testing.cli reads them
from failopen.rai._command import ENV_CLIENT_ID as ENV_CLIENT_ID
from failopen.rai._command import ENV_CLIENT_SECRET as ENV_CLIENT_SECRET
from failopen.rai._output import (
    EXTRA_COLUMN,
    AtomicFile,
    CsvRows,
    JsonLines,
    Progress,
    Terminated,
    UsageError,
    limit_malloc_arenas,
    sigterm_raises,
)
from failopen.rai._pager import cohort_sessions_pager, cohorts_pager, sessions_pager
from failopen.rai._parallel import Encode, Encoded, parallel_export
from failopen.rai._sync_cli import register_sync
from failopen.rai.models import Page

__all__ = ["register_rai", "COHORT_COLUMNS", "SESSION_COLUMNS", "DESCRIPTION"]

DESCRIPTION = """\
Export cohorts and sessions for SIEM and data-lake ingestion.

  export FAILOPEN_RAI_BASE_URL=https://api.vendor.example
  export FAILOPEN_RAI_CLIENT_ID=... FAILOPEN_RAI_CLIENT_SECRET=...  # never on the command line
  failopen rai sessions --from 2024-05-01T00:00:00Z --to 2024-05-08T00:00:00Z \\
      --public-key pk_live_1 --format jsonl --out sessions.jsonl

Verbs: cohorts, cohort COHORT_ID, cohort-sessions COHORT_ID, sessions, and sync
(incremental and resumable: failopen rai sync --help).

JSONL writes each record exactly as received, unknown fields included. CSV has
one column per spec field, in the spec's order, then extra_fields: a JSON object
of any fields the spec does not list (empty when none). Arrays and objects are
JSON in their cell, booleans true/false, null an empty cell. A text cell that
starts with =, +, -, @, tab or carriage return gets a leading apostrophe (')
so that spreadsheets show it as text instead of running it as a formula.
CSV shown on a terminal has control and bidi characters escaped in every cell
(\\x1b, \\u202e), so a record cannot rewrite the screen; --out and pipes get the
text exactly.

--out is written to a hidden temporary file beside it and renamed into place
only when the export is complete, so an interrupted or failed export leaves no
file that looks whole (the temporary file is removed on errors, Ctrl-C and
SIGTERM). Progress goes to stderr, only when stderr is a terminal.

A listing the service never ends is cut short: 100 empty pages in a row that
still carry a next_page_token, or --max-pages pages in one window, end the run
with exit 5 (service_error).

Exit codes: 0 done, 1 the output could not be written, 2 bad arguments (or a 400
from the service), 3 unauthorized or forbidden, 4 not found, 5 server or network
failure after the retries (an empty or cut-off answer is retried like a network
error), or an answer that breaks the spec, 143 ended by SIGTERM. Failures print
the error code and message, the request_id when the service answered, and the
host:port for a network error; never the secret or a token. --json then prints
a one-line summary (records, files, seconds, exit_code): to stdout with --out,
else to stderr.

The CSV formula escaping is for spreadsheets; for data lakes use JSONL, and read
id columns of a CSV as text (a ticket id 00123 is written as 00123).
"""

# --- running a verb ----------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> Client:
    base_url, client_id, client_secret = service_settings(args)
    limit_malloc_arenas()  # before any thread starts
    # Prefetch in every mode: each list call (one per window or cohort with --parallel N) has
    # one request in flight at a time, sent as soon as the answer before it is in; and never
    # more than N requests at once, though N + 1 windows may be under way (one finishing).
    return Client(base_url, client_id, client_secret, timeout=args.timeout,
                  max_attempts=args.max_attempts,
                  max_pages=getattr(args, "max_pages", DEFAULT_MAX_PAGES),
                  max_in_flight=getattr(args, "parallel", None))  # fmt: skip


Batch: TypeAlias = "list[dict[str, Any]] | Page[Any] | Encoded"
Fetch = Callable[[Client, argparse.Namespace], Iterable[Batch]]


def _export(args: argparse.Namespace, columns: tuple[str, ...], fetch: Fetch) -> int:
    """Run the export; with ``--json``, then its one-line summary, as ``rai sync`` prints its
    own (to stdout, or to stderr when the records go to stdout)."""
    progress = Progress(sys.stderr)
    started = time.monotonic()
    try:
        code = _export_run(args, columns, fetch, progress)
    except Terminated as exc:
        report(f"failopen rai {args.rai_verb}", "terminated", "SIGTERM: stopped; nothing "
               "was written to --out" if args.out not in (None, "-") else "SIGTERM: stopped",
               None)  # fmt: skip
        code = int(exc.code) if isinstance(exc.code, int) else 143
    if args.json:
        to_file = args.out not in (None, "-")
        written = not to_file or code == EXIT_OK  # a failed --out is never written
        outcome = {"records": progress.records if written else 0,
                   "files": [args.out] if to_file and written else [],
                   "seconds": round(time.monotonic() - started, 3), "exit_code": code}  # fmt: skip
        print(json.dumps(outcome, separators=(",", ":")),
              file=sys.stdout if to_file else sys.stderr, flush=True)  # fmt: skip
    return code


def _export_run(args: argparse.Namespace, columns: tuple[str, ...], fetch: Fetch,
                progress: Progress) -> int:  # fmt: skip
    prog = f"failopen rai {args.rai_verb}"
    target: AtomicFile | None = None
    try:
        with sigterm_raises():
            client = _client(args)
            with client:
                if args.out not in (None, "-"):
                    target = AtomicFile(args.out)
                out = target.file if target is not None else sys.stdout.buffer
                # CSV on a terminal is a table to read: cells shown printable (JSONL stays
                # exact: it is the records as received, like --json elsewhere).
                args.terminal = target is None and _is_terminal(sys.stdout)
                writer = (CsvRows(out, columns, terminal=args.terminal) if args.format == "csv"
                          else JsonLines(out))  # fmt: skip
                args.spool_dir = None if target is None else os.path.dirname(target.path)
                batches = fetch(client, args)
                try:
                    for records in batches:
                        if target is not None:
                            target.written()
                        if isinstance(records, Encoded):  # --parallel: already encoded
                            out.write(records.data)
                            if records.pages:
                                progress.add(records.records, records.pages)
                            continue
                        if isinstance(records, Page):
                            writer.write(records.items, records.lines)
                            progress.add(len(records.items))
                            continue
                        writer.write(records)
                        progress.add(len(records))
                finally:
                    _close(batches)  # on failure too: stop the prefetch of a page nobody reads
                out.flush()
                if target is not None:
                    target.commit()
                    target = None
        return EXIT_OK
    except UsageError as exc:
        report(prog, "invalid_argument", str(exc), None)
        return EXIT_USAGE
    except RaiError as exc:
        exit_code, fallback = exit_status(exc)
        message = exc.message
        keys = getattr(args, "public_keys", None) or []
        if exc.code == "forbidden_public_key" and len(keys) > 1:
            # One request carries every key and the spec's answer names none of them.
            message += (f" (one or more of {', '.join(keys)}; `failopen rai sync` names "
                        "each refused key and exports the others)")  # fmt: skip
        report(prog, exc.code or fallback, message, exc.request_id, exc.status_code)
        return exit_code
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, like other Unix filters.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OUTPUT
    except OSError as exc:
        report(prog, "output_error", f"{exc.strerror or exc} ({exc.filename or 'stdout'})", None)
        return EXIT_OUTPUT
    finally:
        progress.finish()
        if target is not None:
            target.discard()


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except (OSError, ValueError):  # closed or detached
        return False


def _close(iterable: object) -> None:
    close = getattr(iterable, "close", None)
    if close is not None:
        close()


def _records(
    pages: Generator[Page[dict[str, Any]], None, None],
) -> Iterator[Page[dict[str, Any]]]:
    try:
        yield from pages
    finally:
        pages.close()


# The client checks its arguments too, but its messages name its parameters (start, end, ...);
# checked here first, a bad argument is reported by the flag the user typed.


def _window_args(args: argparse.Namespace) -> tuple[datetime, datetime, list[str]]:
    start, end = check_window(args.start, args.end, names=("--from", "--to"))
    public_keys = check_public_keys(args.public_keys, name="--public-key")
    check_id("--cohort-id", args.cohort_id)
    return start, end, public_keys


def _cohort_arg(args: argparse.Namespace) -> str:
    check_cohort_id(args.cohort, name="COHORT_ID")
    return str(args.cohort)


def _encoder(args: argparse.Namespace, columns: tuple[str, ...]) -> Encode:
    def encode(records: list[dict[str, Any]], lines: list[str] | None) -> bytes:
        if lines is not None and args.format != "csv":
            # One copy of the text (and one of its bytes): a page is 0.65 MB.
            return "\n".join([*lines, ""]).encode() if lines else b""
        buffer = io.BytesIO()
        if args.format == "csv":
            CsvRows(buffer, columns, header=False, terminal=args.terminal).write(records)
        else:
            JsonLines(buffer).write(records, lines)
        return buffer.getvalue()

    return encode


def _fetch_cohorts(client: Client, args: argparse.Namespace) -> Iterable[Any]:
    start, end, public_keys = _window_args(args)
    if args.parallel > 1:
        def fetch(first: datetime, last: datetime) -> Generator[Any, None, None]:
            return client.export_pages(cohorts_pager(
                first, last, public_keys, cohort_id=args.cohort_id, anomaly_id=args.anomaly_id,
                telltale_id=args.telltale_id, min_session_count=args.min_session_count,
                page_size=args.page_size,
            ), slim=args.format == "jsonl")  # fmt: skip

        return parallel_export("cohorts", start, end, args.parallel, fetch,
                               _encoder(args, COHORT_COLUMNS), args.spool_dir)  # fmt: skip
    return _records(client.export_pages(cohorts_pager(
        start, end, public_keys, cohort_id=args.cohort_id, anomaly_id=args.anomaly_id,
        telltale_id=args.telltale_id, min_session_count=args.min_session_count,
        page_size=args.page_size,
    ), slim=args.format == "jsonl"))  # fmt: skip


def _fetch_cohort(client: Client, args: argparse.Namespace) -> Iterable[list[dict[str, Any]]]:
    return [[client.get_cohort(_cohort_arg(args)).raw]]


def _fetch_cohort_sessions(client: Client, args: argparse.Namespace) -> Iterable[Any]:
    return _records(client.export_pages(
        cohort_sessions_pager(_cohort_arg(args), page_size=args.page_size),
        slim=args.format == "jsonl",
    ))  # fmt: skip


def _fetch_sessions(client: Client, args: argparse.Namespace) -> Iterable[Any]:
    start, end, public_keys = _window_args(args)
    if args.parallel > 1:
        def fetch(first: datetime, last: datetime) -> Generator[Any, None, None]:
            return client.export_pages(sessions_pager(
                first, last, public_keys, cohort_id=args.cohort_id, anomaly_id=args.anomaly_id,
                telltale_id=args.telltale_id, page_size=args.page_size,
            ), slim=args.format == "jsonl")  # fmt: skip

        return parallel_export("sessions", start, end, args.parallel, fetch,
                               _encoder(args, SESSION_COLUMNS), args.spool_dir)  # fmt: skip
    return _records(client.export_pages(sessions_pager(
        start, end, public_keys, cohort_id=args.cohort_id, anomaly_id=args.anomaly_id,
        telltale_id=args.telltale_id, page_size=args.page_size,
    ), slim=args.format == "jsonl"))  # fmt: skip


def _handler(columns: tuple[str, ...], fetch: Fetch) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return _export(args, columns, fetch)

    return run


# --- the parsers -------------------------------------------------------------------------------


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative integer")
    return int(text)


def _common(parser: argparse.ArgumentParser, *, paged: bool) -> None:
    parser.add_argument("--base-url", help=f"service base URL (default: ${ENV_BASE_URL})")
    parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl",
                        help="jsonl: records exactly as received; csv: spec columns + "
                        f"{EXTRA_COLUMN} (default: jsonl)")  # fmt: skip
    parser.add_argument("--out", metavar="FILE",
                        help="write here, atomically (default: stdout)")  # fmt: skip
    if paged:
        parser.add_argument("--page-size", type=page_size_arg, default=DEFAULT_PAGE_SIZE,
                            help=f"records per request, 1-1000 (default: {DEFAULT_PAGE_SIZE})")
        max_pages_flag(parser)
    parser.add_argument("--timeout", type=duration_arg, default=30.0,
                        help="time per attempt: 30s, 2m, ... (default: 30s)")  # fmt: skip
    parser.add_argument("--max-attempts", type=int, default=4,
                        help="attempts per request on server or network errors (default: 4)")
    parser.add_argument("--json", action="store_true",
                        help="then a one-line JSON summary: records, files, seconds, exit_code "
                        "(stdout with --out FILE, else stderr)")  # fmt: skip


def _window(parser: argparse.ArgumentParser, *, min_session_count: bool) -> None:
    parser.add_argument("--from", dest="start", required=True, metavar="RFC3339",
                        help="window start, e.g. 2024-05-01T00:00:00Z")  # fmt: skip
    parser.add_argument("--to", dest="end", required=True, metavar="RFC3339",
                        help="window end; longer than 30 days is split into several requests")
    parser.add_argument("--public-key", dest="public_keys", action="append", required=True,
                        metavar="KEY", help="public key; repeat for several")  # fmt: skip
    parser.add_argument("--cohort-id", help="only this cohort")
    parser.add_argument("--anomaly-id", type=_count, help="only this anomaly")
    parser.add_argument("--telltale-id", type=_count, help="only this telltale")
    if min_session_count:
        parser.add_argument("--min-session-count", type=_count, metavar="N",
                            help="skip cohorts with fewer sessions")  # fmt: skip
    parser.add_argument("--parallel", type=parallel_arg, default=4, metavar="N",
                        help="disjoint sub-windows fetched at once, 1-32; the output order "
                        "does not depend on it (default: 4)")  # fmt: skip


def register_rai(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``failopen rai cohorts|cohort|cohort-sessions|sessions``."""
    rai = subparsers.add_parser(
        "rai", help="export session intelligence (cohorts, sessions) as JSONL or CSV",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    verbs = rai.add_subparsers(dest="rai_verb", metavar="VERB", required=True)

    cohorts = verbs.add_parser("cohorts", help="list cohorts of a time window")
    _window(cohorts, min_session_count=True)
    _common(cohorts, paged=True)
    cohorts.set_defaults(func=_handler(COHORT_COLUMNS, _fetch_cohorts))

    cohort = verbs.add_parser("cohort", help="one cohort by id")
    cohort.add_argument("cohort", metavar="COHORT_ID")
    _common(cohort, paged=False)
    cohort.set_defaults(func=_handler(COHORT_COLUMNS, _fetch_cohort))

    cohort_sessions = verbs.add_parser("cohort-sessions", help="the sessions of one cohort")
    cohort_sessions.add_argument("cohort", metavar="COHORT_ID")
    _common(cohort_sessions, paged=True)
    cohort_sessions.set_defaults(func=_handler(SESSION_COLUMNS, _fetch_cohort_sessions))

    sessions = verbs.add_parser("sessions", help="sessions across cohorts of a time window")
    _window(sessions, min_session_count=False)
    _common(sessions, paged=True)
    sessions.set_defaults(func=_handler(SESSION_COLUMNS, _fetch_sessions))
    register_sync(verbs, _client)
