"""The captcha vendors' browser-script fakes: served at each vendor's path, modes switched at run
time, every render and challenge recorded, tokens the matching verify fake accepts once. Their
JavaScript runs in Chromium in tests/browser/test_browser_script_fakes.py."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import pytest
from _widget_kit import accepted, verify

from failopen.testing import (
    BrowserScriptFake,
    ChallengeAttempt,
    WidgetRender,
    fake_browser_script,
    fake_verify_api,
)
from failopen.testing._server import FakeRequest, Reply
from failopen.testing.browser_scripts import SCRIPTS
from failopen.testing.providers import FAKES

VENDORS = sorted(SCRIPTS)
HOST = {"host": "127.0.0.1:4000"}
PAGE = "http://127.0.0.1:5000"


def get(fake: BrowserScriptFake, path: str, **query: str) -> Reply:
    return fake.handler(FakeRequest("GET", path, {k: [v] for k, v in query.items()}, HOST, b""))


def config(reply: Reply) -> dict[str, Any]:
    assert isinstance(reply.body, bytes)
    match = re.search(r"var cfg = (\{.*?\});\n", reply.body.decode())
    assert match, reply.body[:300]
    data: dict[str, Any] = json.loads(match.group(1))
    return data


def solve(fake: BrowserScriptFake, outcome: str = "ok", **fields: str) -> dict[str, Any]:
    """What one challenge frame posts to the page."""
    query = {"n": "nonce", "p": PAGE, "h": "127.0.0.1", "o": outcome, "t": "1", **fields}
    reply = fake.handler(FakeRequest("GET", "/__fake__/challenge",
                                     {k: [v] for k, v in query.items()}, HOST, b""))
    assert reply.status == 200 and isinstance(reply.body, bytes)
    match = re.search(r"parent\.postMessage\((\{.*\}), (\".*\")\);", reply.body.decode())
    assert match, reply.body
    assert json.loads(match.group(2)) == PAGE  # posted to the page's origin only
    message: dict[str, Any] = json.loads(match.group(1))
    assert message["fakeCaptcha"] == "nonce"
    return message


@pytest.mark.parametrize("vendor", VENDORS)
def test_each_script_is_served_at_the_vendors_path_and_nowhere_else(vendor: str) -> None:
    fake = fake_browser_script(vendor)
    reply = get(fake, fake.script_path, render="explicit", onload="ready")
    assert reply.status == 200
    assert ("Content-Type", "text/javascript; charset=utf-8") in reply.headers
    assert isinstance(reply.body, bytes)
    source = reply.body.decode()
    assert "eval(" not in source and "Function(" not in source  # runs under a strict CSP
    assert config(reply)["query"] == {"render": "explicit", "onload": "ready"}
    assert config(reply)["origin"] == "http://127.0.0.1:4000"
    for path in ("/", "/api.js", fake.script_path + "/x", "/v2/k/api.js"):
        assert get(fake, path).status == 404
    assert fake.script_requests == 1
    assert fake.script_queries == [{"render": "explicit", "onload": "ready"}]


def test_the_paths_are_the_vendors_own() -> None:
    paths = {vendor: SCRIPTS[vendor].script_path for vendor in VENDORS}
    assert paths == {
        "turnstile": "/turnstile/v0/api.js", "hcaptcha": "/1/api.js",
        "recaptcha": "/recaptcha/api.js", "recaptcha-enterprise": "/recaptcha/enterprise.js",
        "friendly-captcha": "/npm/@friendlycaptcha/sdk@0.1.27/site.min.js",
    }
    friendly = fake_browser_script("friendly-captcha")
    for path in ("/npm/@friendlycaptcha/sdk@0.1.14/site.compat.min.js",
                 "/npm/@friendlycaptcha/sdk/site.min.js"):
        assert get(friendly, path).status == 200
    assert get(friendly, "/npm/@friendlycaptcha/sdk@1/widget.min.js").status == 404


@pytest.mark.parametrize("vendor", VENDORS)
def test_modes_switch_at_run_time(vendor: str) -> None:
    fake = fake_browser_script(vendor)
    fake.set_mode("http404")
    assert get(fake, fake.script_path).status == 404
    fake.set_mode("error_then_ok:2")
    assert config(get(fake, fake.script_path))["errors"] == 2
    fake.set_mode("expire:300")
    assert config(get(fake, fake.script_path))["expire_ms"] == 300
    for mode in ("silent", "error", "ok"):
        fake.set_mode(mode)
        assert config(get(fake, fake.script_path))["mode"] == mode
    fake.set_mode("slow:250")
    reply = get(fake, fake.script_path)
    assert reply.delay == 0.25 and reply.status == 200
    assert fake.script_requests == 7
    fake.reset()
    assert (fake.mode, fake.script_requests, fake.renders, fake.challenges) == ("ok", 0, [], [])


@pytest.mark.parametrize("mode", ["failed", "expire", "error_then_ok", "slow:x", "meltdown", ""])
def test_a_mode_the_fakes_cannot_play_is_refused(mode: str) -> None:
    fake = fake_browser_script("turnstile")
    with pytest.raises(ValueError, match="expire:MS"):
        fake.set_mode(mode)
    assert fake.mode == "ok"


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_solved_challenge_hands_out_a_token_the_verify_fake_accepts_once(vendor: str) -> None:
    api = fake_verify_api(vendor)
    fake = fake_browser_script(vendor, verify_api=api)
    message = solve(fake, w="w1", k=api.public_key, s="normal")
    token = message["token"]
    assert message["error"] is None and isinstance(token, str)
    assert accepted(api, token) and not accepted(api, token)
    assert fake.challenges == [ChallengeAttempt(widget="w1", sitekey=api.public_key, action=None,
                                                size="normal", outcome="token", token=token,
                                                attempt=1)]
    assert fake.tokens == [token]


@pytest.mark.parametrize("vendor", VENDORS)
def test_tokens_minted_without_a_verify_fake_are_accepted_by_one_with_the_key(vendor: str) -> None:
    keyed = fake_browser_script(vendor, signing_key="k-123")
    token = solve(keyed)["token"]
    assert accepted(fake_verify_api(vendor, private_key="k-123"), token)
    assert not accepted(fake_verify_api(vendor), token)  # another key: not this fake's token
    # No key at all: the verify fake's default key, so a default verify fake (here or in another
    # process) accepts it.
    api = fake_verify_api(vendor)
    token = solve(fake_browser_script(vendor))["token"]
    assert accepted(api, token) and not accepted(api, token)


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_failed_challenge_posts_the_vendors_error_code_and_no_token(vendor: str) -> None:
    fake = fake_browser_script(vendor)
    message = solve(fake, "error", w="w1")
    assert message == {"fakeCaptcha": "nonce", "token": None, "error": fake.error_code}
    assert [c.outcome for c in fake.challenges] == ["error"] and fake.tokens == []


def test_the_error_codes_are_the_vendors() -> None:
    codes = {vendor: SCRIPTS[vendor].error_code for vendor in VENDORS}
    assert codes == {"turnstile": "200500", "hcaptcha": "network-error",
                     "recaptcha": "network", "recaptcha-enterprise": "network",
                     "friendly-captcha": "network_error"}


def test_a_challenge_frame_posts_only_to_an_origin() -> None:
    fake = fake_browser_script("turnstile")
    query = {"n": ["x"], "p": ["javascript:alert(1)"], "o": ["ok"]}
    reply = fake.handler(FakeRequest("GET", "/__fake__/challenge", query, HOST, b""))
    assert reply.status == 400 and fake.challenges == []


def test_renders_are_recorded() -> None:
    fake = fake_browser_script("turnstile")
    query = {"w": ["cf-1"], "k": ["site"], "a": ["login"], "s": ["compact"], "e": ["execute"],
             "n": ["x"], "p": [PAGE]}
    reply = fake.handler(FakeRequest("GET", "/__fake__/widget", query, HOST, b""))
    assert reply.status == 200
    assert fake.renders == [WidgetRender(widget="cf-1", sitekey="site", size="compact",
                                         action="login", start="execute")]


def test_turnstile_tokens_carry_the_action_cdata_and_hostname() -> None:
    api = fake_verify_api("turnstile")
    fake = fake_browser_script("turnstile", verify_api=api)
    token = solve(fake, a="login", x="user-7")["token"]
    answer = verify(api, token)
    assert (answer["success"], answer["action"], answer["cdata"], answer["hostname"]) == (
        True, "login", "user-7", "127.0.0.1")


def test_recaptcha_v3_tokens_carry_the_action_and_the_score_the_test_chose() -> None:
    api = fake_verify_api("recaptcha")
    fake = fake_browser_script("recaptcha", verify_api=api, score=0.3)
    answer = verify(api, solve(fake, k="6Lkey", a="login", v="3")["token"])
    assert (answer["success"], answer["action"], answer["score"]) == (True, "login", 0.3)
    fake.score = None  # the verify fake's default
    assert verify(api, solve(fake, a="signup", v="3")["token"])["score"] == 0.9
    v2 = verify(api, solve(fake, k="6Lkey", v="2")["token"])  # a checkbox: no score, no action
    assert v2["success"] is True and "score" not in v2 and "action" not in v2


def test_recaptcha_enterprise_tokens_are_bound_to_their_site_key() -> None:
    api = fake_verify_api("recaptcha-enterprise")
    fake = fake_browser_script("recaptcha-enterprise", verify_api=api, score=0.2)
    token = solve(fake, k=api.public_key, a="login", v="3")["token"]
    answer = verify(api, token)
    assert answer["tokenProperties"]["valid"] is True
    assert (answer["tokenProperties"]["action"], answer["riskAnalysis"]["score"]) == ("login", 0.2)
    other = solve(fake, k="6Lanother-site", a="login", v="3")["token"]
    assert verify(api, other)["tokenProperties"]["invalidReason"] == "SITE_MISMATCH"


def test_recaptcha_v3_rejection_delay_reaches_the_script() -> None:
    fake = fake_browser_script("recaptcha", v3_timeout=None)
    assert config(get(fake, "/recaptcha/api.js", render="6Lkey"))["v3_timeout_ms"] is None
    enterprise = fake_browser_script("recaptcha-enterprise", v3_timeout=0.25)
    assert config(get(enterprise, "/recaptcha/enterprise.js"))["v3_timeout_ms"] == 250
    assert config(get(enterprise, "/recaptcha/enterprise.js"))["namespace"] == "enterprise"


def test_the_registry_names_every_vendor_and_refuses_others() -> None:
    assert set(SCRIPTS) == set(FAKES)  # a browser half for every verify fake
    with pytest.raises(ValueError, match="choose from friendly-captcha, hcaptcha"):
        fake_browser_script("arkose")
    with pytest.raises(ValueError, match="needs the turnstile verify fake"):
        fake_browser_script("turnstile", verify_api=fake_verify_api("hcaptcha"))


def test_served_on_loopback_at_its_url() -> None:
    import httpx

    fake = fake_browser_script("hcaptcha")
    with pytest.raises(RuntimeError, match="serve"):
        _ = fake.url
    with fake.serve():
        answer = httpx.get(fake.script_url + "?render=explicit&onload=" + quote("go"))
        assert answer.status_code == 200 and "window.hcaptcha" in answer.text
        assert answer.headers["access-control-allow-origin"] == "*"
    assert fake.script_queries == [{"render": "explicit", "onload": "go"}]
