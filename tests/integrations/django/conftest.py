"""Django for the tests in this folder only: settings, a throw-away sqlite file, fixtures.

Django is configured when pytest collects this folder; nothing outside it imports Django.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import django
import pytest
from django.conf import settings
from django.test import AsyncClient, Client, override_settings

from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI

HERE = Path(__file__).resolve().parent
_DB_DIR = tempfile.mkdtemp(prefix="failopen-django-tests-")
atexit.register(shutil.rmtree, _DB_DIR, True)

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "failopen.integrations.django.middleware.FailOpenMiddleware",
]

# django-allauth, with every entry point it has switched on (test_django_allauth.py): allauth
# decides which routes exist when its URLconf is imported, so this is one process-wide install,
# not something a test can override. Installed here rather than in a process of its own: its
# apps and AccountMiddleware (which allauth insists on at start-up) leave the other tests' views
# alone, and a real site runs failopen beside such apps anyway.
# (Without django.contrib.messages, which allauth uses only when it is installed.)
try:
    import allauth  # noqa: F401
except ImportError:  # Python 3.10: allauth 65.22 needs 3.11; its tests skip, saying so
    HAVE_ALLAUTH = False
else:
    HAVE_ALLAUTH = True
ALLAUTH_APPS = ["allauth", "allauth.account", "allauth.socialaccount", "allauth.mfa",
                "allauth.headless"] if HAVE_ALLAUTH else []
ALLAUTH_MIDDLEWARE = ["allauth.account.middleware.AccountMiddleware"] if HAVE_ALLAUTH else []
ALLAUTH_SETTINGS: dict[str, Any] = {} if not HAVE_ALLAUTH else {
    "AUTHENTICATION_BACKENDS": ["django.contrib.auth.backends.ModelBackend",
                                "allauth.account.auth_backends.AuthenticationBackend"],
    "ACCOUNT_LOGIN_BY_CODE_ENABLED": True,
    # Passkey sign-up (one more entry point) requires verification by code, e-mail required.
    "ACCOUNT_EMAIL_VERIFICATION": "mandatory",
    "ACCOUNT_EMAIL_VERIFICATION_BY_CODE_ENABLED": True,
    "ACCOUNT_SIGNUP_FIELDS": ["email*", "username*", "password1*", "password2*"],
    "MFA_SUPPORTED_TYPES": ["totp", "recovery_codes", "webauthn"],
    "MFA_PASSKEY_LOGIN_ENABLED": True,
    "MFA_PASSKEY_SIGNUP_ENABLED": True,
    # The tests post from one address far more often than allauth's limits allow a person.
    "ACCOUNT_RATE_LIMITS": False,
    "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
}

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="failopen-tests-not-a-secret",
        ALLOWED_HOSTS=["testserver"],
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.staticfiles",
            "failopen.integrations.django",
            *ALLAUTH_APPS,
        ],
        # allauth's middleware before failopen's, where the manual puts failopen: last.
        MIDDLEWARE=[*MIDDLEWARE[:-1], *ALLAUTH_MIDDLEWARE, MIDDLEWARE[-1]],
        ROOT_URLCONF="django_test_urls",
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                               "NAME": str(Path(_DB_DIR) / "db.sqlite3")}},
        TEMPLATES=[{
            "BACKEND": "django.template.backends.django.DjangoTemplates",
            "DIRS": [HERE / "templates"],
            "APP_DIRS": True,  # allauth's pages
            "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
        }],
        STATIC_URL="/static/",
        STATICFILES_FINDERS=["failopen.integrations.django.finders.SnippetFinder"],
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        USE_TZ=True,
        FAILOPEN={},
        **ALLAUTH_SETTINGS,
    )
    django.setup()

PUBLIC_KEY = "test-public-key"


@pytest.fixture(autouse=True)
def _no_failopen_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """FAILOPEN_* variables of the shell running the tests must not leak into the settings."""
    import os

    for name in [n for n in os.environ if n.startswith("FAILOPEN_")]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def django_db() -> None:
    """The auth tables, made once (only the override tests need users)."""
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


@pytest.fixture
def fo_settings(fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI) -> dict[str, Any]:
    """A FAILOPEN setting wired to the served fakes, protecting POST /login/, polling fast."""
    return {
        "STATUS_URL": fake_status_page.url,
        "VERIFY_URL": fake_verify_api.verify_url,
        "PRIVATE_KEY": fake_verify_api.private_key,
        "PUBLIC_KEY": PUBLIC_KEY,
        "PROTECTED_PATHS": ["/login/"],
        "POLL_INTERVAL": 0.05,
        "POLL_JITTER": 0.0,
        "CONFIRM_TTL": 0.05,
        "STATUS_TIMEOUT": 2.0,
        "VERIFY_TIMEOUT": 2.0,
    }


@pytest.fixture
def use_failopen(fo_settings: dict[str, Any]) -> Iterator[Callable[..., FailOpen | None]]:
    """``use_failopen(KEY=value, ...)``: apply FAILOPEN (fakes + changes); returns the runtime.

    None when the settings cannot make one (the tests of broken settings).
    """
    from failopen.integrations.django import conf

    from failopen.exceptions import ConfigError

    with ExitStack() as stack:
        def use(**changes: Any) -> FailOpen | None:
            stack.enter_context(override_settings(FAILOPEN={**fo_settings, **changes}))
            try:
                return conf.runtime()
            except ConfigError:
                return None

        yield use


class LoopClient:
    """Django's AsyncClient driven from a sync test, on one event loop kept for the test.

    One loop for the whole test: the verifier keeps one async client per loop.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, **kwargs: Any) -> None:
        self.loop = loop
        self.inner = AsyncClient(**kwargs)

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(self.inner.get(*args, **kwargs))

    def post(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(self.inner.post(*args, **kwargs))

    def put(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(self.inner.put(*args, **kwargs))

    def head(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(self.inner.head(*args, **kwargs))

    def force_login(self, user: Any) -> None:
        self.inner.force_login(user)

    @property
    def cookies(self) -> Any:
        return self.inner.cookies


@pytest.fixture
def make_client(
    request: pytest.FixtureRequest, use_failopen: Any
) -> Iterator[Callable[..., Any]]:
    """``make_client(**kwargs)``: Django's Client, or AsyncClient for ``client_kind == "async"``."""
    kind = request.getfixturevalue("client_kind") if "client_kind" in request.fixturenames else (
        "sync")
    loop = asyncio.new_event_loop() if kind == "async" else None

    def make(**kwargs: Any) -> Any:
        return LoopClient(loop, **kwargs) if loop is not None else Client(**kwargs)

    yield make
    if loop is not None:
        from failopen.integrations.django import conf

        try:
            if conf.loaded().config is not None:
                loop.run_until_complete(_aclose(conf))
        finally:
            loop.close()


async def _aclose(conf: Any) -> None:
    try:
        runtime = conf.runtime()
    except Exception:
        return
    await runtime.aclose()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that takes ``client_kind`` runs with the sync and the async test client."""
    if "client_kind" in metafunc.fixturenames:
        metafunc.parametrize("client_kind", ["sync", "async"])


@pytest.fixture
def client_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)
