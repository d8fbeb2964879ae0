"""A staticfiles finder for the browser snippet, for sites that do not use AppDirectoriesFinder.

The Django app's own ``static/failopen/`` is a link to the core package's (one file in the
repository; the wheel carries it at both places), so Django's default finders find
``failopen/failopen.js``: no setting needed.
Sites that added this finder before keep working; while AppDirectoriesFinder is configured and
the app installed, it stays silent, so ``collectstatic`` does not report the file twice.
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"
# mypy: allow-subclassing-any

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.staticfiles.finders import BaseStorageFinder
from django.core.files.storage import FileSystemStorage

from failopen.web import SNIPPET_PATH

__all__ = ["SnippetFinder"]

_APP_FINDER = "django.contrib.staticfiles.finders.AppDirectoriesFinder"


def _app_finder_has_it() -> bool:
    return _APP_FINDER in settings.STATICFILES_FINDERS and apps.is_installed(
        "failopen.integrations.django")


class SnippetFinder(BaseStorageFinder):
    """Finds ``failopen/failopen.js`` in the core package, unless the app's copy is found."""

    storage = FileSystemStorage(location=str(SNIPPET_PATH.parent.parent))

    def find(self, path: str, *args: Any, **kwargs: Any) -> Any:
        """The snippet's path, or nothing when AppDirectoriesFinder already finds it."""
        if _app_finder_has_it():
            return []
        return super().find(path, *args, **kwargs)

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, Any]]:
        """The snippet for collectstatic, or nothing when AppDirectoriesFinder lists it."""
        if _app_finder_has_it():
            return iter(())
        return super().list(ignore_patterns)  # type: ignore[no-any-return]
