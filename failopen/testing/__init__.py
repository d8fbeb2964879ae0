"""Faithful local fakes of the vendor, for failopen's tests, the demo, and your own tests.

* :class:`FakeStatusPage` — the public status page (interface B), with every fault; any list of
  components and groups too (:class:`PageComponent`, :class:`PageInfo`).
* :class:`FakeCloudflareStatusPage`, :class:`FakeHCaptchaStatusPage` — the real pages the
  ``turnstile`` and ``hcaptcha`` presets read: Turnstile among ~330 PoPs in regional groups,
  ``Captcha API`` by name; the same faults and serving.
* :class:`FakeVerifyAPI` — the verify call, with good (each verified once, as the vendor's),
  bad and denied tokens, sessions that time out, and faults.
* :class:`FakeVendorScript` — the vendor's client script (``api.js``) for browser tests.
* :func:`fake_browser_script` — the browser script of Turnstile, hCaptcha, reCAPTCHA (v2, v3),
  reCAPTCHA Enterprise or Friendly Captcha, by name, at the vendor's own path
  (:mod:`failopen.testing.browser_scripts`: the public JavaScript API, modes ``ok``, ``http404``,
  ``silent``, ``error``, ``error_then_ok:N``, ``expire:MS``, ``slow:MS``, and a record of what the
  page rendered and solved).
* :func:`fake_verify_api` — the verify API of Turnstile, hCaptcha, reCAPTCHA, reCAPTCHA
  Enterprise or Friendly Captcha, by name (:mod:`failopen.testing.providers`: one class each,
  with every documented code, single use, scores and actions, and the faults above).
* :class:`RaiEmulator` — the session-intelligence API (interface A).
* :class:`FakeClock` — time that moves only when told to.
* :func:`solve_challenge` — the solution of a fallback challenge, as the browser sends it.
* :class:`LoopbackServer`, :class:`Reply`, :func:`as_transport` — serve any fake on 127.0.0.1,
  or hand it to httpx in-process; :func:`free_port` for a real server your test starts.
* :mod:`failopen.testing.control` — ``GET``/``POST /_control``: change a fake served with
  ``serve(control=True)`` (or by ``failopen emulate``) from another process, loopback only.

pytest fixtures (``fake_status_page``, ``fake_verify_api``, ``fake_vendor_script``,
``fake_clock``, ``failopen_config``, ``rai_emulator``) are registered automatically when failopen
is installed; see :mod:`failopen.testing.pytest_plugin`.
"""

from __future__ import annotations

from failopen.testing._server import FakeRequest, LoopbackServer, Reply, as_transport, free_port
from failopen.testing.browser_scripts import (
    BrowserScriptFake,
    ChallengeAttempt,
    WidgetRender,
    fake_browser_script,
)
from failopen.testing.clock import FakeClock
from failopen.testing.fallback import solve_challenge
from failopen.testing.providers import fake_verify_api, mint_token
from failopen.testing.rai_emulator import RaiEmulator
from failopen.testing.status_page import FakeStatusPage, PageComponent, PageInfo
from failopen.testing.vendor_script import FakeVendorScript
from failopen.testing.vendor_status_pages import FakeCloudflareStatusPage, FakeHCaptchaStatusPage
from failopen.testing.verify_api import FakeVerifyAPI

__all__ = [
    "BrowserScriptFake",
    "ChallengeAttempt",
    "FakeClock",
    "FakeCloudflareStatusPage",
    "FakeHCaptchaStatusPage",
    "FakeRequest",
    "FakeStatusPage",
    "FakeVendorScript",
    "FakeVerifyAPI",
    "LoopbackServer",
    "PageComponent",
    "PageInfo",
    "RaiEmulator",
    "Reply",
    "WidgetRender",
    "as_transport",
    "fake_browser_script",
    "fake_verify_api",
    "free_port",
    "mint_token",
    "solve_challenge",
]
