"""The rai emulator's injected faults: error answers and answers cut off, for the next requests.

A part of :class:`~failopen.testing.RaiEmulator` (a mixin, for the size of its module): it keeps
the emulator's lock and the two queues the emulator's ``__init__`` makes.
"""

from __future__ import annotations

import threading

from failopen.testing._rai_requests import ENDPOINTS, HTTP_STATUS
from failopen.testing._server import Reply

__all__ = ["RaiFaults"]


class RaiFaults:
    """``inject_error`` and ``cut_off_answers``, and the cut an answer gets."""

    _lock: threading.Lock
    _injected: list[tuple[str, str | None]]
    _cut: list[tuple[str | None, str]]

    def inject_error(self, code: str, *, times: int = 1, endpoint: str | None = None) -> None:
        """Answer the next ``times`` requests (to ``endpoint``, or any) with error ``code``."""
        if code not in HTTP_STATUS:
            raise ValueError(f"unknown error code {code!r}; use one of {sorted(HTTP_STATUS)}")
        if endpoint is not None and endpoint not in ENDPOINTS:
            raise ValueError(f"unknown endpoint {endpoint!r}; use one of {ENDPOINTS}")
        with self._lock:
            self._injected.extend([(code, endpoint)] * times)

    def cut_off_answers(self, *, times: int = 1, endpoint: str | None = None,
                        empty: bool = False, after_brace: bool = False) -> None:  # fmt: skip
        """Answer the next ``times`` data requests (to ``endpoint``, or any) 200 with the JSON
        cut in half, or with an empty body: complete HTTP framing, as a proxy that cut it sends.
        ``after_brace``: cut just after the last ``}`` of its first half (a record's end), so the
        body still ends with one."""
        if endpoint is not None and endpoint not in ENDPOINTS:
            raise ValueError(f"unknown endpoint {endpoint!r}; use one of {ENDPOINTS}")
        mode = "empty" if empty else ("brace" if after_brace else "half")
        with self._lock:
            self._cut.extend([(endpoint, mode)] * times)

    def _maybe_cut(self, endpoint: str, reply: Reply) -> Reply:
        with self._lock:
            index = next((i for i, (ep, _) in enumerate(self._cut) if ep in (None, endpoint)), None)
            if index is None:
                return reply
            mode = self._cut.pop(index)[1]
        body = reply.body if isinstance(reply.body, bytes) else b"".join(reply.body)
        half = len(body) // 2
        cut = {"empty": 0, "half": half, "brace": body.rfind(b"}", 0, half) + 1 or half}[mode]
        reply.body = body[:cut]
        return reply
