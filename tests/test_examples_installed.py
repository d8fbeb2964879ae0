"""The manual's commands serve each example from a normal (non-editable) install of the wheel.

Run from the repository root, ``uvicorn examples.asgi_app:app`` puts the root on ``sys.path``,
so ``import failopen`` finds the source folder, which has no ``failopen.integrations`` (that
lives in ``integrations/`` and only the installed package has it): the example cannot start.
The manual's commands keep the root off ``sys.path``; this test runs them, word for word, with
the venv's console scripts, from the repository root, against the test kit's fakes.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import httpx
import pytest
from _manual import manual
from _serving import fakes_env, served
from _wheel import ROOT, installed_venv

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

pytestmark = pytest.mark.slow

#: The manual's command for each example, word for word; ``{port}`` is added here. gunicorn
#: always puts the directory it starts in on ``sys.path`` (``--chdir`` only adds another), so
#: the Flask example starts from ``examples/``.
COMMANDS = {
    "asgi": ".venv/bin/uvicorn --app-dir examples asgi_app:app",
    "flask": "cd examples && ../.venv/bin/gunicorn --preload -w 2 flask_app:app",
    "django": ".venv/bin/python examples/django_site/manage.py runserver",
}
LISTEN = {
    "asgi": ["--port", "{port}"],
    "flask": ["-b", "127.0.0.1:{port}"],
    "django": ["127.0.0.1:{port}", "--noreload"],
}
LOGIN = {"asgi": "/login", "flask": "/login", "django": "/login/"}


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed_venv(tmp_path_factory)


def test_the_installed_package_is_the_wheel_not_the_source(venv: Path) -> None:
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-c",
         "import failopen, failopen.integrations.asgi; print(failopen.__file__)"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    assert Path(where).is_relative_to(venv), where


def test_the_manual_shows_these_commands() -> None:
    pages = {"asgi": "docs/asgi.md", "flask": "docs/wsgi.md", "django": "docs/django.md"}
    texts = manual()
    missing = [command for example, command in COMMANDS.items()
               if command not in texts[pages[example]]]
    assert not missing, f"the manual no longer shows {missing}: update COMMANDS here too"


@pytest.mark.parametrize("example", sorted(COMMANDS))
def test_an_example_serves_from_the_wheel(
    example: str, venv: Path, fake_status_page: FakeStatusPage,
    fake_verify_api: FakeVerifyAPI, tmp_path: Path,
) -> None:
    port = free_port()
    cwd, command = ROOT, COMMANDS[example]
    if command.startswith("cd "):
        folder, command = command.removeprefix("cd ").split(" && ../", 1)
        cwd = ROOT / folder
    program, *args = shlex.split(command.removeprefix(".venv/bin/"))
    argv = [str(venv / "bin" / program), *args,
            *(a.format(port=port) for a in LISTEN[example])]
    env = fakes_env(fake_status_page, fake_verify_api)
    with served(argv, port=port, env=env, log_path=tmp_path / "server.log", cwd=cwd) as url, \
            httpx.Client(base_url=url, timeout=10) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert "failopen.js" in page.text  # the snippet tag, from the installed package
        headers = {"X-Enforcement-Token": FakeVerifyAPI.GOOD}
        data = {}
        if example == "django":  # the example keeps Django's CSRF protection on
            data["csrfmiddlewaretoken"] = client.cookies["csrftoken"]
            headers["Referer"] = url + "/"
        admitted = client.post(LOGIN[example], data=data, headers=headers)
        assert admitted.status_code == 200, admitted.text
        assert admitted.json()["ok"] is True
        refused = client.post(LOGIN[example], data=data)  # no token
        assert refused.status_code == 403
        assert "needs an enforcement token" in refused.text  # failopen's refusal, JSON or HTML
