"""Settings of the example site. failopen is configured from the ``FAILOPEN_*`` variables.

    failopen emulate status &   # the test kit's fakes, on ports 8401, 8402 and 8404
    failopen emulate verify &
    failopen emulate vendor &   # the vendor's api.js, for the browser snippet
    export FAILOPEN_STATUS_URL=http://127.0.0.1:8401
    export FAILOPEN_VERIFY_URL=http://127.0.0.1:8402/api/v4/verify/
    export FAILOPEN_VENDOR_URL=http://127.0.0.1:8404
    export FAILOPEN_PRIVATE_KEY=test-private-key FAILOPEN_PUBLIC_KEY=example-public-key
    python examples/django_site/manage.py runserver

Against another vendor's fakes (Turnstile here; hCaptcha, reCAPTCHA, reCAPTCHA Enterprise and
Friendly Captcha alike, each ``emulate`` line printing the settings it needs)::

    failopen emulate status --shape cloudflare &   # Turnstile's status page (hCaptcha: hcaptcha)
    failopen emulate verify --vendor turnstile &   # its siteverify
    failopen emulate vendor --vendor turnstile &   # its browser script, /turnstile/v0/api.js
    export FAILOPEN_VENDOR=turnstile FAILOPEN_STATUS_URL=http://127.0.0.1:8401
    export FAILOPEN_VERIFY_URL=http://127.0.0.1:8402/turnstile/v0/siteverify
    export FAILOPEN_VENDOR_URL=http://127.0.0.1:8404
    export FAILOPEN_PRIVATE_KEY=0x4AAAAAAAfake-turnstile-secret
    export FAILOPEN_PUBLIC_KEY=0x4AAAAAAAfake-turnstile-sitekey
    python examples/django_site/manage.py runserver

reCAPTCHA, Enterprise and Friendly Captcha publish no status page a machine can read: no
``emulate status``, and ``FAILOPEN_EVIDENCE=probe`` instead of ``FAILOPEN_STATUS_URL``. The
templates hold no token input: ``{% failopen_script form="#login" %}`` points the snippet at the
form, which gets the spec's vendor's hidden input, or another vendor's widget (whose token goes
in the vendor's field).

No database: the site has no users, so the override endpoint (FAILOPEN_OVERRIDE_ENDPOINT=true)
takes only the admin token (FAILOPEN_ADMIN_TOKEN) here.
"""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent

# An example: the real key of a real site comes from its secret store, never from the source.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "failopen-example-site-not-a-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]", "testserver"]

INSTALLED_APPS = [
    "django.contrib.staticfiles",
    "failopen.integrations.django",
]

MIDDLEWARE = [
    "django_site.middleware.worker_pid",  # X-Worker-Pid, for the two-worker end-to-end test
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # Last, or at least after anything that rewrites request.path_info or request.method: the
    # guard must judge the path and method the URL resolver will route.
    "failopen.integrations.django.middleware.FailOpenMiddleware",
]

ROOT_URLCONF = "django_site.urls"
WSGI_APPLICATION = "django_site.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES: dict[str, dict[str, str]] = {}

# The browser snippet is in the failopen app's static/ folder: Django's default finders find it.
STATIC_URL = "static/"

# The log-in view is protected with @protect (views.py); the rest comes from the FAILOPEN_*
# environment variables. Keys here are Config field names in upper case (STATUS_URL, ...): a key
# failopen does not know stops the site at start, with the name it probably meant.
FAILOPEN: dict[str, object] = {}

USE_TZ = True
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"failopen": {"handlers": ["console"], "level": "WARNING"}},
}
