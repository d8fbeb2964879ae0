"""Verify a token from a browser-script fake the way each vendor's server-side call does, against
that vendor's verify fake (in-process)."""

from __future__ import annotations

from typing import Any

import httpx

from failopen.testing.providers import CaptchaVerifyFake

BASE = "https://verify.test"


def verify(api: CaptchaVerifyFake, token: str, *, sitekey: str | None = None) -> dict[str, Any]:
    """The vendor's answer to one verification of ``token``."""
    with httpx.Client(transport=api.transport(), base_url=BASE) as client:
        if api.vendor == "recaptcha-enterprise":
            event = {"token": token, "siteKey": sitekey or api.public_key}
            answer = client.post(api.path, params={"key": api.private_key},
                                 json={"event": event})
        elif api.vendor == "friendly-captcha":
            answer = client.post(api.path, headers={"X-API-Key": api.private_key},
                                 json={"response": token})
        else:
            answer = client.post(api.path, data={"secret": api.private_key, "response": token})
    body: dict[str, Any] = answer.json()
    return body


def accepted(api: CaptchaVerifyFake, token: str, *, sitekey: str | None = None) -> bool:
    """Whether the vendor accepts ``token`` now (and so uses it up)."""
    body = verify(api, token, sitekey=sitekey)
    if api.vendor == "recaptcha-enterprise":
        return bool(body["tokenProperties"]["valid"])
    return bool(body["success"])
