"""ASGI entry point: ``uvicorn --app-dir examples/django_site django_site.asgi:application``."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_site.settings")
application = get_asgi_application()
