"""``failopen check``: a preflight for deploys and CI, one line per check, in this order.

===================  =========================================================================
``configuration``    the whole Config, as a server builds it; or each bad setting, a line each
``status_page``      components.json read once: the global component it would watch, its status
``verify_api``       a made-up token sent: key accepted (token invalid), key rejected, unreachable
``fallback_verify_api``  the same for the second vendor (FAILOPEN_FALLBACK_VENDOR), with its keys
``store``            memory (per process), file (rules, override, writable), redis (AUTH, a
                     round trip under the prefix, override)
``fleet_identity``   fleet or standalone, how processes name themselves, page hash, mode
``outage_policies``  default and per-route policies, rate limit, fallback secret (set or not)
===================  =========================================================================

An adapter adds its own lines (Django: ``django_views``, see ``manage.py failopen check``).

When the configuration is invalid, each later check is built from its own settings only (the
others at their defaults), as every verb does: it runs when those are good, says ``skipped``
when the error is among them, and is a problem of its own when another bad setting is. Every
check runs on its own daemon thread and is given up at a deadline (the status time-out, or twice
the verify time-out: a second call may compare a wrong key's answer; plus a second; 5 s for the
store), so the command never hangs. Every secret the settings hold
(and every ``FAILOPEN_*`` secret variable) is replaced by ``***`` in whatever is printed.

Exit codes: 0 every check passed (warnings allowed), 1 a problem (with ``--strict``, a warning
too), 2 bad arguments or an unexpected error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from failopen._internal.terminal import printable
from failopen.cli.config import OUTAGE_FIELDS, STATUS_FIELDS, STORE_FIELDS, config_using
from failopen.cli.preflight import Check, Wiring, check_status_page, check_verify_api
from failopen.cli.preflight_fallback import check_fallback_verify_api
from failopen.cli.preflight_settings import check_configuration, check_outage_policies
from failopen.cli.preflight_store import check_fleet_identity, check_store
from failopen.config import Config
from failopen.exceptions import ConfigError
from failopen.stores import split_password

__all__ = ["EXIT_OK", "EXIT_PROBLEM", "ExtraCheck", "register_check", "run_checks", "summary"]

EXIT_OK, EXIT_PROBLEM = 0, 1
#: An adapter's own lines, given the Config (None when it is invalid). It may also have a
#: ``secrets()`` attribute: values to keep out of the output (its raw settings); and
#: ``judges_protection = True`` when its lines say whether anything is protected.
ExtraCheck = Callable[[Config | None], list[Check]]
#: Seconds a store's check may take (each Redis command gives up after 0.5 s).
STORE_DEADLINE = 5.0
_SLACK = 1.0  # beyond a vendor check's own time-out: thread start, TLS set-up, closing
_MIN_SECRET = 4  # a shorter value would mask ordinary words; Config refuses such secrets anyway
_SECRET_FIELDS = ("private_key", "admin_token", "store_password", "fallback_secret",
                  "fallback_private_key")
_SECRET_VARIABLES = ("FAILOPEN_PRIVATE_KEY", "FAILOPEN_ADMIN_TOKEN", "FAILOPEN_STORE_PASSWORD",
                     "FAILOPEN_FALLBACK_SECRET", "FAILOPEN_FALLBACK_PRIVATE_KEY",
                     "FAILOPEN_RAI_CLIENT_SECRET")

_VERIFY_FIELDS = frozenset({"verify_url", "private_key", "verify_timeout", "require_verified",
                            "protected_paths", "protected_views", "vendor", "public_key",
                            "min_score"})
_FALLBACK_VERIFY_FIELDS = frozenset({
    "fallback_vendor", "fallback_private_key", "fallback_public_key", "fallback_verify_url",
    "fallback_vendor_url", "verify_timeout", "min_score", "vendor", "token_field",
    "fallback_secret"})
_FLEET_FIELDS = STORE_FIELDS | {"status_url", "global_component", "verify_url", "private_key",
                                "evidence", "mode"}
_Run = Callable[[Config, Wiring, Mapping[str, str]], Check]
#: (name, the settings it reads, the check, its deadline in seconds for a Config).
_PARTS: tuple[tuple[str, frozenset[str], _Run, Callable[[Config], float]], ...] = (
    ("status_page", STATUS_FIELDS, lambda c, w, e: check_status_page(c, w),
     lambda c: c.status_timeout + _SLACK),
    ("verify_api", _VERIFY_FIELDS, lambda c, w, e: check_verify_api(c, w),
     lambda c: 2 * c.verify_timeout + _SLACK),
    ("fallback_verify_api", _FALLBACK_VERIFY_FIELDS,
     lambda c, w, e: check_fallback_verify_api(c, w), lambda c: 2 * c.verify_timeout + _SLACK),
    ("store", STORE_FIELDS | {"override_endpoint"}, lambda c, w, e: check_store(c, e),
     lambda c: STORE_DEADLINE),
    ("fleet_identity", _FLEET_FIELDS, lambda c, w, e: check_fleet_identity(c, e),
     lambda c: STORE_DEADLINE),
    ("outage_policies", OUTAGE_FIELDS | STORE_FIELDS | {"trusted_proxies"},
     lambda c, w, e: check_outage_policies(c, e), lambda c: STORE_DEADLINE),
)

_POLICIES_ONLY: _Run = lambda c, w, e: check_outage_policies(c, e, judge_protection=False)  # noqa: E731

logger = logging.getLogger("failopen.check")


class _Running:
    """One check on its own daemon thread, given up at its deadline."""

    def __init__(self, name: str, run: _Run, config: Config, wiring: Wiring,
                 environ: Mapping[str, str], seconds: float) -> None:
        self.name, self.seconds = name, seconds
        self.deadline = time.monotonic() + seconds
        self.check: Check | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(run, config, wiring, environ),
                                       name=f"failopen.check-{name}", daemon=True)
        self.thread.start()

    def _run(self, run: _Run, config: Config, wiring: Wiring,
             environ: Mapping[str, str]) -> None:
        try:
            self.check = run(config, wiring, environ)
        except Exception as exc:  # a line of its own, never the end of the other checks
            self.error = exc

    def result(self) -> Check:
        self.thread.join(max(0.0, self.deadline - time.monotonic()))
        if self.thread.is_alive():
            return Check(self.name, "problem", f"no answer within {self.seconds:g}s")
        if self.error is not None or self.check is None:
            logger.debug("failopen check %s failed", self.name, exc_info=self.error,
                         extra={"event": "failopen.check_error"})
            # The type only: an exception's text may quote what it was given.
            return Check(self.name, "problem",
                         f"unexpected error: {type(self.error).__name__} (run with -v)")
        return self.check


def run_checks(factory: Callable[..., Config], *, wiring: Wiring | None = None,
               environ: Mapping[str, str] | None = None,
               extra: Sequence[ExtraCheck] = ()) -> list[Check]:
    """Every check, in order, secrets masked. ``factory(**overrides)`` builds the Config
    (``Config.from_env``, or an adapter's settings)."""
    wiring = Wiring() if wiring is None else wiring
    environ = os.environ if environ is None else environ
    first, config, errors = check_configuration(factory, environ)
    configs = [] if config is None else [config]
    pending: list[_Running | Check] = []
    # An adapter line that sees protection in the code (Django's @protect) judges "nothing is
    # protected" there; otherwise the settings' line does.
    elsewhere = any(getattr(add, "judges_protection", False) for add in extra)
    for name, uses, run, seconds in _PARTS:
        if elsewhere and name == "outage_policies":
            run = _POLICIES_ONLY
        own = config
        if own is None:
            try:
                own = config_using(factory, uses)
            except ConfigError as exc:
                pending.append(Check(name, "skipped", "needs a setting a configuration line "
                                     "names") if str(exc) in errors
                               else Check(name, "problem", str(exc)))
                continue
            configs.append(own)
        pending.append(_Running(name, run, own, wiring, environ, seconds(own)))
    checks = [*first, *(p if isinstance(p, Check) else p.result() for p in pending)]
    for add in extra:
        checks.extend(add(config))
    hidden = _secrets(configs, environ, extra)
    return [_masked(check, hidden) for check in checks]


def _secrets(configs: Iterable[Config], environ: Mapping[str, str],
             extra: Sequence[ExtraCheck]) -> list[str]:
    """Every secret value this run may have seen, longest first (so none is half-masked)."""
    found: set[str] = set()
    for config in configs:
        found.update(s.reveal() for s in (getattr(config, f) for f in _SECRET_FIELDS) if s)
    found.update(environ.get(name, "") for name in _SECRET_VARIABLES)
    with suppress(ConfigError):  # a URL no store takes: Config says so, and holds no password
        found.add(split_password(environ.get("FAILOPEN_STORE", ""))[1] or "")
    for add in extra:
        more = getattr(add, "secrets", None)
        if more is not None:
            found.update(more())
    variants = {v for s in found if len(s.strip()) >= _MIN_SECRET
                for v in (s, s.strip(), quote(s, safe=""))}
    return sorted(variants, key=len, reverse=True)


def _mask(value: Any, hidden: list[str]) -> Any:
    if isinstance(value, str):
        for secret in hidden:
            value = value.replace(secret, "***")
        return value
    if isinstance(value, Mapping):
        return {key: _mask(item, hidden) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask(item, hidden) for item in value]
    return value


def _masked(check: Check, hidden: list[str]) -> Check:
    return replace(check, detail=_mask(check.detail, hidden), facts=_mask(check.facts, hidden))


def summary(checks: Sequence[Check], *, strict: bool) -> dict[str, Any]:
    """``--json``'s object: ``ok``, ``strict``, ``problems``, ``warnings`` and ``checks``."""
    problems = sum(c.status == "problem" for c in checks)
    warnings = sum(c.status == "warning" for c in checks)
    return {
        "ok": problems == 0 and not (strict and warnings), "strict": strict,
        "problems": problems, "warnings": warnings,
        "checks": [{"name": c.name, "status": c.status, "ok": c.passed(strict=strict),
                    "detail": c.detail, "facts": dict(c.facts)} for c in checks],
    }


@contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """failopen's own log lines off while checking (each line says what they would), unless -v."""
    root = logging.getLogger("failopen")
    level = root.level
    if not verbose:
        root.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        root.setLevel(level)


def _cmd_check(args: argparse.Namespace) -> int:
    with _quiet(args.verbose):
        checks = run_checks(args.config_factory, extra=getattr(args, "extra_checks", ()))
    as_written = getattr(args, "as_written", None)
    if as_written is not None:  # settings named as the adapter's users write them (Django)
        checks = [replace(check, detail=as_written(check.detail)) for check in checks]
    shown = summary(checks, strict=args.strict)
    if args.json:
        print(json.dumps(shown, sort_keys=True), flush=True)
    else:
        for check in checks:
            # Names, reasons and errors may quote a status page or a store: shown as text.
            print(printable(f"{check.status:<8} {check.label}: {check.detail}"))
        counted = [f"{n} {word}{'' if n == 1 else 's'}" for n, word in (
            (shown["problems"], "problem"), (shown["warnings"], "warning")) if n]
        verdict = "passed" if shown["ok"] else "failed"
        print(f"failopen check {verdict}" + (f": {', '.join(counted)}" if counted else "")
              + (" (--strict: warnings fail)" if args.strict and shown["warnings"] else ""),
              flush=True)
    return EXIT_OK if shown["ok"] else EXIT_PROBLEM


def register_check(verbs: Any) -> None:
    """Add ``failopen check`` to the command's verbs."""
    check = verbs.add_parser("check", help="preflight for deploys and CI: settings, status "
                                           "page, verify key, store, fleet, outage policies")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.add_argument("--strict", action="store_true", help="warnings fail the check too")
    check.set_defaults(func=_cmd_check)
