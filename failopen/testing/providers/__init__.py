"""Faithful fakes of five captcha vendors' server-side verify APIs, chosen by name.

Each is one small module on :class:`CaptchaVerifyFake` (``_base.py``), which holds what they
share: known tokens, each good once and within the vendor's lifetime (time from a ``clock``), the
faults of :class:`~failopen.testing.FakeVerifyAPI`, and serving in-process (:meth:`transport`)
or on a loopback socket (:meth:`serve`)::

    fake = fake_verify_api("turnstile", clock=FakeClock())
    with httpx.Client(transport=fake.transport()) as client:
        client.post("https://verify.test" + fake.path,
                    data={"secret": fake.private_key, "response": fake.issue_token()})

:func:`mint_token` makes a token in one process that a fake with the same private key, served
in another, accepts once.
"""

from __future__ import annotations

from typing import Any

from failopen.testing.providers._base import DOCUMENTED, CaptchaVerifyFake
from failopen.testing.providers._minted import encode_minted
from failopen.testing.providers.friendly_captcha import FakeFriendlyCaptchaVerify
from failopen.testing.providers.hcaptcha import FakeHCaptchaVerify
from failopen.testing.providers.recaptcha import FakeRecaptchaVerify
from failopen.testing.providers.recaptcha_enterprise import FakeRecaptchaEnterpriseVerify
from failopen.testing.providers.turnstile import FakeTurnstileVerify

__all__ = [
    "DOCUMENTED",
    "FAKES",
    "CaptchaVerifyFake",
    "FakeFriendlyCaptchaVerify",
    "FakeHCaptchaVerify",
    "FakeRecaptchaEnterpriseVerify",
    "FakeRecaptchaVerify",
    "FakeTurnstileVerify",
    "fake_verify_api",
    "mint_token",
]

#: Each vendor's fake, by the vendor's name.
FAKES: dict[str, type[CaptchaVerifyFake]] = {
    fake.vendor: fake
    for fake in (FakeTurnstileVerify, FakeHCaptchaVerify, FakeRecaptchaVerify,
                 FakeRecaptchaEnterpriseVerify, FakeFriendlyCaptchaVerify)
}


def _fake_class(vendor: str) -> type[CaptchaVerifyFake]:
    try:
        return FAKES[vendor]
    except KeyError:
        raise ValueError(f"no fake for vendor {vendor!r}; choose from "
                         f"{', '.join(sorted(FAKES))}") from None


def fake_verify_api(vendor: str, **kwargs: Any) -> CaptchaVerifyFake:
    """A new fake of ``vendor``'s verify API; ``kwargs`` go to its constructor."""
    return _fake_class(vendor)(**kwargs)


def mint_token(vendor: str, key: str, **claims: Any) -> str:
    """A fresh token that a ``vendor`` fake with private key ``key`` accepts once, carrying
    ``claims`` (the vendor's :meth:`~CaptchaVerifyFake.issue_token` options, e.g. ``score``)."""
    fake = _fake_class(vendor)
    return encode_minted(vendor, key, fake.claims(**claims))
