"""The presence steps: a worker registers, refreshes and removes its registration in
its namespace's presence set, and anybody reads who is registered
(:mod:`lockworker.model.presence` says what they mean).

Each is one script on the server, timed by the server's clock, so the times to live of
workers on different hosts are comparable. The set's key and the channel share one
hash tag, ``{<namespace>}``, so each step runs unchanged on a cluster (in another slot
than the namespace's jobs: that is why a backup keeps a view of its own instead of
reading the set inside a job's steps).
"""

from __future__ import annotations

import contextlib
from typing import Any

import redis

from lockworker.model.keys import JobKeys
from lockworker.model.presence import ACTING, Member, Registered, registered
from lockworker.protocol.decode import text
from lockworker.protocol.luacall import LuaScript

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_LIST = """
local out = {}
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #found, 2 do
  out[#out + 1] = found[i]
  out[#out + 1] = math.floor(tonumber(found[i + 1]) - now)
end
"""

# TOUCH: register or refresh a worker; forget registrations that ended; list the rest.
# The set expires with its longest registration, so a namespace nobody serves any more
# leaves no key behind.
# KEYS[1] members   KEYS[2] acting   ARGV[1] member   ARGV[2] ttl ms   ARGV[3] channel
# ARGV[4] message to publish ('' for none: a refresh)
# returns {member1, ms left1, member2, ms left2, ...}, the caller included
TOUCH = LuaScript(_NOW + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIREAT', KEYS[2], last[2]) end
if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
""" + _LIST + "return out\n")

# LEAVE: remove a worker's registration (and its record of acting as a primary); tell
# the others if it was a primary.
# KEYS[1] members   KEYS[2] acting   ARGV[1] member   ARGV[2] channel
# ARGV[3] message ('' for none)   ARGV[4] run      returns 1 if it was registered, else 0
LEAVE = LuaScript("""
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[4])
if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return removed
""")

# ACT: a backup records when it started serving as a primary (no primary registered),
# by the server's clock, or forgets it once a primary serves again. The record lives as
# long as the registrations (TOUCH keeps its expiry with the set's).
# KEYS[1] members   KEYS[2] acting   ARGV[1] run   ARGV[2] '1' started, '0' ended
# returns the recorded start (ms), or 0
ACT = LuaScript(_NOW + """
if ARGV[2] ~= '1' then
  redis.call('HDEL', KEYS[2], ARGV[1])
  return 0
end
redis.call('HSETNX', KEYS[2], ARGV[1], now)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if #last > 0 then redis.call('PEXPIREAT', KEYS[2], last[2]) end
return tonumber(redis.call('HGET', KEYS[2], ARGV[1]))
""")

# READ: the live registrations, writing nothing (lockworker status).
# KEYS[1] members   returns as TOUCH
READ = LuaScript(_NOW + _LIST + "return out\n")


def touch_call(keys: JobKeys, member: Member, message: str) -> tuple[list[str], list[Any]]:
    """The keys and arguments of TOUCH for ``member`` (``message``: '' to refresh)."""
    return (
        [keys.extra("members"), keys.extra(ACTING)],
        [member.encode(), member.ttl_ms, keys.wake, message],
    )


def leave_call(keys: JobKeys, member: Member, message: str) -> tuple[list[str], list[Any]]:
    """The keys and arguments of LEAVE for ``member``."""
    return (
        [keys.extra("members"), keys.extra(ACTING)],
        [member.encode(), keys.wake, message, member.run],
    )


def act_call(keys: JobKeys, member: Member, acting: bool) -> tuple[list[str], list[Any]]:
    """The keys and arguments of ACT: ``member`` started (or stopped) serving as a
    primary."""
    return [keys.extra("members"), keys.extra(ACTING)], [member.run, "1" if acting else "0"]


def act(client: redis.Redis, keys: JobKeys, member: Member, acting: bool) -> None:
    """Record that backup ``member`` serves as a primary since now (or no more)."""
    ACT(client, *act_call(keys, member, acting))


def acting_since(client: redis.Redis, keys: JobKeys) -> dict[str, int]:
    """Run -> since when (server ms) each backup of ``keys``'s namespace that recorded
    it serves as a primary (runs no longer registered may linger: check them)."""
    raw = client.hgetall(keys.extra(ACTING))
    found: dict[str, int] = {}
    for run, since in dict(raw or {}).items():
        with contextlib.suppress(ValueError, TypeError):
            found[text(run)] = int(text(since))
    return found


def decode(reply: Any) -> list[Registered]:
    """The live registrations a TOUCH or READ reply lists."""
    items = list(reply or ())
    return registered((text(items[i]), int(items[i + 1])) for i in range(0, len(items) - 1, 2))


def touch(client: redis.Redis, keys: JobKeys, member: Member, message: str) -> list[Registered]:
    """Register or refresh ``member``; the live registrations, ``member`` included."""
    return decode(TOUCH(client, *touch_call(keys, member, message)))


def leave(client: redis.Redis, keys: JobKeys, member: Member, message: str) -> None:
    """Remove ``member``'s registration (publishing ``message`` unless it is '')."""
    LEAVE(client, *leave_call(keys, member, message))


def read(client: redis.Redis, keys: JobKeys) -> list[Registered]:
    """Who is registered in ``keys``'s namespace now."""
    return decode(READ(client, [keys.extra("members")], []))
