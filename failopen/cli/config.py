"""The Config a ``failopen`` verb works from, and the checks of flags that set Config fields.

A verb checks the settings it uses (``uses``): a bad setting it does not use is named in a
warning and left at its default, so an operator can read the status page or place an override
during an outage whatever else is misconfigured. Errors name what the user typed: the flag
(``--status-url``) when the value came from it, the variable (``FAILOPEN_STATUS_URL``) otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from failopen.config import Config
from failopen.exceptions import ConfigError

__all__ = [
    "STATUS_FIELDS", "STORE_FIELDS", "WATCH_FIELDS", "command_config", "poll_count",
    "positive_float",
]

ConfigFactory = Callable[..., Config]

#: The flag that sets a Config field, for errors that name what the user typed.
_FLAGS = {"status_url": "--status-url", "global_component": "--global-component",
          "poll_interval": "--interval", "store": "--store"}

# The settings each verb uses; any other one that is bad is warned about and left out.
STATUS_FIELDS = frozenset({
    "status_url", "global_component", "indicator_fallback", "status_timeout",
    "status_max_bytes", "bypass_on"})
WATCH_FIELDS = STATUS_FIELDS | {
    "poll_interval", "poll_jitter", "open_after", "close_after", "stale_after", "backoff_max",
    "max_stale_bypass", "store", "store_password", "store_refresh", "redis_prefix",
    "fleet_lease"}
STORE_FIELDS = frozenset({"store", "store_password", "redis_prefix"})


def command_config(args: argparse.Namespace, *, uses: frozenset[str] | None = None,
            **fields: Any) -> Config:
    """The Config for a verb; ``uses``: the fields it reads (a bad other one is only warned).

    ``args.config_factory(**overrides)`` builds it (``Config.from_env``, or Django's settings).
    """
    overrides = {name: value for name, value in fields.items() if value is not None}
    factory: ConfigFactory = getattr(args, "config_factory", Config.from_env)
    try:
        try:
            return factory(**overrides)
        except ConfigError as exc:
            if uses is None:
                raise
            # Every field this verb does not use at its default: what is left is what it needs.
            unused = {spec.name: spec.default for spec in dataclasses.fields(Config)
                      if spec.name not in uses and spec.name not in overrides}
            config = factory(**unused, **overrides)  # a bad setting it uses raises here
            print(f"failopen {args.command}: warning: ignored a setting this command does not "
                  f"use: {exc}", file=sys.stderr)
            return config
    except ConfigError as exc:
        raise _named_as_typed(exc, overrides) from None


def _named_as_typed(exc: ConfigError, overrides: dict[str, Any]) -> ConfigError:
    """The error, naming the flag instead of the variable when the value came from a flag."""
    message = str(exc)
    for name, flag in _FLAGS.items():
        variable = f"FAILOPEN_{name.upper()}:"
        if name in overrides and message.startswith(variable):
            return ConfigError(flag + ":" + message[len(variable):])
    return exc


def positive_float(text: str) -> float:
    """argparse type: seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def poll_count(text: str) -> int:
    """argparse type: ``--count``, at least 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: must be at least 1 (leave --count out to watch until Ctrl-C)")
    return int(text)
