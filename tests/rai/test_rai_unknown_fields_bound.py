"""A vendor (or a proxy in front of it) that sends made-up top-level fields by the thousand: the
sync still delivers every record, and names at most 50 of them per kind, each at most 100
characters, with one more WARNING saying there are more: the log, ``--json`` and the manifest
stay small whatever the answers hold."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from _sync_helpers import SECRET, Runner, lines, manifests, sync_args

from failopen.testing._server import FakeRequest, Reply
from failopen.testing.rai_emulator import RaiEmulator

SINCE, UNTIL = "2024-05-01T00:00:00Z", "2024-05-08T00:00:00Z"
PER_RECORD = 60  # new made-up fields in each record of every page: more than 50 in one page
LONG = "a" * 5000  # a field name longer than any a summary should carry (sorted first)


class _Inventive(RaiEmulator):
    """Every record of every page gets PER_RECORD fields no page had before, one very long."""

    pages = 0

    def handler(self, request: FakeRequest) -> Reply:
        reply = super().handler(request)
        if reply.status != 200:
            return reply
        body = reply.body if isinstance(reply.body, bytes) else b"".join(reply.body)
        answer: Any = json.loads(body)
        records = next((answer[k] for k in ("cohorts", "sessions") if k in answer), None)
        if not isinstance(records, list):
            return Reply(200, body, reply.headers)
        type(self).pages += 1
        page = type(self).pages
        for record in records:
            record.update({f"made_up_{page}_{n}": n for n in range(PER_RECORD)})
            record[LONG] = True
        return Reply(200, json.dumps(answer).encode(), reply.headers)


@pytest.fixture
def emulator() -> RaiEmulator:
    return _Inventive(client_secret=SECRET)


def test_thousands_of_unknown_fields_name_fifty_per_kind_and_deliver_everything(
    sync: Runner, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="failopen.rai")
    out, state = tmp_path / "out", tmp_path / "state.json"
    out.mkdir()
    run = sync(*sync_args(state, out, "--json", since=SINCE, until=UNTIL))
    assert run.code == 0, run.err
    summary = run.summary()

    # Everything delivered, the made-up fields too: the bound is on naming them.
    sessions = lines(out, "sessions")
    assert len(sessions) == len({s["session_id"] for s in sessions}) == summary["sessions"] > 0
    assert all(LONG in s and sum(k.startswith("made_up_") for k in s) == PER_RECORD
               for s in sessions)

    for kind in ("cohorts", "sessions"):
        named = summary["unknown_fields"][kind]
        assert len(named) == 50, (kind, len(named))
        assert all(len(name) <= 101 for name in named), "a 5,000-character name is cut"
        assert LONG[:100] + "…" in named
    assert summary["unknown_fields_truncated"] == ["cohorts", "sessions"]
    (manifest,) = manifests(out)
    assert manifest["unknown_fields"] == summary["unknown_fields"]
    assert manifest["unknown_fields_truncated"] == ["cohorts", "sessions"]

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    about_fields = [m for m in warnings if "the schema" in m]
    assert len(about_fields) == 2 * 50 + 2, len(about_fields)  # 50 named and "more" per kind
    assert sum("only the first 50" in m for m in about_fields) == 2
    assert max(len(m) for m in about_fields) < 400, "no warning carries a whole long name"

