"""The Django process's start-up line, logged when its runtime is built on its first request:
what it protects (paths, named views and views marked ``@protect``), with which evidence, store
and mode; a WARNING when it protects nothing. Apart from ``startup`` (the checks made when the
app is ready), which reads ``conf``: ``conf`` calls this module."""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import logging

from failopen.runtime import FailOpen

from .._announce import announce, protection_text

__all__ = ["announce_runtime"]

logger = logging.getLogger("failopen.django")


def announce_runtime(runtime: FailOpen) -> None:
    """This process's start-up line (its runtime is built on its first request): what it
    protects, with which evidence, store and mode; a WARNING when it protects nothing."""
    config = runtime.config
    protects = protection_text(config.protected_methods, config.protected_paths,
                               config.protected_views)
    marked = _marked_views()
    if marked:
        protects = "; ".join(p for p in (protects, f"{marked} view(s) marked @protect") if p)
    announce(logger, runtime, adapter="Django", protects=protects,
             nothing_hint="Decorate the log-in and sign-up views with "
                          "@failopen.integrations.django.protect, or list them in "
                          "FAILOPEN['PROTECTED_VIEWS'].")


def _marked_views() -> int:
    """How many routes of the URLconf lead to a view marked with ``protect``."""
    from django.urls import get_resolver

    from .protection import is_marked, walk

    try:
        return sum(1 for view, _ in walk(get_resolver()) if is_marked(view))
    except Exception:  # a broken URLconf has checks of its own
        return 0
