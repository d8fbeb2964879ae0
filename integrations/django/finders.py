"""A staticfiles finder for the browser snippet, which ships in the core package.

``{% static 'failopen/failopen.js' %}`` needs Django to find ``failopen/static/failopen/``; the
app's own ``static/`` folder would need a second copy. Add to the settings::

    STATICFILES_FINDERS = [
        "django.contrib.staticfiles.finders.FileSystemFinder",
        "django.contrib.staticfiles.finders.AppDirectoriesFinder",
        "failopen.integrations.django.finders.SnippetFinder",
    ]
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"
# mypy: allow-subclassing-any

from __future__ import annotations

from django.contrib.staticfiles.finders import BaseStorageFinder
from django.core.files.storage import FileSystemStorage

from failopen.web import SNIPPET_PATH

__all__ = ["SnippetFinder"]


class SnippetFinder(BaseStorageFinder):
    """Finds ``failopen/failopen.js`` (and only failopen's static files) in the core package."""

    storage = FileSystemStorage(location=str(SNIPPET_PATH.parent.parent))
