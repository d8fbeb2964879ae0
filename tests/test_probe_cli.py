"""``failopen watch --json`` shows the verify probe (issue 13)."""

from __future__ import annotations

import json

import pytest

from failopen.cli.command import main
from failopen.testing import FakeStatusPage, FakeVerifyAPI


def watch(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    capsys.readouterr()
    assert main(["watch", "--interval", "0.05", "--json", "--count", "4"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_watch_json_has_the_probe_block(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI,
) -> None:
    monkeypatch.setenv("FAILOPEN_STATUS_URL", fake_status_page.url)
    monkeypatch.setenv("FAILOPEN_VERIFY_URL", fake_verify_api.verify_url)
    monkeypatch.setenv("FAILOPEN_PRIVATE_KEY", fake_verify_api.private_key)
    monkeypatch.setenv("FAILOPEN_EVIDENCE", "status,probe")
    lines = watch(capsys)
    assert len(lines) == 4
    probe = lines[-1]["probe"]
    assert isinstance(probe, dict)
    assert {"enabled", "last", "last_at", "failures_in_a_row", "healthy_in_a_row", "reason",
            "interval", "open_after", "sent", "counted", "requests"} <= set(probe)
    assert probe["enabled"] is True and probe["open_after"] == 3 and probe["interval"] == 0.05
    assert probe["sent"] >= 1 and probe["last"] == "healthy"
    # Two probe spacings; a spacing is never shorter than the verify timeout (3 s): a failing
    # probe takes that long, so the streak spans at least that much (the review of session 5).
    assert probe["requests"] == {"window_seconds": 6.0, "verify_calls": 0, "unavailable": 0,
                                 "valid": 0}
    assert fake_verify_api.private_key not in json.dumps(lines)


def test_watch_json_probe_is_null_with_status_evidence(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    fake_status_page: FakeStatusPage,
) -> None:
    monkeypatch.setenv("FAILOPEN_STATUS_URL", fake_status_page.url)
    lines = watch(capsys)
    assert all(line["probe"] is None for line in lines)
