"""``X-Worker-Pid`` on every answer: which server process answered (the end-to-end test runs
two gunicorn workers and needs to see both). Sync and async, so it costs no adapter either way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.utils.decorators import sync_and_async_middleware


@sync_and_async_middleware
def worker_pid(get_response: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Adds ``X-Worker-Pid``; the pid is read per request (workers fork after this runs)."""
    if iscoroutinefunction(get_response):
        async def middleware(request: Any) -> Any:
            response = await get_response(request)
            response["X-Worker-Pid"] = str(os.getpid())
            return response
    else:
        def middleware(request: Any) -> Any:
            response = get_response(request)
            response["X-Worker-Pid"] = str(os.getpid())
            return response
    return middleware
