"""What every ``failopen`` sub-command's ``--help`` says: a one-line description, its exit codes
and an example, in one table so the commands read alike (``tests/test_cli_conventions.py``
walks every sub-parser and checks each has all three).

:func:`finish` also gives every sub-parser ``-v/--verbose``, so ``failopen watch -v`` works as
well as ``failopen -v watch``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

__all__ = ["HELP", "finish", "walk"]

_STATUS_CODES = "0 no outage, 1 outage (would bypass), 2 unknown or unreadable status, or bad " \
                "arguments"
_SERVE_CODES = "0 stopped with Ctrl-C or SIGTERM, 2 bad arguments or the port is taken"
_RAI_CODES = ("0 done, 1 the output could not be written, 2 bad arguments (or a 400), 3 "
              "unauthorized or forbidden,\n4 not found, 5 server or network failure after the "
              "retries")

#: (description, exit codes, example) by command path; the description is kept where the
#: sub-parser already has its own.
HELP: dict[tuple[str, ...], tuple[str, str, str]] = {
    ("status",): (
        "Read the status page once and say whether failopen would bypass.",
        _STATUS_CODES,
        "failopen status --status-url https://status.vendor.example\n"
        "  failopen status --components   # find the global component's id"),
    ("watch",): (
        "Run the status watcher in the foreground, one line per poll, until Ctrl-C.",
        "0 stopped (Ctrl-C, SIGTERM or --count reached), 2 bad arguments or settings",
        "failopen watch --poll-interval 10s --count 3 --json"),
    ("override",): (
        "Force enforcement off or on for the whole site, or hand back to the status page.",
        "0 done, 2 bad arguments, a memory: store, or a store that cannot be used",
        "failopen override off --ttl 30m --reason 'vendor incident #123' "
        "--store redis://cache:6379/0\n  failopen override auto --store redis://cache:6379/0"),
    ("fleet",): (
        "Show who polls for the fleet, the last reading, the override and the processes seen.",
        "0 the store answered, 2 it could not be read or bad arguments",
        "failopen fleet --store redis://cache:6379/0 --json"),
    ("audit",): (
        "Review the audit file (FAILOPEN_AUDIT_FILE) after an outage.",
        "0 done, 2 a file cannot be read or bad arguments",
        "failopen audit windows /var/log/failopen/audit.jsonl"),
    ("audit", "windows"): (
        "Print the bypass windows of audit files: start, end, reason, requests, clients.",
        "0 read (malformed lines are skipped and counted on stderr), 2 a file cannot be read "
        "or bad arguments",
        "failopen audit windows /var/log/failopen/audit.jsonl\n"
        "  failopen audit windows --json web1/audit.jsonl web2/audit.jsonl"),
    ("check",): (
        "Preflight for deploys and CI: settings, status page, verify key, store, fleet, policies.",
        "0 every check passed (warnings allowed), 1 a problem (with --strict, a warning too),\n"
        "2 bad arguments or an unexpected error",
        "failopen check\n  failopen check --json --strict   # in CI: warnings fail too"),
    ("demo",): (
        "Play an outage against the embedded fakes, scene by scene, and exit.",
        "0 every scene behaved as it should, 1 a scene did not, 2 bad arguments",
        "failopen demo --step 0.2\n"
        "  failopen demo --vendor recaptcha   # no status page: the verify probe alone"),
    ("emulate",): (
        "Serve one of the test kit's fakes of the vendor on 127.0.0.1 until Ctrl-C.",
        _SERVE_CODES,
        "failopen emulate status --global major_outage --port 8401"),
    ("emulate", "status"): (
        "Serve a fake status page (interface B) on 127.0.0.1.",
        _SERVE_CODES,
        "failopen emulate status --port 8401 --region us-east-1=partial_outage"),
    ("emulate", "verify"): (
        "Serve a fake verify endpoint on 127.0.0.1.",
        _SERVE_CODES,
        "failopen emulate verify --port 8402 --private-key test-private-key"),
    ("emulate", "vendor"): (
        "Serve the vendor's client script (api.js) for browsers on 127.0.0.1.",
        _SERVE_CODES,
        "failopen emulate vendor --port 8404 --mode error_then_ok:2"),
    ("emulate", "token"): (
        "Print fresh tokens that the running fake verify API accepts once each.",
        "0 printed, 2 bad arguments",
        "failopen emulate token --count 2 --private-key test-private-key"),
    ("emulate", "rai"): (
        "Serve the session-intelligence API emulator on 127.0.0.1 until Ctrl-C.",
        _SERVE_CODES,
        "failopen emulate rai --port 8403 --cohorts 5 --seed 1"),
    ("rai",): (
        "Export cohorts and sessions for SIEM and data-lake ingestion.",
        _RAI_CODES,
        "failopen rai sessions --from 2024-05-01T00:00:00Z --to 2024-05-08T00:00:00Z "
        "--public-key pk_live_1 --out sessions.jsonl"),
    ("rai", "cohorts"): (
        "List the cohorts of a time window.",
        _RAI_CODES,
        "failopen rai cohorts --from 2024-05-01T00:00:00Z --to 2024-05-02T00:00:00Z "
        "--public-key pk_live_1"),
    ("rai", "cohort"): (
        "Fetch one cohort by id.",
        _RAI_CODES,
        "failopen rai cohort 3f6c2a1e-0000-4000-8000-000000000001"),
    ("rai", "cohort-sessions"): (
        "Export the sessions of one cohort.",
        _RAI_CODES,
        "failopen rai cohort-sessions 3f6c2a1e-0000-4000-8000-000000000001 --format csv "
        "--out cohort.csv"),
    ("rai", "sessions"): (
        "Export the sessions of every cohort in a time window (e.g. a bypass window).",
        _RAI_CODES,
        "failopen rai sessions --from 2024-05-01T10:00:00Z --to 2024-05-01T11:00:00Z "
        "--public-key pk_live_1 --out outage.jsonl"),
    ("rai", "sync"): (
        "Sync new cohorts and sessions to day files, incrementally and resumably.",
        "0 done, 1 the output, state or lock file could not be used, 2 bad arguments (or a "
        "400),\n3 unauthorized or forbidden, 4 not found, 5 server or network failure after "
        "the retries",
        "failopen rai sync --public-key pk_live_1 --state sync.json --out-dir exports/ "
        "--since 2024-05-01T00:00:00Z"),
}


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
         ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every sub-parser under ``parser`` with its command path, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from walk(sub, (*path, name))


def finish(parser: argparse.ArgumentParser) -> None:
    """Give every sub-parser its description, exit codes and example, and ``-v``."""
    for path, sub in walk(parser):
        known = HELP.get(path)
        if known is not None:
            description, codes, example = known
            if not sub.description:
                sub.description = description
            if not sub.epilog:
                # A description that already lists the exit codes (rai's) is not repeated.
                listed = "Exit codes" in (sub.description or "")
                sub.epilog = ("" if listed else f"Exit codes: {codes}\n\n") + (
                    f"Example:\n  {example}\n")
            sub.formatter_class = argparse.RawDescriptionHelpFormatter
        if not any("-v" in action.option_strings for action in sub._actions):
            # SUPPRESS: absent after the verb, it leaves the top level's value alone.
            sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                             help="log at DEBUG (also before the verb)")
