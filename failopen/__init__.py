"""failopen: keep sign-up and log-in working through a bot-protection vendor's outage.

Enforcement is skipped only on evidence: a confirmed outage of the vendor's global status
component, or an operator's explicit override. Adapters live in ``failopen.integrations``
(Django, ASGI); the session-intelligence API client in ``failopen.rai``; fakes for tests in
``failopen.testing``.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from failopen.clock import SYSTEM_CLOCK, Clock, SystemClock
from failopen.config import Config
from failopen.engine.flag import EnforcementFlag, FlagState, Override
from failopen.engine.guard import Decision, Guard, OutageConfirmer
from failopen.engine.watcher import PollResult, StatusWatcher
from failopen.exceptions import (
    ConfigError,
    FailopenError,
    FetchError,
    FetchOverloaded,
    FetchTimeout,
    FetchTransportError,
    GlobalComponentError,
    RedirectRefused,
    ResponseTooLarge,
    StatusError,
    StatusParseError,
    StatusUnavailable,
    StoreError,
    StoreUnavailable,
)
from failopen.providers.status import Component, StatusClient, StatusReport
from failopen.providers.verify import HttpVerifier, Verifier, VerifyOutcome, VerifyResult
from failopen.runtime import FailOpen
from failopen.secret import Secret
from failopen.stores import OverrideStore, open_store

try:
    __version__ = _metadata.version("failopen")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
    __version__ = "0+unknown"

__all__ = [
    "__version__",
    "Clock",
    "Component",
    "Config",
    "ConfigError",
    "Decision",
    "EnforcementFlag",
    "FailOpen",
    "FailopenError",
    "FetchError",
    "FetchOverloaded",
    "FetchTimeout",
    "FetchTransportError",
    "GlobalComponentError",
    "FlagState",
    "Guard",
    "HttpVerifier",
    "OutageConfirmer",
    "Override",
    "OverrideStore",
    "PollResult",
    "RedirectRefused",
    "ResponseTooLarge",
    "SYSTEM_CLOCK",
    "Secret",
    "StatusClient",
    "StatusError",
    "StatusParseError",
    "StatusReport",
    "StatusUnavailable",
    "StatusWatcher",
    "StoreError",
    "StoreUnavailable",
    "SystemClock",
    "Verifier",
    "VerifyOutcome",
    "VerifyResult",
    "open_store",
]
