"""The manual's "Django in five steps" (docs/django.md), followed word for word in a new
``startproject`` site.

The code blocks of steps 2 to 5 are pasted where each step says (the settings' URLs swapped for
the test kit's fakes); the only line of our own is the route to the user's log-in view. The site
then runs under Django's own server: a log-in needs CSRF and a verified token, is refused by
failopen without one, and gets through without one once the status page reports an outage.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from _manual import page, section
from _serving import served
from packaging.requirements import Requirement

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port


def _steps() -> dict[int, str]:
    """The code block of each numbered step of the manual's Django section."""
    steps = {}
    for number, body in re.findall(r"^\*\*(\d)\. .*?\n```[a-z]*\n(.*?)^```",
                                   section(page("django.md"), "## Django in five steps"),
                                   re.S | re.M):
        steps[int(number)] = body
    assert sorted(steps) == [1, 2, 3, 4, 5], sorted(steps)
    return steps


def test_step_one_installs_the_django_extra_without_a_release() -> None:
    """Each command of step 1 installs failopen with the django extra from a clone or a built
    wheel: no release is on PyPI yet, so a bare ``failopen[django]`` could not be found."""
    commands = [shlex.split(line.split("#", 1)[0]) for line in _steps()[1].splitlines()
                if line.strip()]
    assert len(commands) >= 2, commands  # the clone and the wheel
    for words in commands:
        assert words[:2] == ["pip", "install"], words
        if words[2] == "-e":  # a clone: a path with the extra
            assert words[3].startswith("/") and words[3].endswith("/failopen[django]"), words
        else:  # a wheel: a direct reference to the file
            requirement = Requirement(words[2])
            assert (requirement.name, requirement.extras) == ("failopen", {"django"})
            assert requirement.url and requirement.url.startswith("file:///"), words
            assert requirement.url.endswith("-py3-none-any.whl"), words


@pytest.mark.slow
def test_the_five_steps_make_a_working_site(
    tmp_path: Path, fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI
) -> None:
    steps = _steps()
    subprocess.run([sys.executable, "-m", "django", "startproject", "mysite", str(tmp_path)],
                   check=True)
    subprocess.run([sys.executable, "manage.py", "startapp", "accounts"], cwd=tmp_path,
                   check=True)
    settings = steps[2]
    for placeholder, fake in (("https://status.vendor.example", fake_status_page.url),
                              ("https://mycompany-verify.vendor.example/api/v4/verify/",
                               fake_verify_api.verify_url),
                              ("https://client.vendor.example", "http://127.0.0.1:9")):
        assert placeholder in settings
        settings = settings.replace(placeholder, fake)
    with (tmp_path / "mysite" / "settings.py").open("a") as out:
        out.write("\n" + settings + 'INSTALLED_APPS += ["accounts"]  # the site\'s own app\n')
    with (tmp_path / "mysite" / "urls.py").open("a") as out:
        out.write("\n" + steps[3] + "from accounts import views\n"
                  'urlpatterns += [path("login/", views.login, name="login")]  # the site\'s own\n')
    (tmp_path / "accounts" / "views.py").write_text(steps[4])
    template = tmp_path / "accounts" / "templates" / "accounts" / "login.html"
    template.parent.mkdir(parents=True)
    template.write_text(steps[5])

    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "BOT_PRIVATE_KEY": fake_verify_api.private_key}
    argv = [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    with served(argv, port=port, env=env, log_path=tmp_path / "server.log", cwd=tmp_path,
                ready_path="/login/") as url, httpx.Client(base_url=url, timeout=10) as client:
        page = client.get("/login/")
        assert 'src="/static/failopen/failopen.js"' in page.text
        assert 'data-failopen-form="#login"' in page.text
        assert client.get("/static/failopen/failopen.js").status_code == 200
        form = {"csrfmiddlewaretoken": client.cookies["csrftoken"], "username": "ann"}
        headers = {"Referer": url + "/login/"}

        no_csrf = httpx.post(url + "/login/", data={"enforcement-token": FakeVerifyAPI.GOOD})
        assert no_csrf.status_code == 403 and "CSRF verification failed" in no_csrf.text
        refused = client.post("/login/", data=form, headers=headers)
        assert refused.status_code == 403 and "Request refused" in refused.text
        assert refused.headers["cache-control"] == "no-store"
        admitted = client.post("/login/", data={**form, "enforcement-token": FakeVerifyAPI.GOOD},
                               headers=headers)
        assert admitted.text == "welcome (bypassed: False)"

        fake_status_page.set_global("major_outage")
        assert client.get("/failopen/flag?confirm=1").json()["enforce"] is False
        bypassed = client.post("/login/", data=form, headers=headers)
        assert bypassed.text == "welcome (bypassed: True)"
