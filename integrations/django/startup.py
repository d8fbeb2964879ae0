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

import dataclasses
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from failopen._config_fields import coerce
from failopen._variables import warn_unknown_variables
from failopen.config import Config, env_name
from failopen.exceptions import ConfigError
from failopen.stores import split_password

from . import conf

__all__ = ["exposed_store_passwords", "report"]

logger = logging.getLogger("failopen.django")

_MIDDLEWARE = "failopen.integrations.django.middleware.FailOpenMiddleware"


def report() -> None:
    """Raise ImproperlyConfigured for settings failopen cannot use, naming every problem; log
    what weakens it.

    Not under Django's management utility (manage.py, django-admin, ``python -m django``): a
    traceback there would hide the one list of everything wrong that its commands give, the
    system checks (failopen.E001, before runserver, migrate or check do anything) and
    ``manage.py failopen check``. A command that skips the checks serves no request; with
    ``runserver --skip-checks``, protected requests are refused (503) and the error is logged.
    """
    try:
        config = conf.config_factory()
    except ConfigError as exc:
        # Names each key or variable as written; never a secret's value.
        errors = conf.problems() or [str(exc), *conf.misplaced_settings()]
    else:
        errors = conf.misplaced_settings()
        if (config.protected_paths or config.protected_views) and config.verify_url is None:
            # Logged, not raised: secrets are often absent where commands run at build time
            # (collectstatic in an image build), and without them failopen fails closed.
            logger.error(
                "failopen: PROTECTED_PATHS or PROTECTED_VIEWS is set but VERIFY_URL is not; "
                "every protected request is refused (503) until FAILOPEN['VERIFY_URL'] and "
                "FAILOPEN['PRIVATE_KEY'] (or FAILOPEN_VERIFY_URL and FAILOPEN_PRIVATE_KEY) "
                "are set")
        if config.sees_no_outage:
            logger.warning(
                "failopen has no status URL: it cannot see an outage, so it never fails open; "
                "set FAILOPEN['STATUS_URL'] or FAILOPEN_STATUS_URL")
    if errors:
        if _run_by_management_utility():
            return
        raise ImproperlyConfigured("failopen cannot start: " + "; ".join(errors))
    if _MIDDLEWARE not in getattr(settings, "MIDDLEWARE", ()):
        logger.warning("failopen: %s is not in MIDDLEWARE; no request is checked", _MIDDLEWARE)
    # Read here too: a key missing from the FAILOPEN dict falls back to its variable.
    warn_unknown_variables(logger)
    raw = conf.raw_settings()
    for line in [*_shadowed_variables(raw), *exposed_store_passwords(raw)]:
        logger.warning("failopen: %s", line)


def _run_by_management_utility() -> bool:
    """True when Django's management utility is setting Django up (its commands report what
    is wrong with the settings themselves); False for a server, a test runner, a script."""
    from django.core.management import ManagementUtility

    code = ManagementUtility.execute.__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _shadowed_variables(raw: Mapping[str, Any]) -> list[str]:
    """Known variables that the FAILOPEN dict overrides with another value: an operator who
    sets one expects a change that never comes. Values are compared, never shown."""
    fields = {spec.name for spec in dataclasses.fields(Config)}
    found = []
    for key, value in raw.items():
        name = key.lower() if isinstance(key, str) else ""
        text = os.environ.get(env_name(name), "") if name in fields else ""
        if not text.strip():
            continue
        try:
            differs = coerce(name, value, source="setting") != coerce(name, text, source="env")
        except ConfigError:
            differs = True
        if differs:
            found.append(f"the environment variable {env_name(name)} is ignored: "
                         f"FAILOPEN[{key!r}] in the settings wins over it; remove one of the two")
    return found


def exposed_store_passwords(raw: Mapping[str, Any]) -> list[str]:
    """Where a Redis password sits that Django's debug page and error e-mails show as written
    (they hide settings and META keys named like API|TOKEN|KEY|SECRET|PASS|SIGNATURE only)."""
    found = []
    store = raw.get("STORE")
    if isinstance(store, str) and _carries_password(store):
        found.append(
            "FAILOPEN['STORE'] carries the Redis password, which Django's debug page and error "
            "e-mails show as written; move it to FAILOPEN['STORE_PASSWORD'] (hidden there, as "
            "Django hides any setting named like a password) or to the FAILOPEN_STORE_PASSWORD "
            "environment variable, and remove it from the URL")
    variable = os.environ.get("FAILOPEN_STORE", "")
    if store is None and _carries_password(variable):
        found.append(
            "the FAILOPEN_STORE environment variable carries the Redis password; runserver "
            "passes the environment to request.META, which Django's debug page and error "
            "e-mails show; set it in FAILOPEN_STORE_PASSWORD instead and remove it from the URL")
    return found


def _carries_password(url: str) -> bool:
    try:
        return split_password(url)[1] is not None
    except ConfigError:  # two passwords: the settings check says so
        return True
