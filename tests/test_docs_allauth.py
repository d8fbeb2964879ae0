"""The manual's django-allauth recipe, followed in a new ``startproject`` site with a standard
allauth install (``allauth`` and ``allauth.account``: no headless API, no MFA, no log-in by code).

The five steps' settings and URLs, then allauth as its own documentation installs it (our lines),
then the recipe's settings and template as docs/allauth.md prints them. ``manage.py check`` must
find nothing (most names of ALLAUTH_VIEWS are not routed by such an install: they are not
typos); then, under Django's own server, allauth's log-in page carries the snippet, and a real
log-in is refused without a token and signs the person in with one.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from _docs_allauth import allauth_blocks
from _serving import served
from test_docs_django import _steps

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

# django-allauth 65.22 needs Python 3.11: the test extra installs it only there.
pytest.importorskip("allauth", reason="django-allauth is not installed (it needs Python 3.11+)")

pytestmark = pytest.mark.slow

# allauth's own quick start, not the manual's: what a site with allauth already has.
ALLAUTH_INSTALLED = '''
INSTALLED_APPS += ["allauth", "allauth.account"]
MIDDLEWARE.insert(MIDDLEWARE.index(
    "failopen.integrations.django.middleware.FailOpenMiddleware"),
    "allauth.account.middleware.AccountMiddleware")
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend",
                           "allauth.account.auth_backends.AuthenticationBackend"]
TEMPLATES[0]["DIRS"] = [BASE_DIR / "templates"]
'''
PASSWORD = "a-long-enough-password-1"  # noqa: S105 - a test user's


def test_the_allauth_recipe_protects_a_standard_allauth_site(
    tmp_path: Path, fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI
) -> None:
    steps, recipe = _steps(), allauth_blocks()
    subprocess.run([sys.executable, "-m", "django", "startproject", "mysite", str(tmp_path)],
                   check=True)
    settings = steps[2]
    for placeholder, fake in (("https://status.vendor.example", fake_status_page.url),
                              ("https://mycompany-verify.vendor.example/api/v4/verify/",
                               fake_verify_api.verify_url),
                              ("https://client.vendor.example", "http://127.0.0.1:9")):
        settings = settings.replace(placeholder, fake)
    with (tmp_path / "mysite" / "settings.py").open("a") as out:
        out.write("\n" + settings + ALLAUTH_INSTALLED + recipe["python"])
    with (tmp_path / "mysite" / "urls.py").open("a") as out:
        out.write("\n" + steps[3] + 'urlpatterns += [path("accounts/", include("allauth.urls"))]\n')
    layout = tmp_path / "templates" / "allauth" / "layouts" / "entrance.html"
    layout.parent.mkdir(parents=True)
    layout.write_text(recipe["django"])

    env = {"PATH": "/usr/bin:/bin", "BOT_PRIVATE_KEY": fake_verify_api.private_key}

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    checked = manage("check", "--fail-level", "WARNING")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "System check identified no issues" in checked.stdout
    assert manage("migrate", "-v", "0").returncode == 0
    made = manage("shell", "-c", "from django.contrib.auth.models import User; "
                  f"User.objects.create_user('ann', 'ann@example.com', '{PASSWORD}')")
    assert made.returncode == 0, made.stderr

    port = free_port()
    argv = [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    with served(argv, port=port, env=env, log_path=tmp_path / "server.log", cwd=tmp_path,
                ready_path="/accounts/login/") as url, \
            httpx.Client(base_url=url, timeout=10) as client:
        page = client.get("/accounts/login/").text
        assert 'src="/static/failopen/failopen.js"' in page.partition("</head>")[0]
        assert 'data-failopen-form="form[method=post]"' in page
        assert re.search(r'<form method="post"\s+action="/accounts/login/"', page)
        form = {"csrfmiddlewaretoken": client.cookies["csrftoken"], "login": "ann",
                "password": PASSWORD}
        headers = {"Referer": url + "/accounts/login/"}
        refused = client.post("/accounts/login/", data=form, headers=headers)
        assert refused.status_code == 403 and "Request refused" in refused.text
        assert "sessionid" not in client.cookies
        admitted = client.post("/accounts/login/", headers=headers,
                               data={**form, "enforcement-token": fake_verify_api.issue_token()})
        assert (admitted.status_code, admitted.headers["location"]) == (302,
                                                                          "/accounts/profile/")
        assert client.cookies["sessionid"]  # allauth signed ann in
