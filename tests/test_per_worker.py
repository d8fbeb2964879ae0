"""What a process keeps in memory, and the one WARNING when its server runs several workers
(issue 31, item 10; the real gunicorn is in tests/integrations/test_wsgi_gunicorn_workers.py)."""

from __future__ import annotations

import io
import logging
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
from failopen.integrations.wsgi import FailOpenMiddleware

from failopen import Config
from failopen.observe.workers import RATE, USED, PerWorkerMemory
from failopen.runtime import FailOpen

VERIFY = {"verify_url": "https://verify.invalid/verify", "private_key": "k",
          "protected_paths": ("/login",)}


def _runtime(**changes: Any) -> FailOpen:
    return FailOpen(Config(**VERIFY, **changes))


@pytest.mark.parametrize(("changes", "kept"), [
    ({}, (RATE,)),
    ({"outage_rate": "none"}, ()),
    ({"outage_policy_routes": "/login=fallback", "fallback_secret": "s" * 40}, (RATE, USED)),
    ({"outage_rate": "none", "outage_policy_routes": "/login=fallback",
      "fallback_secret": "s" * 40}, (USED,)),
])
def test_what_a_process_keeps_for_itself(changes: dict[str, Any], kept: tuple[str, ...]) -> None:
    runtime = _runtime(**changes)
    try:
        assert runtime.per_worker.kept == kept
        assert runtime.per_worker.pending is bool(kept)
    finally:
        runtime.stop()


def _request(app: FailOpenMiddleware, multiprocess: Any) -> None:
    environ: dict[str, Any] = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "wsgi.input":
                               io.BytesIO()}
    setup_testing_defaults(environ)
    environ["wsgi.multiprocess"] = multiprocess
    b"".join(app(environ, lambda *a: None))


def _app() -> FailOpenMiddleware:
    def inner(environ: Any, start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [b"ok"]

    return FailOpenMiddleware(inner, config=Config(**VERIFY))


@pytest.mark.parametrize(("first", "said"), [(True, 1), (False, 0), ("1", 0), (None, 0)])
def test_the_first_request_s_word_is_the_one_heard(caplog: pytest.LogCaptureFixture,
                                                   first: Any, said: int) -> None:
    app = _app()
    try:
        with caplog.at_level(logging.WARNING, logger="failopen"):
            for multiprocess in (first, True, True):  # later requests are not asked
                _request(app, multiprocess)
        records = [r for r in caplog.records
                   if getattr(r, "event", None) == "failopen.memory_per_worker"]
        assert len(records) == said
        if said:
            assert records[0].adapter == "WSGI" and records[0].kept == [RATE]  # type: ignore[attr-defined]
    finally:
        app.runtime.stop()


def test_nothing_kept_is_never_pending() -> None:
    nothing = PerWorkerMemory((), rate="20/minute")
    assert nothing.pending is False
