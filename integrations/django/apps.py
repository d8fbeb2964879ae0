"""The Django application: registers the system checks. Starts nothing, fetches nothing."""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"
# mypy: allow-subclassing-any

from __future__ import annotations

from django.apps import AppConfig

__all__ = ["FailOpenAppConfig"]


class FailOpenAppConfig(AppConfig):
    """``failopen.integrations.django``: checks and the settings-change hook, nothing else.

    ``ready`` runs in runserver's autoreloader parent, in a gunicorn ``--preload`` master and in
    every management command: a thread or a network call here would run in all of them. The
    watcher starts on the first request instead (``conf.runtime``).
    """

    name = "failopen.integrations.django"
    label = "failopen"
    verbose_name = "failopen"

    def ready(self) -> None:
        from . import checks, conf

        checks.register()
        conf.connect_signals()
