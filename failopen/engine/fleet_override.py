"""What a fleet member remembers about overrides, so that a Redis restart never brings back one
an operator lifted or replaced.

When Redis loses its keys (a restart without persistence, a FLUSHALL), the first member to notice
puts back the override it holds (:meth:`failopen.stores.redis.RedisStore.restore`, with what is
left of its own expiry, never more). A member that synced the operator's lift knows better than
one that did not, so each member remembers the overrides it saw lifted or replaced (here called
superseded) until their own expiry:

* it never restores one (the lift may have reached only this process before the keys went);
* it never applies one again, whoever put it back: it replaces that exact value in the store
  (compare-and-set, so an override placed since is untouched) with the override it holds itself
  (what is left of its expiry), or none, and keeps what it had.

A change counts as the operator's only while the epoch marker kept its value between two of this
member's reads: after lost keys the marker is put back with a new random value, and what the
store then holds is another member's memory, not a decision (learning from it would let a stale
member's restore wipe an override everyone else still rightly applies).

What remains, and is documented: a member that never saw the lift (it was not reached) may put
the lifted override back in the first moments after a restart; members that saw the lift delete
it at their next sync, and never apply it themselves. ``failopen override auto`` reports how many
processes the lift reached.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from failopen.engine.override_reach import override_id
from failopen.stores.override import FORCE_ON_MAX_TTL, Override
from failopen.stores.redis import (
    RedisStore,
    override_ttl_ms,
    parse_override,
    write_override_lua,
)

__all__ = ["OverrideMemory"]

logger = logging.getLogger("failopen.fleet")

_MAX_REMEMBERED = 32  # lifted overrides remembered at once (the soonest to expire go first)

# Replace the override only if it is still the value this member refuses: with the one it
# holds (TTL in ms; 0: until lifted), or with none.
_REPLACE_IF_SAME = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
""" + write_override_lua("KEYS[1]", "ARGV[2]", "ARGV[3]") + "return 1\n"


class OverrideMemory:
    """This member's memory of superseded overrides (used from the fleet's sync only)."""

    def __init__(self) -> None:
        self._superseded: dict[str, float] = {}  # override id -> until when it matters
        self._epoch: Any = None
        self._last: Override | None = None
        self._replace: Any = None

    def observe(self, store: RedisStore, epoch: Any, raw: Any, now: float,
                held: Override | None) -> Any:
        """The override value this member may follow, given a sync's read of ``epoch`` and
        ``raw`` and the override it ``held`` (applied): ``raw`` itself; or, for an override it
        knows was lifted, what it put in its place (``held``'s value, or None). StoreError for
        garbage (a fallback, as no answer)."""
        override = parse_override(raw)
        last = self._last
        if epoch is not None and epoch == self._epoch and last is not None \
                and override_id(override) != override_id(last):
            self._supersede(last, now)  # lifted, replaced or lapsed between two reads
        self._epoch = epoch
        self._forget_expired(now)
        oid = override_id(override)
        if oid is not None and oid in self._superseded:
            mine = self.restorable(held, now)
            value = "" if mine is None else json.dumps(mine.to_json(), sort_keys=True)
            ttl = 0 if mine is None else override_ttl_ms(mine, now) or 0
            if self._replace is None:
                self._replace = store.client.register_script(_REPLACE_IF_SAME)
            if store.call("EVAL", self._replace, keys=[store.key_override],
                          args=[raw, value, ttl]):
                logger.warning(
                    "removed an override an operator had lifted or replaced, which a process "
                    "that never saw the change put back after Redis lost its keys; %s",
                    "put back the override this process follows" if mine is not None else
                    "no override is in force", extra={
                        "event": "failopen.fleet_override_resurrected", "override": oid})
            # Replaced or not (another process may have been quicker), this process keeps what
            # it had until its next sync reads the store again: never a turn without its override.
            self._last = mine
            return value.encode() if mine is not None else None
        self._last = override
        return raw

    def restorable(self, override: Override | None, now: float) -> Override | None:
        """``override`` unless it expired or this member saw it lifted (None: restore none)."""
        if override is None or override.expired(now) or override_id(override) in self._superseded:
            return None
        return override

    def _supersede(self, override: Override, now: float) -> None:
        oid = override_id(override)
        assert oid is not None
        # An override forcing enforcement on may last until lifted: remembered as long as the
        # longest a placed one may last.
        until = override.expires_at if override.expires_at is not None else now + FORCE_ON_MAX_TTL
        self._superseded[oid] = until
        if len(self._superseded) > _MAX_REMEMBERED:
            del self._superseded[min(self._superseded, key=self._superseded.__getitem__)]

    def _forget_expired(self, now: float) -> None:
        # An expired override is never restored nor applied (its expiry is checked everywhere).
        for oid in [o for o, until in self._superseded.items() if until <= now]:
            del self._superseded[oid]
