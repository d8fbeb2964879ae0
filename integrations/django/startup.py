"""What ``AppConfig.ready`` reports: the system checks do not run under gunicorn or uvicorn.

``ready`` runs in every process that loads the site (each worker, a ``--preload`` master,
runserver, every management command), so a setting failopen cannot use stops the server there,
with a message that says what to change, instead of turning every protected request into a 503.
What depends on the environment rather than on the settings themselves is logged instead: no
verify URL (ERROR: protected requests are refused), no status URL (WARNING: it never fails
open), no middleware, an ignored ``FAILOPEN_*`` variable (WARNING). Nothing here starts a
thread, makes a request or imports the URLconf.
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import difflib
import logging
import os

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from failopen.config import closest_setting, setting_names
from failopen.exceptions import ConfigError

from . import conf

__all__ = ["report"]

logger = logging.getLogger("failopen.django")

_MIDDLEWARE = "failopen.integrations.django.middleware.FailOpenMiddleware"
_PREFIX = "FAILOPEN_"
# FAILOPEN_* variables that are no Config field: the session-intelligence client's.
_OTHER_VARIABLES = ("FAILOPEN_RAI_",)


def report() -> None:
    """Raise ImproperlyConfigured for settings failopen cannot use; log what weakens it."""
    errors = _top_level_settings()
    try:
        config = conf.config_factory()
    except ConfigError as exc:
        errors.insert(0, str(exc))  # names the key or variable; never a secret's value
    else:
        if (config.protected_paths or config.protected_views) and config.verify_url is None:
            # Logged, not raised: secrets are often absent where commands run at build time
            # (collectstatic in an image build), and without them failopen fails closed.
            logger.error(
                "failopen: PROTECTED_PATHS or PROTECTED_VIEWS is set but VERIFY_URL is not; "
                "every protected request is refused (503) until FAILOPEN['VERIFY_URL'] and "
                "FAILOPEN['PRIVATE_KEY'] (or FAILOPEN_VERIFY_URL and FAILOPEN_PRIVATE_KEY) "
                "are set")
        if config.status_url is None:
            logger.warning(
                "failopen has no status URL: it cannot see an outage, so it never fails open; "
                "set FAILOPEN['STATUS_URL'] or FAILOPEN_STATUS_URL")
    if errors:
        raise ImproperlyConfigured("failopen cannot start: " + "; ".join(errors))
    if _MIDDLEWARE not in getattr(settings, "MIDDLEWARE", ()):
        logger.warning("failopen: %s is not in MIDDLEWARE; no request is checked", _MIDDLEWARE)
    for line in _misspelled_variables():
        logger.warning("failopen: %s", line)


def _top_level_settings() -> list[str]:
    """``settings.FAILOPEN_STATUS_URL`` and kin: failopen reads none of them; say where to go."""
    found: list[str] = []
    names = [n for n in dir(settings) if n.isupper()]
    known = setting_names()
    for name in names:
        if not name.startswith(_PREFIX):
            continue
        key = name.removeprefix(_PREFIX)
        meant = key if key in known else closest_setting(key)
        if meant is not None:  # anything else may be the site's own setting
            found.append(
                f"settings.{name} is not read by failopen; move it into the FAILOPEN dict as "
                f"FAILOPEN[{meant!r}] (or set the {_PREFIX}{meant} environment variable)")
    if "FAILOPEN" not in names:
        close = difflib.get_close_matches("FAILOPEN", names, n=1, cutoff=0.8)
        if close and not close[0].startswith(_PREFIX):
            found.append(f"settings.{close[0]} is not read by failopen; did you mean FAILOPEN?")
    return found


def _misspelled_variables() -> list[str]:
    """Environment variables that look like a failopen setting but are none (ignored)."""
    known = {_PREFIX + name for name in setting_names()}
    found = []
    for name in sorted(os.environ):
        if not name.startswith(_PREFIX) or name in known or name.startswith(_OTHER_VARIABLES):
            continue
        meant = closest_setting(name)
        if meant is not None:
            found.append(f"the environment variable {name} is ignored; did you mean "
                         f"{_PREFIX}{meant}?")
    return found
