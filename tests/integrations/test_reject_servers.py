"""``reject=`` under real servers: a Starlette site under uvicorn and a Flask site under
gunicorn (sync workers), against the test kit's fakes on loopback, answer a refused log-in with
their own log-in page: its status, the name typed, ``no-store``, and ``Retry-After`` on a 503.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _refusal_kit import BROWSER, FORM, MESSAGES, PASSWORD
from _serving import fakes_env, served

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

HERE = Path(__file__).resolve().parent


@pytest.fixture(params=["uvicorn", "gunicorn"])
def site(request: pytest.FixtureRequest, fake_status_page: FakeStatusPage,
         fake_verify_api: FakeVerifyAPI, tmp_path: Path) -> Iterator[str]:
    """One of the two sites under its server; killed whatever the test does."""
    port = free_port()
    env = fakes_env(fake_status_page, fake_verify_api, RETRY_AFTER="9")
    if request.param == "uvicorn":
        argv = [sys.executable, "-m", "uvicorn", "_reject_starlette:app", "--app-dir", str(HERE),
                "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    else:
        argv = [sys.executable, "-m", "gunicorn", "-w", "1", "-k", "sync",
                "-b", f"127.0.0.1:{port}", "--pythonpath", str(HERE), "_reject_flask:app"]
    with served(argv, port=port, env=env, log_path=tmp_path / "server.log",
                ready_path="/health", cwd=tmp_path) as url:
        yield url


@pytest.mark.slow
def test_a_refused_log_in_gets_the_sites_own_page(
    site: str, fake_verify_api: FakeVerifyAPI
) -> None:
    with httpx.Client(base_url=site, timeout=10, headers={"Accept": BROWSER}) as client:
        refused = client.post("/login", data=FORM)
        assert refused.status_code == 403, refused.text
        assert f'<p class="error">{MESSAGES[403]}</p>' in refused.text
        assert 'value="ann"' in refused.text and PASSWORD not in refused.text
        assert refused.headers["cache-control"] == "no-store"
        assert "retry-after" not in refused.headers

        fake_verify_api.set_fault("503")
        unavailable = client.post("/login", data=FORM,
                                  headers={"X-Enforcement-Token": FakeVerifyAPI.GOOD})
        assert unavailable.status_code == 503
        assert MESSAGES[503] in unavailable.text and 'value="ann"' in unavailable.text
        assert unavailable.headers["retry-after"] == "9"
        assert unavailable.headers["cache-control"] == "no-store"

        fake_verify_api.set_fault(None)
        admitted = client.post("/login", data=FORM,
                               headers={"X-Enforcement-Token": FakeVerifyAPI.GOOD})
        assert admitted.json() == {"ok": True, "outcome": "valid"}
