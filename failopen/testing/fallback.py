"""Solve failopen's fallback challenge in a test, as the browser snippet's worker does.

``GET <prefix>/challenge`` answers an ALTCHA challenge during an outage; a ``fallback`` route
then admits a request that carries the solution (form field ``altcha`` or header ``X-Altcha``)::

    challenge = client.get("/failopen/challenge").json()
    client.post("/signup", data={"altcha": solve_challenge(challenge), ...})

A solution is accepted once: solve a fresh challenge for each request.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["solve_challenge"]


def solve_challenge(challenge: Mapping[str, Any]) -> str:
    """The payload for ``challenge`` (the challenge endpoint's JSON): base64 of the JSON object
    the ALTCHA widget sends. ValueError when no number up to ``maxnumber`` solves it."""
    salt, target = str(challenge["salt"]), str(challenge["challenge"])
    for number in range(int(challenge["maxnumber"]) + 1):
        if hashlib.sha256(f"{salt}{number}".encode()).hexdigest() == target:
            solved = {"algorithm": challenge["algorithm"], "challenge": target, "number": number,
                      "salt": salt, "signature": challenge["signature"]}
            return base64.b64encode(json.dumps(solved).encode()).decode("ascii")
    raise ValueError("no number up to maxnumber solves this challenge")
