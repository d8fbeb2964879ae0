"""Django under a WSGI server that runs several workers, the outage rate limit in memory: one
WARNING per process on its first protected request (issue 31, item 10). Driven through Django's
own WSGIHandler with the environ a server builds; Django's test client claims
``wsgi.multiprocess`` for a test run's one process, so it is not taken at its word."""

from __future__ import annotations

import io
import logging
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.test import Client

EVENT = "failopen.memory_per_worker"


def _post(multiprocess: bool) -> str:
    environ: dict[str, Any] = {"REQUEST_METHOD": "POST", "PATH_INFO": "/login/",
                               "wsgi.input": io.BytesIO(b""), "CONTENT_LENGTH": "0",
                               "HTTP_ACCEPT": "application/json", "HTTP_HOST": "testserver"}
    setup_testing_defaults(environ)
    environ["wsgi.multiprocess"] = multiprocess
    seen: list[str] = []

    def start(status: str, headers: Any, exc_info: Any = None) -> None:
        seen.append(status)

    b"".join(WSGIHandler()(environ, start))
    return seen[0]


def _said(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == EVENT]


@pytest.mark.parametrize(("multiprocess", "said"), [(True, 1), (False, 0)])
def test_a_server_with_several_workers_is_told_once(
        use_failopen: Any, caplog: pytest.LogCaptureFixture, multiprocess: bool,
        said: int) -> None:
    use_failopen(PROTECTED_PATHS=["/login/"])
    with caplog.at_level(logging.WARNING, logger="failopen"):
        statuses = [_post(multiprocess) for _ in range(3)]
    assert statuses == ["403 Forbidden"] * 3  # token-less, enforcement on
    records = _said(caplog)
    assert len(records) == said
    if said:
        assert records[0].adapter == "Django"  # type: ignore[attr-defined]
        assert "each worker admits its own 20/minute" in records[0].getMessage()


def test_django_s_test_client_is_not_taken_at_its_word(
        use_failopen: Any, caplog: pytest.LogCaptureFixture) -> None:
    use_failopen(PROTECTED_PATHS=["/login/"])
    with caplog.at_level(logging.WARNING, logger="failopen"):
        assert Client().post("/login/").status_code == 403
    assert _said(caplog) == []
