"""Fakes of five captcha vendors' browser scripts, chosen by name, for browser tests.

Each serves the vendor's script at the vendor's own path under its :attr:`~BrowserScriptFake.url`
(the origin to use as ``FAILOPEN_VENDOR_URL``), implements the vendor's public JavaScript API
and nothing more, and hands out tokens the vendor's verify fake
(:func:`failopen.testing.fake_verify_api`) accepts once::

    verify = fake_verify_api("hcaptcha")
    script = fake_browser_script("hcaptcha", verify_api=verify)
    with script.serve():
        page.goto(...)                  # <script src="{script.url}/1/api.js?render=explicit&...">
        script.set_mode("error_then_ok:1")
        ...
        assert script.renders[0].sitekey == verify.public_key
        assert script.challenges[-1].outcome == "token"

* ``turnstile``: :class:`FakeTurnstileScript`, ``/turnstile/v0/api.js``
* ``hcaptcha``: :class:`FakeHCaptchaScript`, ``/1/api.js``
* ``recaptcha``: :class:`FakeRecaptchaScript`, ``/recaptcha/api.js`` (v2 and v3)
* ``recaptcha-enterprise``: :class:`FakeRecaptchaEnterpriseScript`, ``/recaptcha/enterprise.js``
* ``friendly-captcha``: :class:`FakeFriendlyCaptchaScript`,
  ``/npm/@friendlycaptcha/sdk@<version>/site.min.js`` (and ``site.compat.min.js``)

Modes (:meth:`~BrowserScriptFake.set_mode`; a page keeps the mode its script was served with):

=====================  ===========================================================================
``ok``                 loads, calls ``onload``; every challenge ends in a token
``http404``            the script answers 404: the page sees a script load error
``silent``             the script loads, defines nothing and never calls ``onload``
``error``              every challenge fails: the widget's error callback (reCAPTCHA v3: the
                       promise rejects with ``"Timeout"`` later, as Google's does)
``error_then_ok:N``    the page's first N challenges fail, then they work; a ``reset`` and a new
                       challenge counts as the next attempt, as do the vendor's own retries
``expire:MS``          tokens are issued, then expire MS ms later: the field empties and the
                       expiry callback (or event) fires
``slow:MS``            the script is answered after MS ms, then works as ``ok``
=====================  ===========================================================================

What the page did is recorded server-side: :attr:`~BrowserScriptFake.script_queries` (the query
of each script request), :attr:`~BrowserScriptFake.renders` (:class:`WidgetRender`: widget id,
site key, size, action, start mode) and :attr:`~BrowserScriptFake.challenges`
(:class:`ChallengeAttempt`: site key, action, size, outcome, token, attempt number). A widget is
an iframe from the fake's origin, as a real one is: a page's CSP needs ``script-src`` and
``frame-src`` for :attr:`~BrowserScriptFake.url`.
"""

from __future__ import annotations

from typing import Any

from failopen.testing.browser_scripts._base import BrowserScriptFake, ChallengeAttempt, WidgetRender
from failopen.testing.browser_scripts.friendly_captcha import FakeFriendlyCaptchaScript
from failopen.testing.browser_scripts.hcaptcha import FakeHCaptchaScript
from failopen.testing.browser_scripts.recaptcha import (
    FakeRecaptchaEnterpriseScript,
    FakeRecaptchaScript,
)
from failopen.testing.browser_scripts.turnstile import FakeTurnstileScript

__all__ = [
    "SCRIPTS",
    "BrowserScriptFake",
    "ChallengeAttempt",
    "FakeFriendlyCaptchaScript",
    "FakeHCaptchaScript",
    "FakeRecaptchaEnterpriseScript",
    "FakeRecaptchaScript",
    "FakeTurnstileScript",
    "WidgetRender",
    "fake_browser_script",
]

#: Each vendor's browser-script fake, by the vendor's name.
SCRIPTS: dict[str, type[BrowserScriptFake]] = {
    fake.vendor: fake
    for fake in (FakeTurnstileScript, FakeHCaptchaScript, FakeRecaptchaScript,
                 FakeRecaptchaEnterpriseScript, FakeFriendlyCaptchaScript)
}


def fake_browser_script(vendor: str, **kwargs: Any) -> BrowserScriptFake:
    """A new fake of ``vendor``'s browser script; ``kwargs`` go to its constructor
    (``verify_api``, ``signing_key``, ``score``; reCAPTCHA's also ``v3_timeout``)."""
    try:
        fake = SCRIPTS[vendor]
    except KeyError:
        raise ValueError(f"no browser-script fake for vendor {vendor!r}; choose from "
                         f"{', '.join(sorted(SCRIPTS))}") from None
    return fake(**kwargs)
