"""Tokens minted in one process and accepted by a fake in another, as ``signed_token`` does for
:class:`~failopen.testing.FakeVerifyAPI`: the claims (score, action, ...) ride in the token,
HMAC-signed with the fake's private key, so only a fake holding that key accepts them (once).

A test key only: the signature proves which test process minted the token, nothing more.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from typing import Any

__all__ = ["encode_minted", "decode_minted"]

_PREFIX = "fake-"


def _signature(key: str, signed: str) -> str:
    return hmac.new(key.encode(), signed.encode(), hashlib.sha256).hexdigest()[:32]


def encode_minted(vendor: str, key: str, claims: dict[str, Any]) -> str:
    """A fresh token for ``vendor`` carrying ``claims``, signed with ``key``."""
    # The nonce makes every token new, so two mints with the same claims are two solves.
    body = json.dumps({**claims, "nonce": secrets.token_hex(8)}, sort_keys=True,
                      separators=(",", ":")).encode()
    payload = base64.urlsafe_b64encode(body).decode().rstrip("=")
    signed = f"{_PREFIX}{vendor}.{payload}"
    return f"{signed}.{_signature(key, signed)}"


def decode_minted(vendor: str, key: str, token: str) -> dict[str, Any] | None:
    """The claims of a token :func:`encode_minted` made for ``vendor`` with ``key``, else None."""
    signed, dot, signature = token.rpartition(".")
    if not dot or not signed.startswith(f"{_PREFIX}{vendor}."):
        return None
    if not hmac.compare_digest(signature, _signature(key, signed)):
        return None
    payload = signed[len(_PREFIX) + len(vendor) + 1:]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(claims, dict):
        return None
    claims.pop("nonce", None)
    return claims
