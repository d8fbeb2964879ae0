"""FailOpenMiddleware around Django's own ASGI handler refuses to start, in a subprocess.

Django is configured once per process, and tests/integrations/django/ configures it for this
one; the script below configures its own project in a fresh interpreter instead: one that uses
FORCE_SCRIPT_NAME and i18n_patterns, where the ASGI middleware would have guarded "/login/" and
missed "/app/en/login/". Django's own middleware (tests/integrations/django/) decides from the
resolved view.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import django
    from django.conf import settings

    settings.configure(DEBUG=False, SECRET_KEY="s" * 50, ROOT_URLCONF="__main__",
                       ALLOWED_HOSTS=["testserver"], MIDDLEWARE=[], FORCE_SCRIPT_NAME="/app",
                       USE_I18N=True, LANGUAGES=[("en", "English"), ("fr", "French")])
    django.setup()

    from django.conf.urls.i18n import i18n_patterns
    from django.core.asgi import get_asgi_application
    from django.http import JsonResponse
    from django.urls import path

    from failopen import Config
    from failopen.exceptions import ConfigError
    from failopen.integrations.asgi import FailOpenMiddleware

    urlpatterns = i18n_patterns(path("login/", lambda request: JsonResponse({})))

    try:
        FailOpenMiddleware(get_asgi_application(),
                           config=Config(status_url="https://status.test"))
    except ConfigError as exc:
        print("refused:", exc)
    else:
        print("accepted")
''')


@pytest.mark.slow
def test_the_asgi_middleware_refuses_to_wrap_django() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    out = result.stdout.strip()
    assert out.startswith("refused:"), out
    assert "failopen.integrations.django.middleware.FailOpenMiddleware" in out
    assert "django.core.handlers.asgi.ASGIHandler" in out
