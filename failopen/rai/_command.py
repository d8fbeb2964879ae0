"""What every ``failopen rai`` verb shares: environment, exit codes, columns, errors, flags.

Below both ``cli.py`` (the exports) and ``_sync_cli.py`` (``failopen rai sync``), so that neither
imports the other's module for them.
"""

from __future__ import annotations

import argparse
import os
import sys

from failopen._internal.terminal import printable
from failopen.rai._base import DEFAULT_MAX_PAGES
from failopen.rai._output import UsageError
from failopen.rai.exceptions import (
    BadRequest,
    Forbidden,
    NotFound,
    RaiError,
    RaiTransportError,
    RaiValidationError,
    Unauthorized,
)

__all__ = [
    "ENV_BASE_URL", "ENV_CLIENT_ID", "ENV_CLIENT_SECRET", "EXIT_OK", "EXIT_OUTPUT", "EXIT_USAGE",
    "EXIT_AUTH", "EXIT_NOT_FOUND", "EXIT_FAILURE", "DEFAULT_PAGE_SIZE", "COHORT_COLUMNS",
    "SESSION_COLUMNS", "service_settings", "report", "exit_status", "page_size_arg",
    "parallel_arg", "positive_arg", "max_pages_flag",
]  # fmt: skip

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


def service_settings(args: argparse.Namespace) -> tuple[str, str, str]:
    """The base URL (``--base-url`` or the environment), client id and secret (the environment
    only), or UsageError naming what is missing."""
    base_url = args.base_url or os.environ.get(ENV_BASE_URL, "")
    if not base_url:
        raise UsageError(f"give --base-url or set {ENV_BASE_URL}")
    client_id = os.environ.get(ENV_CLIENT_ID, "")
    client_secret = os.environ.get(ENV_CLIENT_SECRET, "")
    given = ((ENV_CLIENT_ID, client_id), (ENV_CLIENT_SECRET, client_secret))
    # Blank is unset, as for every other secret ("" from a template, a stray space).
    missing = [name for name, value in given if not value.strip()]
    if missing:
        raise UsageError(f"set {' and '.join(missing)} (credentials are read only from the "
                          "environment, never from the command line)")  # fmt: skip
    return base_url, client_id, client_secret


def report(prog: str, code: str, message: str, request_id: str | None,
           status: int | None = None) -> None:  # fmt: skip
    """One line on stderr; outside text (the service's code, message, id) shown printable.

    The request id is named only for an answer of the service (its HTTP status is known): an
    error that never reached it (a bad argument, the network) has none to quote.
    """
    where = f" (HTTP {status})" if status is not None else ""
    line = f"{prog}: {printable(code)}{where}: {printable(message)}"
    if status is not None or request_id:
        line += f" [request_id: {printable(request_id or 'none')}]"
    print(line, file=sys.stderr)


def exit_status(exc: RaiError) -> tuple[int, str]:
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


# --- flag types -------------------------------------------------------------------------------


def page_size_arg(text: str) -> int:
    """``--page-size``: 1 to 1000."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer from 1 to 1000")
    return value


def parallel_arg(text: str) -> int:
    """``--parallel``: 1 to 32."""
    if not text.isdigit() or not 1 <= int(text) <= 32:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer from 1 to 32")
    return int(text)


def positive_arg(text: str) -> int:
    """An integer flag of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def max_pages_flag(parser: argparse.ArgumentParser) -> None:
    """``--max-pages``: the bound that ends a listing the service never ends (exit 5)."""
    parser.add_argument("--max-pages", type=positive_arg, default=DEFAULT_MAX_PAGES, metavar="N",
                        help="most pages per window of up to 30 days (or per cohort); a service "
                        "still sending a next page after that fails the run (default: "
                        f"{DEFAULT_MAX_PAGES:,})")  # fmt: skip
