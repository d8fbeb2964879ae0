"""FAILOPEN['AUDIT_FILE'] through Django's sync and async test clients: the User-Agent and the
client address reach the audit file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from failopen.observe.audit_file import hash_user_agent
from failopen.testing import FakeStatusPage


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


def test_a_bypass_is_written_with_the_hashed_user_agent(
    client: Any, use_failopen: Any, fake_status_page: FakeStatusPage, tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    runtime = use_failopen(AUDIT_FILE=str(path), AUDIT_BACKUPS=2)
    assert runtime is not None
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    response = client.post("/login/", {"username": "ann"},
                           headers={"User-Agent": "Mozilla/5.0 (Django test)"})
    assert response.status_code == 200 and response.json()["failopen"]["bypassed"] is True
    assert runtime.guard.audit.file is not None
    runtime.guard.audit.file.drain()
    lines = [json.loads(raw) for raw in path.read_text().splitlines()]
    # The flag turning off has a line of its own; the request's is the one with a path.
    assert [entry.get("event") for entry in lines] == ["enforcement_off", None]
    line = lines[1]
    assert line["path"] == "/login/" and line["client"] == "127.0.0.1"  # the test clients' address
    assert line["ua"] == hash_user_agent("Mozilla/5.0 (Django test)")
    assert line["window"].startswith("watcher:")
