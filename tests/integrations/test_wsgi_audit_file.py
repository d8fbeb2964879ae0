"""FAILOPEN_AUDIT_FILE through the WSGI middleware (Flask behind it, werkzeug's test client)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from failopen.observe.audit_file import hash_user_agent


def test_a_bypass_reaches_the_audit_file_with_client_and_user_agent(
    make_wsgi: Callable[..., Any], tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    stack = make_wsgi(audit_file=str(path))
    stack.page.set_global("major_outage")
    stack.runtime.poll_now()
    response = stack.client.post("/login", headers={"User-Agent": "curl/8.5"},
                                 environ_base={"REMOTE_ADDR": "192.0.2.44"})
    assert response.status_code == 200
    stack.runtime.guard.audit.file.drain()
    lines = [json.loads(raw) for raw in path.read_text().splitlines()]
    # The flag turning off has a line of its own; the request's is the one with a path.
    assert [entry.get("event") for entry in lines] == ["enforcement_off", None]
    line = lines[1]
    assert line["client"] == "192.0.2.44" and line["ua"] == hash_user_agent("curl/8.5")
    assert line["outcome"] == "bypassed_flag_off"
