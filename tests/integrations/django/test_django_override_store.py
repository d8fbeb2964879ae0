"""Django's override view shares the ASGI route's rules: no 200 that only one worker obeys, and a
flood of wrong admin tokens is one log line."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest

ADMIN_TOKEN = "an-admin-token-long-enough-to-count"


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()  # sync and async test clients both


def override(client: Any, body: Any, **headers: str) -> Any:
    return client.post("/failopen/override", json.dumps(body), content_type="application/json",
                       headers=headers)


@pytest.mark.parametrize("body", [{"enforce": True}, {"enforce": False, "ttl": 60},
                                  {"enforce": None}, "not an object"])
def test_an_override_in_the_memory_store_is_409(
    client: Any, use_failopen: Any, body: Any
) -> None:
    runtime = use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN)  # STORE: memory:
    before = runtime.state
    response = override(client, body, Authorization=f"Bearer {ADMIN_TOKEN}")
    assert response.status_code == 409
    assert response["Cache-Control"] == "no-store"
    error = response.json()
    assert set(error) == {"error"} and set(error["error"]) == {"code", "message"}
    assert error["error"]["code"] == "store_not_shared"
    assert "FAILOPEN_STORE=file:///" in error["error"]["message"]
    assert runtime.state == before and runtime.flag.override is None


def test_the_flag_endpoint_is_unaffected_by_the_memory_store(
    client: Any, use_failopen: Any
) -> None:
    use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN)
    response = client.get("/failopen/flag")
    assert response.status_code == 200 and response.json()["enforce"] is True


def test_300_wrong_admin_tokens_write_one_warning_line(
    client: Any, use_failopen: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from failopen.integrations.django import views

    use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN)
    # A fresh pacer: an earlier test's refusal must not hold this one's first line back.
    views._refusals = views.RefusalLog(views.logger)
    with caplog.at_level(logging.DEBUG, logger="failopen"):
        for i in range(300):
            response = override(client, {"enforce": False}, Authorization=f"Bearer wrong-{i}")
            assert response.status_code == 403
    lines = [r for r in caplog.records
             if r.levelno >= logging.WARNING and r.name.startswith("failopen")]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "wrong admin token" in lines[0].getMessage()
