"""The Django application: registers the system checks and reports unusable settings at start.

Starts nothing, fetches nothing."""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"
# mypy: allow-subclassing-any

from __future__ import annotations

from django.apps import AppConfig

__all__ = ["FailOpenAppConfig"]


class FailOpenAppConfig(AppConfig):
    """``failopen.integrations.django``: checks, the settings-change hook, the start-up report.

    ``ready`` runs in runserver's autoreloader parent, in a gunicorn ``--preload`` master, in
    every worker and in every management command: a thread or a network call here would run in
    all of them. The watcher starts on the first request instead (``conf.runtime``). What it does
    do there is read the settings: ones failopen cannot use raise ImproperlyConfigured (system
    checks never run under gunicorn or uvicorn), see ``startup``.
    """

    name = "failopen.integrations.django"
    label = "failopen"
    verbose_name = "failopen"

    def ready(self) -> None:
        from . import checks, conf, startup

        checks.register()
        conf.connect_signals()
        startup.report()
