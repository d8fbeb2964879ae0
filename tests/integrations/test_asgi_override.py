"""POST <prefix>/override: refused when the store reaches one worker, refusals paced in the log."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from _asgi_kit import ADMIN_TOKEN, Recorder, Stack
from failopen.integrations.asgi import FailOpenMiddleware

from failopen import Config
from failopen.engine.flag import EnforcementFlag
from failopen.stores import open_store

pytestmark = pytest.mark.anyio

Make = Callable[..., Stack]


def bearer(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("body", [{"enforce": True}, {"enforce": False, "ttl": 60},
                                  {"enforce": None}])
async def test_an_override_in_the_memory_store_is_refused_not_answered_200(
    make_asgi: Make, body: dict[str, object]
) -> None:
    # Under three workers, "200 enforce: true" from one left two admitting tokenless log-ins.
    stack = make_asgi(admin_token=ADMIN_TOKEN)  # store: memory: (the default)
    before = stack.runtime.state
    response = await stack.client.post("/failopen/override", headers=bearer(), json=body)
    assert response.status_code == 409
    assert response.headers["cache-control"] == "no-store"
    error = response.json()
    assert set(error) == {"error"} and set(error["error"]) == {"code", "message"}
    assert error["error"]["code"] == "store_not_shared"
    assert "FAILOPEN_STORE=file:///" in error["error"]["message"]
    assert stack.runtime.state == before and stack.runtime.flag.override is None


async def test_authentication_comes_before_the_store_is_mentioned(make_asgi: Make) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN)
    response = await stack.client.post("/failopen/override", headers=bearer("x" * 30),
                                       json={"enforce": False})
    assert response.status_code == 403 and "store" not in response.text


async def test_a_shared_store_override_reaches_every_worker(
    make_asgi: Make, tmp_path: Path
) -> None:
    store = f"file://{tmp_path / 'override.json'}"
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=store)
    response = await stack.client.post("/failopen/override", headers=bearer(),
                                       json={"enforce": True, "reason": "attack"})
    assert response.status_code == 200
    other_worker = EnforcementFlag(store=open_store(store))
    assert other_worker.state.source == "override" and other_worker.state.enforce is True


async def test_300_wrong_admin_tokens_write_one_warning_line(
    make_asgi: Make, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=f"file://{tmp_path / 'o.json'}")
    with caplog.at_level(logging.DEBUG, logger="failopen"):
        caplog.clear()
        for i in range(300):
            response = await stack.client.post(
                "/failopen/override", headers=bearer("adm-" + f"{i:040d}"),
                json={"enforce": False})
            assert response.status_code == 403
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "wrong admin token" in lines[0].getMessage()
    assert ADMIN_TOKEN not in caplog.text
    assert stack.runtime.state.enforce is True


def test_construction_warns_when_the_override_route_cannot_reach_other_workers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = Config(status_url="https://status.test", admin_token=ADMIN_TOKEN)
    with caplog.at_level(logging.WARNING, logger="failopen.asgi"):
        FailOpenMiddleware(Recorder(), config=config)
    warned = [r.getMessage() for r in caplog.records if "FAILOPEN_STORE" in r.getMessage()]
    assert len(warned) == 1 and "memory:" in warned[0] and "override" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="failopen.asgi"):
        FailOpenMiddleware(Recorder(), config=config.replace(admin_token=None))
    assert not [r for r in caplog.records if "FAILOPEN_STORE" in r.getMessage()]
