"""``failopen rai``: export cohorts and sessions for SIEM and data-lake ingestion.

    export FAILOPEN_RAI_BASE_URL=https://api.vendor.example
    export FAILOPEN_RAI_CLIENT_ID=... FAILOPEN_RAI_CLIENT_SECRET=...   # never on the command line
    failopen rai sessions --from 2024-05-01T00:00:00Z --to 2024-05-08T00:00:00Z \\
        --public-key pk_live_1 --format jsonl --out sessions.jsonl

Verbs: ``cohorts``, ``cohort COHORT_ID``, ``cohort-sessions COHORT_ID``, ``sessions``. JSONL writes
each record exactly as received, unknown fields included. CSV has one column per spec field, in
the spec's order (:data:`COHORT_COLUMNS`, :data:`SESSION_COLUMNS`), then ``extra_fields``: a JSON
object of any fields the spec does not list (empty when none). Arrays and objects are JSON in their
cell, booleans ``true``/``false``, null an empty cell. ``--out`` is written to a hidden temporary
file beside it and renamed into place only when the export is complete, so an interrupted or failed
export leaves no file that looks whole (the temporary file is removed on errors, Ctrl-C and
SIGTERM). Progress goes to stderr, only when stderr is a terminal.

Exit codes: 0 done, 1 the output could not be written, 2 bad arguments (or a 400 from the service),
3 unauthorized or forbidden, 4 not found, 5 server or network failure after the retries. Failures
print the error code, message and request_id; never the secret or a token.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import IO, Any, TextIO

from failopen.rai import (
    BadRequest,
    Client,
    Forbidden,
    NotFound,
    RaiError,
    RaiTransportError,
    RaiValidationError,
    Unauthorized,
)

__all__ = ["register_rai", "register_emulate_rai", "COHORT_COLUMNS", "SESSION_COLUMNS"]

ENV_BASE_URL = "FAILOPEN_RAI_BASE_URL"
ENV_CLIENT_ID = "FAILOPEN_RAI_CLIENT_ID"
ENV_CLIENT_SECRET = "FAILOPEN_RAI_CLIENT_SECRET"
EXIT_OK, EXIT_OUTPUT, EXIT_USAGE, EXIT_AUTH, EXIT_NOT_FOUND, EXIT_FAILURE = 0, 1, 2, 3, 4, 5
DEFAULT_PAGE_SIZE = 1000  # the spec's maximum: fewest round trips for an export

COHORT_COLUMNS = (
    "cohort_id", "public_key", "customer_name", "cohort_window_start", "cohort_window_end",
    "created_at", "session_count", "tagged_session_count", "anomaly_ids", "telltale_ids",
    "telltale_names", "telltale_owner_categories", "ticketing_ticket_id", "ticketing_ticket_url",
    "schema_version",
)  # fmt: skip
SESSION_COLUMNS = (
    "session_id", "session_created", "public_key", "cohort_id", "anomaly_id",
    "original_ticket_id", "attack_label", "client_theme", "render_type", "risk_score",
    "risk_band", "risk_category", "custom_risk_score", "suspicion_flags", "tagged_by_telltale",
    "telltale_names", "verify", "schema_version",
)  # fmt: skip
EXTRA_COLUMN = "extra_fields"

# One reusable encoder: json.dumps with non-default options builds a new encoder on every call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)


class _UsageError(Exception):
    """A bad argument found by the CLI itself (exit 2)."""


# --- output ------------------------------------------------------------------------------------


class _JsonLines:
    """Each record as received, one per line."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out

    def write(self, records: Iterable[dict[str, Any]]) -> None:
        encode = _ENCODER.encode
        lines = [encode(record) for record in records]
        if lines:
            lines.append("")
            self._out.write("\n".join(lines).encode())


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return _ENCODER.encode(value)


class _Csv:
    """A header row, then one row per record in a fixed column order."""

    def __init__(self, out: IO[bytes], columns: tuple[str, ...]) -> None:
        self._out = out
        self._columns = columns
        self._known = frozenset(columns)
        self._write_rows([[*columns, EXTRA_COLUMN]])

    def _write_rows(self, rows: list[list[str]]) -> None:
        buffer = io.StringIO()
        csv.writer(buffer).writerows(rows)
        self._out.write(buffer.getvalue().encode())

    def write(self, records: Iterable[dict[str, Any]]) -> None:
        rows = []
        for record in records:
            row = [_cell(record.get(name)) for name in self._columns]
            extra = {k: v for k, v in record.items() if k not in self._known}
            row.append(_ENCODER.encode(extra) if extra else "")
            rows.append(row)
        if rows:
            self._write_rows(rows)


class _AtomicFile:
    """A file that appears at ``path`` only when complete (temporary file + ``os.replace``)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            raise _UsageError(f"--out: the directory {folder!r} does not exist")
        if os.path.isdir(self.path):
            raise _UsageError(f"--out: {path!r} is a directory")
        fd, self._temp = tempfile.mkstemp(
            prefix=f".{os.path.basename(self.path)}.", suffix=".part", dir=folder
        )
        self.file: IO[bytes] = os.fdopen(fd, "wb", buffering=1 << 20)

    def commit(self) -> None:
        """Flush to disk and move into place, keeping an existing file's permissions."""
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        try:
            mode = os.stat(self.path).st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(self._temp, mode)
        os.replace(self._temp, self.path)

    def discard(self) -> None:
        """Remove the incomplete temporary file."""
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._temp)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so cleanup runs, as it does for Ctrl-C."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Progress:
    """Records, pages and rate on one self-rewriting stderr line (terminals only)."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._enabled = stream.isatty()
        self._clock = clock
        self._started = self._shown = clock()
        self.records = self.pages = 0

    def add(self, records: int, pages: int = 1) -> None:
        self.records += records
        self.pages += pages
        if self._enabled and self._clock() - self._shown >= 0.2:
            self._show("\r")

    def _show(self, lead: str, end: str = "") -> None:
        self._shown = self._clock()
        rate = self.records / max(self._shown - self._started, 1e-9)
        self._stream.write(
            f"{lead}{self.records:,} records, {self.pages:,} pages, {rate:,.0f} records/s{end}"
        )
        self._stream.flush()

    def finish(self) -> None:
        if self._enabled and self.pages:
            self._show("\r", "\n")


# --- running a verb ----------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> Client:
    base_url = args.base_url or os.environ.get(ENV_BASE_URL, "")
    if not base_url:
        raise _UsageError(f"give --base-url or set {ENV_BASE_URL}")
    client_id = os.environ.get(ENV_CLIENT_ID, "")
    client_secret = os.environ.get(ENV_CLIENT_SECRET, "")
    given = ((ENV_CLIENT_ID, client_id), (ENV_CLIENT_SECRET, client_secret))
    missing = [name for name, value in given if not value]
    if missing:
        raise _UsageError(f"set {' and '.join(missing)} (credentials are read only from the "
                          "environment, never from the command line)")  # fmt: skip
    return Client(base_url, client_id, client_secret, timeout=args.timeout,
                  max_attempts=args.max_attempts)  # fmt: skip


def _report(prog: str, code: str, message: str, request_id: str | None,
            status: int | None = None) -> None:  # fmt: skip
    where = f" (HTTP {status})" if status is not None else ""
    print(f"{prog}: {code}{where}: {message} [request_id: {request_id or 'none'}]",
          file=sys.stderr)  # fmt: skip


def _exit_code(exc: RaiError) -> tuple[int, str]:
    """The exit code, and the code to print when the service gave none."""
    if isinstance(exc, (RaiValidationError, BadRequest)):
        return EXIT_USAGE, "invalid_argument"
    if isinstance(exc, Unauthorized):
        return EXIT_AUTH, "unauthorized"
    if isinstance(exc, Forbidden):
        return EXIT_AUTH, "forbidden"
    if isinstance(exc, NotFound):
        return EXIT_NOT_FOUND, "not_found"
    if isinstance(exc, RaiTransportError):
        return EXIT_FAILURE, "network_error"
    return EXIT_FAILURE, "service_error"


Fetch = Callable[[Client, argparse.Namespace], Iterable[list[dict[str, Any]]]]


def _export(args: argparse.Namespace, columns: tuple[str, ...], fetch: Fetch) -> int:
    prog = f"failopen rai {args.rai_verb}"
    target: _AtomicFile | None = None
    progress = _Progress(sys.stderr)
    try:
        with _sigterm_raises():
            client = _client(args)
            with client:
                if args.out not in (None, "-"):
                    target = _AtomicFile(args.out)
                out = target.file if target is not None else sys.stdout.buffer
                writer = _Csv(out, columns) if args.format == "csv" else _JsonLines(out)
                batches = fetch(client, args)
                try:
                    for records in batches:
                        writer.write(records)
                        progress.add(len(records))
                finally:
                    _close(batches)  # on failure too: stop the prefetch of a page nobody reads
                out.flush()
                if target is not None:
                    target.commit()
                    target = None
        return EXIT_OK
    except _UsageError as exc:
        _report(prog, "invalid_argument", str(exc), None)
        return EXIT_USAGE
    except RaiError as exc:
        exit_code, fallback = _exit_code(exc)
        _report(prog, exc.code or fallback, exc.message, exc.request_id, exc.status_code)
        return exit_code
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, like other Unix filters.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OUTPUT
    except OSError as exc:
        _report(prog, "output_error", f"{exc.strerror or exc} ({exc.filename or 'stdout'})", None)
        return EXIT_OUTPUT
    finally:
        progress.finish()
        if target is not None:
            target.discard()


def _close(iterable: object) -> None:
    close = getattr(iterable, "close", None)
    if close is not None:
        close()


def _raw_pages(pages: Iterator[Any]) -> Iterator[list[dict[str, Any]]]:
    try:
        for page in pages:
            yield [item.raw for item in page.items]
    finally:
        _close(pages)


def _fetch_cohorts(client: Client, args: argparse.Namespace) -> Iterable[list[dict[str, Any]]]:
    return _raw_pages(client.iter_cohort_pages(
        args.start, args.end, args.public_keys, cohort_id=args.cohort_id,
        anomaly_id=args.anomaly_id, telltale_id=args.telltale_id,
        min_session_count=args.min_session_count, page_size=args.page_size,
    ))  # fmt: skip


def _fetch_cohort(client: Client, args: argparse.Namespace) -> Iterable[list[dict[str, Any]]]:
    return [[client.get_cohort(args.cohort).raw]]


def _fetch_cohort_sessions(
    client: Client, args: argparse.Namespace
) -> Iterable[list[dict[str, Any]]]:
    return _raw_pages(client.iter_cohort_session_pages(args.cohort, page_size=args.page_size))


def _fetch_sessions(client: Client, args: argparse.Namespace) -> Iterable[list[dict[str, Any]]]:
    return _raw_pages(client.iter_session_pages(
        args.start, args.end, args.public_keys, cohort_id=args.cohort_id,
        anomaly_id=args.anomaly_id, telltale_id=args.telltale_id, page_size=args.page_size,
    ))  # fmt: skip


def _handler(columns: tuple[str, ...], fetch: Fetch) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return _export(args, columns, fetch)

    return run


# --- the parsers -------------------------------------------------------------------------------


def _page_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer from 1 to 1000")
    return value


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
        parser.add_argument("--page-size", type=_page_size, default=DEFAULT_PAGE_SIZE,
                            help=f"records per request, 1-1000 (default: {DEFAULT_PAGE_SIZE})")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds per attempt (default: 30)")  # fmt: skip
    parser.add_argument("--max-attempts", type=int, default=4,
                        help="attempts per request on server or network errors (default: 4)")


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


def register_rai(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``failopen rai cohorts|cohort|cohort-sessions|sessions``."""
    rai = subparsers.add_parser(
        "rai", help="export session intelligence (cohorts, sessions) as JSONL or CSV",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
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


# --- failopen emulate rai ----------------------------------------------------------------------


def _sessions_range(text: str) -> int | tuple[int, int]:
    low, _, high = text.partition("-")
    if not low.isdigit() or (high and not high.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not N or LOW-HIGH")
    return (int(low), int(high)) if high else int(low)


def _serve_emulator(args: argparse.Namespace) -> int:
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
    return EXIT_OK


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
    emulate.set_defaults(func=_serve_emulator)
