"""The Redis store's Lua scripts: each touches keys of one deployment only (one hash slot on a
cluster, where every key shares the prefix's hash tag), so each runs atomically everywhere.

Keys a script touches are passed in KEYS, never built inside it: a cluster routes a script by
its keys.
"""

from __future__ import annotations

__all__ = ["BEAT", "CONFIRM", "FORGET", "LIVE_BEATS", "NOW_MS_LUA", "RELEASE", "RENEW", "RESTORE",
           "SAVE", "write_override_lua"]

# Renew only one's own lease, release only one's own: compare-and-set in one step.
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
#: Lua that defines ``now_ms()``: Redis's own clock in whole milliseconds, as text (how
#: ``fallback:since`` is written, by the scripts below and by a fallback claim, and read back).
NOW_MS_LUA = """
local function now_ms()
  local now = redis.call('TIME')
  return string.format('%.0f', now[1] * 1000 + math.floor(now[2] / 1000))
end
"""
# After lost keys: the first process to notice puts the marker back and, only then, the override
# it last knew (with what is left of its TTL). Later ones find the marker and read what is there.
RESTORE = NOW_MS_LUA + """
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('SET', KEYS[3], now_ms())
  if ARGV[2] ~= '' and ARGV[3] == '0' then
    redis.call('SET', KEYS[2], ARGV[2], 'NX')
  elseif ARGV[2] ~= '' then
    redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3])
  end
  return 1
end
return 0
"""
# An operator's override, placed (ARGV[1], PX ARGV[2]) or lifted (''), with the marker: a write
# landing just after lost keys is the operator's latest word, which no member's restore may then
# undo. A marker put back here starts the record of used fallback solutions anew, as a restore
# does (failopen.fallback.used: a marker beside no record would read as "never lost").


def write_override_lua(key: str, value: str, ttl: str) -> str:
    """Lua that writes the override key ``key`` as :meth:`RedisStore.save` does: deleted when
    ``value`` is '', kept until lifted when ``ttl`` is '0' (forcing on), else with PX ``ttl``
    (each argument a Lua expression such as ``KEYS[2]``, ``ARGV[1]``)."""
    return (f"if {value} == '' then\n  redis.call('DEL', {key})\n"
            f"elseif {ttl} == '0' then\n  redis.call('SET', {key}, {value})\n"
            f"else\n  redis.call('SET', {key}, {value}, 'PX', {ttl})\nend\n")


SAVE = NOW_MS_LUA + """
if redis.call('SET', KEYS[1], '1', 'NX') then
  redis.call('SET', KEYS[3], now_ms())
end
""" + write_override_lua("KEYS[2]", "ARGV[1]", "ARGV[2]") + "return 1\n"
# The fleet-wide confirmation lock; when taken, the latest reading and the lock's holder come
# back in the same trip (another deployment's lock says nothing about this one's page).
CONFIRM = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, false, false}
end
return {0, redis.call('GET', KEYS[2]), redis.call('GET', KEYS[1])}
"""


# A heartbeat: the process's own key (its TTL says it is alive) and its id in the index of
# heartbeats (a sorted set scored by when the key lapses, Redis's clock), so readers find every
# member without scanning the keyspace (which a cluster spreads over its nodes). Lapsed entries
# are dropped by every beat; the index itself lapses a beat's TTL after the last beat.
BEAT = NOW_MS_LUA + """
local now = now_ms()
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], string.format('%.0f', tonumber(now) + tonumber(ARGV[3])), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
"""
FORGET = """
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""
# The record of lost keys (KEYS[1]), Redis's clock, and each heartbeat (KEYS[2..]) with its TTL,
# read in one step on one node (a TIME from another node of a cluster would be another clock).
LIVE_BEATS = """
local out = {redis.call('GET', KEYS[1]), redis.call('TIME')}
for i = 2, #KEYS do
  out[#out + 1] = redis.call('GET', KEYS[i])
  out[#out + 1] = redis.call('PTTL', KEYS[i])
end
return out
"""
