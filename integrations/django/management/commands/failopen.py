"""``python manage.py failopen status|watch|override|fleet|check ...``: the ``failopen``
command, configured from ``settings.FAILOPEN`` (then the ``FAILOPEN_*`` variables) instead of
the environment alone. ``check`` adds a line of Django's own: the protected views the URLconf
holds (:mod:`failopen.integrations.django.preflight`).

Settings are named as the site writes them: ``FAILOPEN['PRIVATE_KEY']`` for a key of the dict,
the variable's name for one from the environment. ``check`` lists every problem of the settings
at once, an unknown key of the dict among them (exit 1), never a traceback.

Options after the verb go to ``failopen``'s own parser, so the verbs, options, output and exit
codes are the same as the ``failopen`` command's. Django's options (``--settings``) go before it.
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"
# mypy: allow-subclassing-any

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from django.core.management.base import BaseCommand

from failopen import cli

from ... import conf
from ...preflight import DJANGO_VIEWS

__all__ = ["Command"]

VERBS = ("status", "watch", "override", "fleet", "check")


class Command(BaseCommand):
    """Check the status page, watch it, override the flag, or run the preflight, with the
    Django settings."""

    help = "failopen status|watch|override|fleet|check (see: manage.py failopen VERB --help)"
    # The status page is not the database: these verbs must work before migrations ran.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("verb", choices=VERBS, help="what to do")
        parser.add_argument("verb_args", nargs=argparse.REMAINDER, metavar="ARGS",
                            help="the failopen command's options for VERB")

    def handle(self, *args: Any, **options: Any) -> None:
        argv = [options["verb"], *options["verb_args"]]
        # failopen writes to sys.stdout/stderr; point those at the command's streams so
        # call_command(stdout=...) captures exactly what the failopen command prints.
        out = getattr(self.stdout, "_out", sys.stdout)
        err = getattr(self.stderr, "_out", sys.stderr)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                # check names every problem, an unknown key among them, in one list.
                factory = conf.known_keys_factory if argv[0] == "check" else conf.config_factory
                code = cli.main(argv, config_factory=factory, extra_checks=(DJANGO_VIEWS,),
                                as_written=conf.as_written)
            except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
                code = exc.code if isinstance(exc.code, int) else 2
        if code:
            # The exit codes mean something to scripts (1: outage, 2: unknown): keep them.
            raise SystemExit(code)
