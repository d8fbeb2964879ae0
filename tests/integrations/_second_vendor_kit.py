"""A site with Turnstile as its vendor and hCaptcha as the second vendor (issue 29, part B).

Only the vendors are fakes (the test kit's, faithful to their documented verify APIs and the
Cloudflare status page), reached through their preset URLs over in-process transports; the
runtime, the gate, the rate limit and the adapters are failopen's own. ``/signup`` is a
``fallback`` route, ``/login`` ``open``, ``/raw`` ``closed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from failopen import Config
from failopen.runtime import FailOpen
from failopen.testing import FakeCloudflareStatusPage
from failopen.testing.providers import FakeHCaptchaVerify, FakeTurnstileVerify

PROTECTED = ("/login", "/signup", "/raw")
ROUTES = "/signup=fallback,/login=open,/raw=closed"
HCAPTCHA_FIELD = "h-captcha-response"
TURNSTILE_FIELD = "cf-turnstile-response"


@dataclass
class Site:
    """The runtime and the three fakes behind it."""

    runtime: FailOpen
    turnstile: FakeTurnstileVerify
    hcaptcha: FakeHCaptchaVerify
    page: FakeCloudflareStatusPage

    def outage(self) -> None:
        """Turnstile's component in an outage on Cloudflare's page: enforcement turns off."""
        self.page.set_turnstile("major_outage")
        self.runtime.poll_now()
        assert not self.runtime.state.enforce

    def healthy(self) -> None:
        self.page.set_turnstile("operational")
        for _ in range(self.runtime.config.close_after):
            self.runtime.poll_now()
        assert self.runtime.state.enforce


class Router(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Each vendor's fake at its preset host, as the network would route them (sync and async)."""

    def __init__(self, turnstile: FakeTurnstileVerify, hcaptcha: FakeHCaptchaVerify) -> None:
        self.hosts = {"challenges.cloudflare.com": turnstile.transport(),
                      "api.hcaptcha.com": hcaptcha.transport()}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.hosts[request.url.host].handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.hosts[request.url.host].handle_async_request(request)


def site_settings(**changes: Any) -> dict[str, Any]:
    """Config fields of the site (``changes`` win)."""
    settings: dict[str, Any] = {
        "vendor": "turnstile", "private_key": FakeTurnstileVerify.DEFAULT_PRIVATE_KEY,
        "protected_paths": PROTECTED, "outage_policy_routes": ROUTES,
        "fallback_vendor": "hcaptcha",
        "fallback_private_key": FakeHCaptchaVerify.DEFAULT_PRIVATE_KEY,
        "fallback_public_key": FakeHCaptchaVerify.DEFAULT_PUBLIC_KEY,
        "poll_interval": 3600.0, "confirm_ttl": 0.001, "retry_after": 7, "metrics": "off",
    }
    settings.update(changes)
    return settings


def build_site(**changes: Any) -> Site:
    """A runtime over fresh fakes (not started: tests poll the page themselves)."""
    turnstile, hcaptcha, page = FakeTurnstileVerify(), FakeHCaptchaVerify(), \
        FakeCloudflareStatusPage()
    transport = Router(turnstile, hcaptcha)
    runtime = FailOpen(Config(**site_settings(**changes)), status_transport=page.transport(),
                       verify_transport=transport, verify_async_transport=transport)
    runtime.poll_now()  # the first reading: operational
    assert runtime.state.enforce
    return Site(runtime, turnstile, hcaptcha, page)
