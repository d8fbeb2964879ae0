"""examples/asgi_app.py as uvicorn serves it in test_first_reading_servers.py, each answer naming
the worker that gave it (``X-Worker-Pid``), refusals included."""

from __future__ import annotations

import os
from typing import Any

from asgi_app import app as asgi_app  # examples/ is on the workers' PYTHONPATH

_PID = (b"x-worker-pid", str(os.getpid()).encode())


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The example, with X-Worker-Pid on every answer."""
    async def send_with_pid(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), _PID]}
        await send(message)

    await asgi_app(scope, receive, send_with_pid)
