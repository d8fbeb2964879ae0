"""Which ``FAILOPEN_*`` environment variables failopen reads, and a warning for any other one.

``FAILOPEN_PROTECTED_PATHS`` spelled without its S would leave sign-up unprotected without a word:
every adapter and the CLI name such a variable at start-up, with the closest known one, once
per process. The known list is every Config field's variable, plus the variables read outside
Config (the ``rai`` client's credentials, named again here so this module imports no client):
tests/test_variables.py fails when any ``FAILOPEN_*`` name in the code is missing from it.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import threading
from collections.abc import Mapping

from failopen._config_fields import ENV_PREFIX, env_name

__all__ = ["known_variables", "unknown_variables", "warn_unknown_variables"]

# Read outside Config: the session-intelligence export's settings (failopen.rai.cli).
_OUTSIDE_CONFIG = frozenset({
    "FAILOPEN_RAI_BASE_URL", "FAILOPEN_RAI_CLIENT_ID", "FAILOPEN_RAI_CLIENT_SECRET"})

_warned: set[str] = set()
_warned_lock = threading.Lock()


def known_variables() -> frozenset[str]:
    """Every ``FAILOPEN_*`` variable some part of failopen reads."""
    from failopen.config import Config  # config imports this module's neighbours, not this one

    return frozenset(env_name(spec.name) for spec in dataclasses.fields(Config)) | _OUTSIDE_CONFIG


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """One sentence per ``FAILOPEN_*`` variable failopen does not read, with the closest known
    name when one is close (sorted by variable)."""
    environ = os.environ if environ is None else environ
    known = known_variables()
    # Compared without the prefix, which every name shares.
    stems = {n.removeprefix(ENV_PREFIX): n for n in known}
    found = []
    for name in sorted(environ):
        # failopen_store too: variable names are case-sensitive, so that one is ignored as well.
        if not name.upper().startswith(ENV_PREFIX) or name in known:
            continue
        close = difflib.get_close_matches(name.upper().removeprefix(ENV_PREFIX), stems, n=1,
                                          cutoff=0.6)
        hint = (f"did you mean {stems[close[0]]}?" if close else
                "failopen reads no variable of that name or close to it (see the "
                "configuration reference, docs/configuration.md)")
        found.append(f"the environment variable {name} is ignored; {hint}")
    return found


def warn_unknown_variables(logger: logging.Logger,
                           environ: Mapping[str, str] | None = None) -> None:
    """Log each unknown ``FAILOPEN_*`` variable as a WARNING, once per process (adapters call
    this as they start; a second adapter or a rebuilt one says nothing new)."""
    for line in unknown_variables(environ):
        with _warned_lock:
            if line in _warned:
                continue
            _warned.add(line)
        logger.warning("failopen: %s", line,
                       extra={"event": "failopen.unknown_variable"})
