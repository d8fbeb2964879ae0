"""Where an operator sees which vendor and which component decide: the flag endpoint, the
start-up line, ``failopen status`` and ``watch``. The spec's vendor's output stays as it was."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from failopen.integrations._announce import announce

from failopen import Config
from failopen.cli import main
from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage
from failopen.web import flag_payload

URL = "https://status.test"


def runtime(page: FakeStatusPage, **settings: Any) -> FailOpen:
    return FailOpen(Config(status_url=URL, **settings), status_transport=page.transport())


def test_the_flag_endpoint_names_the_vendor_and_the_component_that_decides() -> None:
    page = FakeStatusPage()
    fo = runtime(page, vendor="turnstile", global_component=page.global_id)
    try:
        before = flag_payload(fo.state, poll=fo.watcher)
        assert before["vendor"] == "turnstile"
        assert before["component"] == {"id": page.global_id, "name": None}  # as configured
        fo.poll_now()
        after = flag_payload(fo.state, poll=fo.watcher)
        assert after["component"] == {"id": page.global_id, "name": "Global"}
        json.dumps(after)
    finally:
        fo.stop()


def test_the_default_vendor_is_named_too_and_its_keys_stay() -> None:
    page = FakeStatusPage()
    fo = runtime(page)
    try:
        fo.poll_now()
        payload = flag_payload(fo.state, poll=fo.watcher)
        assert payload["vendor"] == "enforcement"
        assert payload["component"] == {"id": page.global_id, "name": "Global"}
        assert {"enforce", "source", "reason", "since", "stale", "impaired_regions"} <= set(payload)
    finally:
        fo.stop()


def test_the_start_up_line_names_another_vendor(caplog: pytest.LogCaptureFixture) -> None:
    page = FakeStatusPage()
    logger = logging.getLogger("failopen.test-start-up")
    for vendor, named in (("hcaptcha", "vendor: hCaptcha; "), ("enforcement", None)):
        fo = runtime(page, vendor=vendor, global_component=page.global_id)
        try:
            with caplog.at_level(logging.INFO, logger=logger.name):
                announce(logger, fo, adapter="ASGI", protects="POST on /login", nothing_hint="")
        finally:
            fo.stop()
        line = caplog.records[-1]
        assert line.__dict__["vendor"] == vendor
        if named:
            assert named in line.getMessage()
        else:
            assert "vendor" not in line.getMessage()  # the default's line, as it always was


def test_the_probe_alone_is_said_as_the_evidence(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("failopen.test-start-up")
    fo = FailOpen(Config(vendor="recaptcha", evidence=frozenset({"probe"}), private_key="k",
                         outage_policy="closed"))
    try:
        with caplog.at_level(logging.INFO, logger=logger.name):
            announce(logger, fo, adapter="WSGI", protects="POST on /login", nothing_hint="")
    finally:
        fo.stop()
    assert "evidence: the verify probe alone" in caplog.records[-1].getMessage()


def test_status_names_the_vendor_and_component(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    page = FakeStatusPage()
    monkeypatch.setenv("FAILOPEN_VENDOR", "turnstile")
    monkeypatch.setenv("FAILOPEN_GLOBAL_COMPONENT", page.global_id)
    with page.serve() as server:
        assert main(["status", "--status-url", server.url]) == 0
        text = capsys.readouterr().out
        assert text.splitlines()[0] == (f"watching Turnstile: {server.url}, component "
                                        f"{page.global_id}")
        assert main(["status", "--status-url", server.url, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["vendor"] == "turnstile"


def test_status_lists_only_the_impaired_of_hundreds(capsys: pytest.CaptureFixture[str]) -> None:
    regions = tuple(f"pop-{n:03d}" for n in range(300))
    page = FakeStatusPage(regions=regions)
    page.set_region("pop-007", "major_outage")
    with page.serve() as server:
        main(["status", "--status-url", server.url])
    lines = capsys.readouterr().out.splitlines()
    assert "  299 of 300 other components operational; the rest:" in lines
    assert "  pop-007: major_outage" in lines
    assert len(lines) < 10
