"""The ``failopen`` command's log lines, shown on a terminal as text, never obeyed.

A log record may quote outside text: a status page's component names in a poll error, a reason
read from the store. The command's stderr handler escapes what a terminal would act on (see
:func:`failopen._internal.terminal.printable`); handlers an application configures are left alone.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from failopen._internal.terminal import printable
from failopen.engine.flag_state import rfc3339

__all__ = ["TerminalLogFormatter", "log_to_terminal"]


def _lines(text: str) -> str:
    # A traceback's own line breaks stay; what each line quotes is escaped.
    return "\n".join(printable(line) for line in text.split("\n"))


class TerminalLogFormatter(logging.Formatter):
    """A formatter whose every record is one line of text (a traceback keeps its lines)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """RFC 3339 UTC with milliseconds: the format of every time the command prints."""
        return rfc3339(record.created) or ""

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The record's line, with a message's newlines and escapes shown escaped."""
        return printable(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        """The traceback, each of its lines shown as text."""
        return _lines(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        """The stack, each of its lines shown as text."""
        return _lines(super().formatStack(stack_info))


def log_to_terminal(*, verbose: bool) -> None:
    """Log to stderr, text only, at DEBUG with ``verbose`` (else WARNING)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TerminalLogFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # A no-op when logging is already configured (an embedding application, a test runner).
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, handlers=[handler])
