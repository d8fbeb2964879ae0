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

from failopen._internal.durations import duration_arg, duration_or_zero_arg
from failopen.config import Config
from failopen.exceptions import ConfigError
from failopen.fallback.second_vendor import ALTCHA

__all__ = [
    "OUTAGE_FIELDS", "OUTAGE_KEYS", "STATUS_FIELDS", "STORE_FIELDS", "WATCH_FIELDS",
    "command_config", "config_using", "duration_or_zero", "poll_count", "positive_float",
    "watch_config",
]

ConfigFactory = Callable[..., Config]

#: The flag that sets a Config field, for errors that name what the user typed.
_FLAGS = {"status_url": "--status-url", "global_component": "--global-component",
          "poll_interval": "--poll-interval", "store": "--store"}

# The settings each verb uses; any other one that is bad is warned about and left out.
STATUS_FIELDS = frozenset({
    "status_url", "global_component", "indicator_fallback", "status_timeout",
    "status_max_bytes", "bypass_on", "vendor", "evidence"})
WATCH_FIELDS = STATUS_FIELDS | {
    "poll_interval", "poll_jitter", "open_after", "close_after", "stale_after", "backoff_max",
    "max_stale_bypass", "store", "store_password", "store_refresh", "redis_prefix",
    "fleet_lease"}
STORE_FIELDS = frozenset({"store", "store_password", "redis_prefix"})
# What ``failopen watch`` reports of the outage policies (issue 20), with the settings they are
# checked against: a route must be protected, and a fallback route needs the secret.
OUTAGE_FIELDS = frozenset({
    "outage_policy", "outage_policy_routes", "outage_rate", "protected_paths",
    "protected_views", "protected_by_fields", "fallback_secret", "vendor", "token_field",
    "fallback_vendor", "fallback_private_key", "fallback_public_key", "fallback_verify_url",
    "fallback_vendor_url"})
#: ``failopen watch --json``'s outage keys (a contract): what protected routes do while
#: enforcement is off, as the settings say.
#: ``fallback_challenge`` (issue 29): what a fallback route asks for, ``altcha`` or the second
#: vendor's name.
OUTAGE_KEYS = ("outage_policy", "outage_policy_routes", "outage_rate", "fallback_challenge")


def command_config(args: argparse.Namespace, *, uses: frozenset[str] | None = None,
            **fields: Any) -> Config:
    """The Config for a verb; ``uses``: the fields it reads (a bad other one is only warned).

    ``args.config_factory(**overrides)`` builds it (``Config.from_env``, or Django's settings).
    """
    config, ignored = _built(args, uses, fields)
    if ignored is not None:
        _warn_ignored(args, ignored)
    return config


def watch_config(args: argparse.Namespace, *, outage: bool,
                 **fields: Any) -> tuple[Config, dict[str, Any]]:
    """``failopen watch``'s Config (as :func:`command_config` with :data:`WATCH_FIELDS`) and,
    with ``outage``, what protected routes do while enforcement is off, as the settings say:
    :data:`OUTAGE_KEYS`, ``outage_policy_routes`` being the routes with a policy of their own
    (``FAILOPEN_OUTAGE_POLICY_ROUTES``) as an object.

    A bad setting the outage policies do not need is left out, as every verb does. When they
    cannot be read themselves (a typo, a fallback route without its secret or its extra on this
    host), each key is None, never a guess that could read as ``open``, and one warning says
    why. The secret is never part of the answer.
    """
    config, ignored = _built(args, WATCH_FIELDS, fields)
    shown: dict[str, Any] = {}
    unusable: ConfigError | None = None
    if outage:
        source: Config | None = config if ignored is None else None
        if source is None:
            # Every other field at its default: what is left is what the policies need.
            try:
                source = _factory(args)(**_defaults(WATCH_FIELDS | OUTAGE_FIELDS, fields),
                                        **_overrides(fields))
            except ConfigError as exc:
                unusable = exc
        shown = dict.fromkeys(OUTAGE_KEYS) if source is None else {
            "outage_policy": source.outage_policy,
            "outage_policy_routes": dict(source.outage_policy_routes),
            "outage_rate": source.outage_rate,
            "fallback_challenge": source.fallback_vendor or ALTCHA}
    if ignored is not None and str(ignored) != str(unusable):
        _warn_ignored(args, ignored)
    if unusable is not None:
        print(f"failopen {args.command}: warning: the outage policies are shown as null: "
              f"{unusable}", file=sys.stderr)
    return config, shown


def config_using(factory: ConfigFactory, uses: frozenset[str]) -> Config:
    """The Config with every field but ``uses`` at its default: what is left is what a part
    needs. Raises ConfigError for a bad setting among ``uses``."""
    return factory(**_defaults(uses, {}))


def _factory(args: argparse.Namespace) -> ConfigFactory:
    factory: ConfigFactory = getattr(args, "config_factory", Config.from_env)
    return factory


def _overrides(fields: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


def _defaults(keep: frozenset[str], fields: dict[str, Any]) -> dict[str, Any]:
    """Every Config field but ``keep`` and those given, at its default."""
    given = _overrides(fields)
    return {spec.name: spec.default for spec in dataclasses.fields(Config)
            if spec.name not in keep and spec.name not in given}


def _built(args: argparse.Namespace, uses: frozenset[str] | None,
           fields: dict[str, Any]) -> tuple[Config, ConfigError | None]:
    """The Config, and the error of a setting it left out (not in ``uses``) or None."""
    overrides = _overrides(fields)
    factory = _factory(args)
    try:
        try:
            return factory(**overrides), None
        except ConfigError as exc:
            if uses is None:
                raise
            # Every field this verb does not use at its default: what is left is what it needs.
            return factory(**_defaults(uses, fields), **overrides), exc  # a bad used one raises
    except ConfigError as exc:
        raise _named_as_typed(exc, overrides) from None


def _warn_ignored(args: argparse.Namespace, exc: ConfigError) -> None:
    print(f"failopen {args.command}: warning: ignored a setting this command does not use: "
          f"{exc}", file=sys.stderr)


def _named_as_typed(exc: ConfigError, overrides: dict[str, Any]) -> ConfigError:
    """The error, naming the flag instead of the variable when the value came from a flag."""
    message = str(exc)
    for name, flag in _FLAGS.items():
        variable = f"FAILOPEN_{name.upper()}:"
        if name in overrides and message.startswith(variable):
            return ConfigError(flag + ":" + message[len(variable):])
    return exc


#: argparse types: seconds, also written 500ms, 30s, 5m, 1h or 1d (above 0; 0 or more).
positive_float = duration_arg
duration_or_zero = duration_or_zero_arg


def poll_count(text: str) -> int:
    """argparse type: ``--count``, at least 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: must be at least 1 (leave --count out to watch until Ctrl-C)")
    return int(text)
