"""The fake vendor script: served where the snippet looks, modes switched at run time, tokens the
fake verify API accepts. Its JavaScript runs in Chromium in tests/browser/."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from failopen.testing import FakeVendorScript, FakeVerifyAPI
from failopen.testing._server import FakeRequest

FAILOPEN = Path(sys.executable).with_name("failopen")


def get(vendor: FakeVendorScript, path: str = "/v2/test-public-key/api.js") -> tuple[int, str]:
    reply = vendor.handler(FakeRequest("GET", path, {}, {}, b""))
    assert isinstance(reply.body, bytes)
    return reply.status, reply.body.decode()


def script_config(source: str) -> dict[str, object]:
    match = re.search(r"var cfg = (\{.*?\}), me", source)
    assert match, source
    data: dict[str, object] = json.loads(match.group(1))
    return data


def test_the_script_is_served_where_the_snippet_asks_for_it() -> None:
    vendor = FakeVendorScript()
    status, source = get(vendor)
    assert status == 200
    assert 'getAttribute("data-callback")' in source and "setConfig" in source
    assert "eval(" not in source and "Function(" not in source  # runs under a strict CSP
    assert vendor.script_requests == 1 and vendor.public_keys == ["test-public-key"]
    for path in ("/v2//api.js", "/v2/k/other.js", "/v3/k/api.js", "/v2/k/api.js/x"):
        assert get(vendor, path)[0] == 404
    assert vendor.script_requests == 1


def test_every_served_script_carries_fresh_tokens_the_verify_api_accepts() -> None:
    api = FakeVerifyAPI()
    vendor = FakeVendorScript(verify_api=api)
    first, second = (script_config(get(vendor)[1])["tokens"] for _ in range(2))
    assert isinstance(first, list) and isinstance(second, list)
    assert not set(first) & set(second)
    with httpx.Client(transport=api.transport(), base_url="https://verify.test") as client:
        answer = client.post(api.path, json={"private_key": api.private_key,
                                             "session_token": first[0]}).json()
    assert answer["session_details"]["verified"] is True
    # Without a verify API: the token `failopen emulate verify` accepts.
    assert script_config(get(FakeVendorScript())[1])["tokens"] == [FakeVerifyAPI.GOOD]


def test_modes_switch_at_run_time() -> None:
    vendor = FakeVendorScript()
    vendor.set_mode("http404")
    assert get(vendor)[0] == 404
    vendor.set_mode("error_then_ok:2")
    assert script_config(get(vendor)[1])["errors"] == 2
    for mode in ("silent", "error", "failed"):
        vendor.set_mode(mode)
        assert script_config(get(vendor)[1])["mode"] == mode
    vendor.set_mode("slow:250")
    reply = vendor.handler(FakeRequest("GET", "/v2/k/api.js", {}, {}, b""))
    assert reply.delay == 0.25 and reply.status == 200
    assert vendor.script_requests == 6
    vendor.reset()
    assert (vendor.mode, vendor.script_requests, vendor.public_keys) == ("ok", 0, [])


@pytest.mark.parametrize("mode", ["", "slow", "slow:", "slow:-1", "error_then_ok:x", "ok:1",
                                  "meltdown", "slow:١"])
def test_an_unknown_mode_is_refused_with_the_choices(mode: str) -> None:
    vendor = FakeVendorScript()
    with pytest.raises(ValueError, match="error_then_ok:N"):
        vendor.set_mode(mode)
    assert vendor.mode == "ok"


def test_the_fixture_serves_it_on_loopback(fake_vendor_script: FakeVendorScript) -> None:
    assert fake_vendor_script.url.startswith("http://127.0.0.1:")
    answer = httpx.get(fake_vendor_script.url + "/v2/k/api.js", timeout=5)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/javascript")
    assert answer.headers["cache-control"] == "no-store"  # modes change between page loads
    assert fake_vendor_script.verify_api is not None
    with pytest.raises(RuntimeError, match="serve"):
        _ = FakeVendorScript().url


def test_emulate_vendor_serves_until_sigterm() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    proc = subprocess.Popen([str(FAILOPEN), "emulate", "vendor", "--port", "0", "--mode",
                             "error_then_ok:1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    try:
        banner = [proc.stdout.readline() for _ in range(3)]
        url = banner[2].strip().removeprefix("FAILOPEN_VENDOR_URL=")
        assert url.startswith("http://127.0.0.1:"), banner
        answer = httpx.get(url + "/v2/k/api.js", timeout=5)
        assert script_config(answer.text)["errors"] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert banner[1].strip() == "mode: error_then_ok:1"


def test_emulate_vendor_refuses_an_unknown_mode() -> None:
    done = subprocess.run([str(FAILOPEN), "emulate", "vendor", "--mode", "meltdown"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "error_then_ok:N" in done.stderr
    assert "Traceback" not in done.stderr
