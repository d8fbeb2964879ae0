"""The self-hosted fallback: what a protected route can ask of a client while the vendor is out.

Framework-free pieces the guard and the adapters put together (issue 20):

* :mod:`~failopen.fallback.challenge` — :class:`FallbackChallenges`: ALTCHA proof-of-work
  challenges, HMAC-signed with ``FAILOPEN_FALLBACK_SECRET``, and the check of a solution
  (:class:`SolutionCheck`: a reason for the logs, a key for single use). No I/O.
* :mod:`~failopen.fallback.used` — single use: :class:`MemoryUsedSolutions` (one process) and
  :class:`RedisUsedSolutions` (the fleet, with memory behind it).
* :mod:`~failopen.fallback.rate` — :class:`OutageRateLimit`: ``FAILOPEN_OUTAGE_RATE`` per client
  address and route, in memory or in the fleet's Redis.
* :mod:`~failopen.fallback.settings` — the policy names and the checks ``Config`` runs.

Redis is reached only on a request while enforcement is off, each call bounded by a short timeout
with the process's memory behind it. ``altcha`` (``pip install "failopen[fallback]"``), and
redis-py and ``limits`` (``[redis]``, for a fleet) are imported inside the constructors, never by
``import failopen``: :func:`require_extra` and Config say at start-up what is missing, without
importing anything. The outage rate limit in memory needs no optional package.
"""

from __future__ import annotations

from failopen.fallback.challenge import FallbackChallenges, SolutionCheck
from failopen.fallback.rate import OutageRateLimit
from failopen.fallback.settings import OUTAGE_POLICIES, require_extra
from failopen.fallback.used import MemoryUsedSolutions, RedisUsedSolutions, UsedSolutions

__all__ = [
    "OUTAGE_POLICIES", "FallbackChallenges", "MemoryUsedSolutions", "OutageRateLimit",
    "RedisUsedSolutions", "SolutionCheck", "UsedSolutions", "require_extra",
]
