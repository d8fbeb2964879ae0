"""Settings for bench_django.py's real servers: the example site's, bare or with failopen.

    DJANGO_SETTINGS_MODULE=django_bench_settings
    FAILOPEN_BENCH_BARE=1            # FailOpenMiddleware removed from MIDDLEWARE (the bare app)
    FAILOPEN_BENCH_AUDIT=/path/file  # where the failopen.audit lines go (default: /dev/null);
                                     # "off": the audit logger disabled (level ERROR, no handler)

Everything else is ``examples/django_site``'s settings, unchanged. Only the benchmark uses this
module (it is no test: pytest does not collect it); importing it has no effect beyond settings.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_SITE = str(Path(__file__).resolve().parents[2] / "examples" / "django_site")
if _SITE not in sys.path:  # the servers get it on PYTHONPATH; this is for a bare import
    sys.path.append(_SITE)

from django_site.settings import *  # noqa: E402, F403
from django_site.settings import LOGGING as _SITE_LOGGING  # noqa: E402
from django_site.settings import MIDDLEWARE as _SITE_MIDDLEWARE  # noqa: E402

FAILOPEN_MIDDLEWARE = "failopen.integrations.django.middleware.FailOpenMiddleware"
assert FAILOPEN_MIDDLEWARE in _SITE_MIDDLEWARE, "the example site no longer uses FailOpenMiddleware"

MIDDLEWARE = (
    [m for m in _SITE_MIDDLEWARE if m != FAILOPEN_MIDDLEWARE]
    if os.environ.get("FAILOPEN_BENCH_BARE") == "1" else list(_SITE_MIDDLEWARE)
)

# A real deployment writes the audit lines (one WARNING per bypassed request) somewhere: here a
# plain FileHandler with a timestamped format, into FAILOPEN_BENCH_AUDIT.
_AUDIT = os.environ.get("FAILOPEN_BENCH_AUDIT", os.devnull)
LOGGING = {
    **_SITE_LOGGING,
    "formatters": {
        "audit": {"format": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s"},
    },
    "handlers": {
        **_SITE_LOGGING["handlers"],
        "audit_file": {
            "class": "logging.FileHandler",
            "filename": os.devnull if _AUDIT == "off" else _AUDIT,
            "formatter": "audit",
        },
    },
    "loggers": {
        **_SITE_LOGGING["loggers"],
        "failopen.audit": (
            {"handlers": [], "level": "ERROR", "propagate": False} if _AUDIT == "off" else
            {"handlers": ["audit_file"], "level": "WARNING", "propagate": False}
        ),
    },
}
