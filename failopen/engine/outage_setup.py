"""The outage gate as a Config asks for it: the rate limit, and the fallback challenge (ALTCHA
with its used-solution record, or the second vendor's verify call), shared through the fleet's
Redis in fleet mode. Built once per runtime (:class:`failopen.FailOpen`)."""

from __future__ import annotations

import importlib.util

import httpx

from failopen.clock import Clock
from failopen.config import Config
from failopen.engine.outage import OutageGate
from failopen.fallback import (
    FallbackChallenges,
    MemoryUsedSolutions,
    OutageRateLimit,
    RedisUsedSolutions,
)
from failopen.fallback.second_vendor import SecondVendor
from failopen.observe.workers import RATE, USED, PerWorkerMemory
from failopen.providers.registry import provider_named
from failopen.providers.verify import HttpVerifier

__all__ = ["outage_gate", "per_worker_memory", "second_vendor"]

def second_vendor(config: Config, *, clock: Clock,
                  transport: httpx.BaseTransport | None = None,
                  async_transport: httpx.AsyncBaseTransport | None = None,
                  ) -> SecondVendor | None:
    """The second vendor's verify call (FAILOPEN_FALLBACK_VENDOR), with its own secret, client
    and paced logs; None without one."""
    if config.fallback_vendor is None:
        return None
    provider = provider_named(config.fallback_vendor, "FAILOPEN_FALLBACK_VENDOR")
    # Config guarantees the key and the URL once the vendor is set.
    assert config.fallback_private_key is not None and config.fallback_verify_url is not None
    verifier = HttpVerifier(
        config.fallback_verify_url, config.fallback_private_key, timeout=config.verify_timeout,
        transport=transport, async_transport=async_transport, clock=clock,
        provider=provider, public_key=config.fallback_public_key, min_score=config.min_score)
    return SecondVendor(provider.name, verifier, provider.checks_action)


def outage_gate(config: Config, *, clock: Clock, fleet: bool,
                vendor: SecondVendor | None = None) -> tuple[OutageGate, FallbackChallenges | None]:
    """What protected routes do while enforcement is off, and the ALTCHA challenges it checks
    (None without them: ``GET <prefix>/challenge`` then answers 404)."""
    password = config.store_password.reveal() if config.store_password else None
    rate = None
    if config.outage_rate != "none":
        # In memory it needs no optional package; in Redis, Config made sure of limits.
        rate = OutageRateLimit(config.outage_rate, redis_url=config.store if fleet else None,
                               password=password, prefix=config.redis_prefix, clock=clock,
                               max_clients=config.outage_rate_max_clients)
    challenges = used = None
    # A secret without a fallback route in the settings: Django's @protect(outage=
    # "fallback") names its route where Config cannot see it.
    if config.fallback_secret is not None and (
            config.uses_fallback or importlib.util.find_spec("altcha") is not None):
        challenges = FallbackChallenges(config.fallback_secret, cost=config.fallback_cost,
                                        ttl=config.fallback_ttl, clock=clock)
        memory = MemoryUsedSolutions(clock=clock)
        used = RedisUsedSolutions(config.store, password=password,
                                  prefix=config.redis_prefix, fallback=memory,
                                  clock=clock) if fleet else memory
    # A challenge another process issued may predate this one's outage by a poll or so.
    return OutageGate(rate=rate, challenges=challenges, used=used,
                      retry_after=config.retry_after,
                      issue_skew=config.poll_interval + config.status_timeout,
                      vendor=vendor), challenges


def per_worker_memory(gate: OutageGate, config: Config) -> PerWorkerMemory:
    """What the gate keeps in this process's memory (no Redis store), for the WARNING a server
    with several workers gets (:mod:`failopen.observe.workers`)."""
    rate = gate.rate
    kept = [what for what, here in (
        (RATE, isinstance(rate, OutageRateLimit) and rate.link is None),
        (USED, isinstance(gate.used, MemoryUsedSolutions))) if here]
    return PerWorkerMemory(kept, rate=config.outage_rate)
