"""A Django site under a real gunicorn (WSGI) and uvicorn (ASGI), CSRF check on, failopen after
CsrfViewMiddleware as the example places it.

A token in a JSON body reaches the guard on views protected by decorator or by name (allauth's
headless log-in and sign-up send JSON), and a PROTECTED_VIEWS entry that names no route shows
in the server's log, once, with the name it probably meant: the system checks never run there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _serving import fakes_env, served

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

HERE = Path(__file__).resolve().parent
SITE = HERE.parents[2] / "examples" / "django_site"
CSRF = "c" * 32
SETTINGS = """\
from django_site.settings import *  # noqa: F403

ROOT_URLCONF = "django_test_urls_bodies"
FAILOPEN = {"PROTECTED_VIEWS": ["account_login", "allauth:account_signup"]}
"""
MISNAMED = ("failopen: FAILOPEN['PROTECTED_VIEWS'] entry 'allauth:account_signup' names no view "
            "in the URLconf, so it protects nothing; did you mean 'account_signup'?")


@pytest.fixture(params=["gunicorn", "uvicorn"])
def site(
    request: pytest.FixtureRequest, fake_status_page: FakeStatusPage,
    fake_verify_api: FakeVerifyAPI, tmp_path: Path,
) -> Iterator[tuple[str, Path]]:
    """(URL, log file) of the site under one real server; the log is complete once it stops."""
    (tmp_path / "served_settings.py").write_text(SETTINGS)
    env = fakes_env(fake_status_page, fake_verify_api)
    env.update({"DJANGO_SETTINGS_MODULE": "served_settings",
                "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SITE), str(HERE)])})
    port = free_port()
    argv = {
        "gunicorn": [sys.executable, "-m", "gunicorn", "-w", "1", "-b", f"127.0.0.1:{port}",
                     "--graceful-timeout", "2", "django_site.wsgi:application"],
        "uvicorn": [sys.executable, "-m", "uvicorn", "--port", str(port),
                    "django_site.asgi:application"],
    }[request.param]
    log = tmp_path / "server.log"
    with served(argv, port=port, env=env, log_path=log, ready_path="/open/", cwd=SITE) as url:
        yield url, log


@pytest.mark.slow
def test_json_token_and_misnamed_view_under_a_real_server(
    site: tuple[str, Path], fake_verify_api: FakeVerifyAPI
) -> None:
    url, log = site
    headers = {"X-CSRFToken": CSRF, "accept": "application/json"}
    with httpx.Client(base_url=url, cookies={"csrftoken": CSRF}, headers=headers,
                      timeout=10) as client:
        for path in ("/signup/", "/signup/async/", "/auth/login/"):
            token = fake_verify_api.issue_token()
            admitted = client.post(path, json={"username": "ann", "enforcement-token": token})
            assert admitted.status_code == 200, (path, admitted.text)
            assert admitted.json() == {"user": "ann", "files": [], "outcome": "valid"}
            missing = client.post(path, json={"username": "ann"})
            assert missing.status_code == 403, (path, missing.text)
            assert missing.json()["error"]["code"] == "missing_token"
        fields = {"username": "bob", "enforcement-token": fake_verify_api.issue_token()}
        form = client.post("/auth/login/", data=fields,
                           files={"avatar": ("a.png", b"\x89PNG" + b"x" * 100)})
        assert form.json() == {"user": "bob", "files": ["avatar"], "outcome": "valid"}
        assert client.get("/open/").status_code == 200
    text = log.read_text()  # logging flushes each line as it is written
    assert text.count(MISNAMED) == 1, text  # once for the process, not per request
    assert "account_login'" not in text  # the right name is not reported
    assert "Traceback" not in text, text
