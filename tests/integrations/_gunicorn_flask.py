"""examples/flask_app.py as gunicorn serves it in test_wsgi_gunicorn.py, each answer naming the
worker that gave it (``X-Worker-Pid``), refusals included."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from flask_app import app as flask_app  # examples/ is on gunicorn's --pythonpath


def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    """The example, with X-Worker-Pid on every answer."""
    def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        return start_response(status, [*headers, ("X-Worker-Pid", str(os.getpid()))], exc_info)

    return flask_app(environ, start)
