#!/usr/bin/env python
"""The example site's manage.py: ``python examples/django_site/manage.py runserver``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # Runnable from anywhere: the project package sits beside this file.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
