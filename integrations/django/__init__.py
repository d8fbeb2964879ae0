"""Django integration: ``INSTALLED_APPS += ["failopen.integrations.django"]``.

Add ``failopen.integrations.django.middleware.FailOpenMiddleware`` to ``MIDDLEWARE`` and
``path("failopen/", include("failopen.integrations.django.urls"))`` to the URLconf; configure
with the ``FAILOPEN`` setting (keys are :class:`failopen.Config` field names in upper case).
Protect views with ``@protect`` or ``FAILOPEN["PROTECTED_VIEWS"]``: every route to them is
guarded (aliases, ``i18n_patterns``, script prefixes), not only the paths someone listed.
django-allauth's entry points are one name: ``"PROTECTED_VIEWS": ALLAUTH_VIEWS``.
"""

from __future__ import annotations

try:
    import django  # type: ignore[import-untyped]  # noqa: F401 - fail early, usefully
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        'failopen.integrations.django needs Django: pip install "failopen[django]"'
    ) from exc

# After the check that Django is installed:
from .allauth import ALLAUTH_VIEWS  # noqa: E402
from .protection import protect  # noqa: E402

__all__ = ["ALLAUTH_VIEWS", "protect"]
