"""One member of a fleet, as its own process (tests/_fleet_kit.py starts it).

Configured by ``FAILOPEN_*`` variables; serves "requests" (``decide``) on a thread of its own and
writes its state as one JSON line every 20 ms to stdout, until killed. Its log (WARNING and
above, one record a line: ``LEVEL logger: message``) goes to stderr.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import Any

from failopen.engine.flag import FlagState
from failopen.runtime import FailOpen
from failopen.testing.verify_api import signed_token

WATCHER = "failopen.status-watcher"


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    runtime = FailOpen.from_env()
    store: Any = runtime.store
    off_thread = [0]
    inner = store.call

    def call(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name != WATCHER:
            off_thread[0] += 1  # a request (or anything else) talking to Redis
        return inner(*args, **kwargs)

    store.call = call
    counts = {"decisions": 0, "errors": 0, "bypassed": 0, "turned_off": 0,
              "valid_sent": 0, "valid_allowed": 0, "missing_allowed": 0}
    # FLEET_MEMBER_TOKENS=1: every other request carries a fresh valid token (the fake verify
    # API accepts tokens signed with the private key), so a wrong refusal shows.
    tokens = os.environ.get("FLEET_MEMBER_TOKENS") == "1"
    key = os.environ.get("FAILOPEN_PRIVATE_KEY", "")

    def requests() -> None:
        while True:
            token = signed_token(key) if tokens and counts["decisions"] % 2 else None
            try:
                decision = runtime.decide(token)
                if decision.outcome == "internal_error":
                    counts["errors"] += 1
                if decision.bypassed:
                    counts["bypassed"] += 1
                if token is not None:
                    counts["valid_sent"] += 1
                    counts["valid_allowed"] += decision.allow
                elif decision.allow:
                    counts["missing_allowed"] += 1
            except Exception:
                counts["errors"] += 1
            counts["decisions"] += 1
            time.sleep(0.005)

    def changed(old: FlagState, new: FlagState) -> None:
        if old.enforce and not new.enforce:
            counts["turned_off"] += 1  # every bypass, however short (sampling would miss one)

    runtime.on_change(changed)
    runtime.start()
    threading.Thread(target=requests, daemon=True).start()
    fleet = runtime.fleet
    assert fleet is not None
    probe = runtime.probe
    while True:
        state = runtime.state
        sys.stdout.write(json.dumps({
            "id": fleet.id, "leader": fleet.leader, "leader_since": fleet.leader_since,
            "store": fleet.store_state, "enforce": state.enforce, "source": state.source,
            "reason": state.reason, "polls": runtime.watcher.polls, "off_thread": off_thread[0],
            "foreign_leader": fleet.foreign_leader,
            "probe_sent": probe.sent if probe is not None else None,
            "probe_failed": probe.counted["failed"] if probe is not None else None,
            "probe_healthy": probe.counted["healthy"] if probe is not None else None,
            **counts,
        }) + "\n")
        sys.stdout.flush()
        time.sleep(0.02)


if __name__ == "__main__":
    main()
