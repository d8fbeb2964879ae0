"""Private helpers with no opinion about outages: fork safety, terminal text, secret redaction
and the spellings of a request path. They import nothing of failopen above ``exceptions`` and
``clock``, so every wing may use them."""

from __future__ import annotations

__all__: list[str] = []
