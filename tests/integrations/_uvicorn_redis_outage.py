"""The app test_asgi_redis_uvicorn.py serves with uvicorn: FailOpenMiddleware from FAILOPEN_*
(fleet mode: the store is the test's redis-server) around a bare app. ``/login`` is protected;
``/health`` is not, and says whether the outage rate limit has begun asking Redis. The rate
limit's timeout is long (``REDIS_OUTAGE_TIMEOUT``): a call made on a frozen Redis waits until
the test thaws it, or until that timeout."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from failopen.integrations.asgi import FailOpenMiddleware

from failopen.fallback import OutageRateLimit

asked = threading.Event()


async def _inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = json.dumps({"asked": asked.is_set()}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


app = FailOpenMiddleware(_inner)
_gate = app.runtime.guard.gate
_gate.rate.close()  # type: ignore[union-attr]
_rate = OutageRateLimit(app.config.outage_rate, redis_url=app.config.store, password=None,
                        prefix=app.config.redis_prefix,
                        timeout=float(os.environ["REDIS_OUTAGE_TIMEOUT"]))
_test, _hit = _rate.test, _rate.hit


# Whichever call asks first: an open route only hits (the check is in the count).
def _spied_test(client: str, route: str) -> int | None:
    asked.set()
    return _test(client, route)


def _spied_hit(client: str, route: str) -> int | None:
    asked.set()
    return _hit(client, route)


_rate.test = _spied_test  # type: ignore[method-assign]
_rate.hit = _spied_hit  # type: ignore[method-assign]
_gate.rate = _rate
