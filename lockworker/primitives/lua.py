"""Lua sources of the primitives' atomic steps (the job lock's own are in lockworker.protocol.lua).

Headers give the keys, the arguments and every possible result. Times inside the
semaphore scripts come from the server's ``TIME``, so every client judges expiry of
permits by one clock (the server's); a holder still judges its *own* permit by its local
monotonic clock (:mod:`lockworker.runtime.lease`), which is the stricter of the two.
"""

from __future__ import annotations

from lockworker.model.codec import LUA_PROLOGUE

# Shared prologue of the semaphore scripts: server time in ms; purge dead holders and
# dead waiters (their heartbeat stopped), waking the queue if any permit came back.
# KEYS[1] holders zset (id -> expiry ms)   KEYS[2] queue zset (id -> ticket)
# KEYS[3] waiting zset (id -> expiry ms)
_SEM_PROLOGUE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local freed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, w in ipairs(gone) do redis.call('ZREM', KEYS[2], w) end
if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now) end
"""

# SEM_ACQUIRE: take a permit in first-come-first-served order, or join/keep a place
# in the queue.
# KEYS[1] holders  KEYS[2] queue  KEYS[3] waiting  KEYS[4] ticket counter  KEYS[5] limit
# ARGV[1] id  ARGV[2] limit  ARGV[3] hold ms  ARGV[4] waiter ms (a place lives that long
# after the waiter's last look: its heartbeat and a margin)  ARGV[5] wake channel
# ARGV[6] '1' join the queue if no permit now, '0' take a permit only if nobody waits
# returns one of
#   {'granted', reentered(0|1)}            the caller holds a permit now
#   {'queued', rank, ms until the first holder's permit or waiter's place expires
#    (-1 if none): a waiter ahead that died drops out then}
#   {'busy'}                               no free permit (ARGV[6] = '0')
#   {'limit', stored limit}                the semaphore exists with another limit
# The number of permits is never stored: it is ``limit - ZCARD holders``, so however
# many processes create the semaphore at once, there are exactly ``limit`` of them.
SEM_ACQUIRE = _SEM_PROLOGUE + """
local stored = redis.call('GET', KEYS[5])
if not stored then
  redis.call('SET', KEYS[5], ARGV[2])
  stored = ARGV[2]
elseif stored ~= ARGV[2] then
  return {'limit', stored}
end
if freed > 0 or #gone > 0 then redis.call('PUBLISH', ARGV[5], 'expired') end
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  return {'granted', 1}
end
local free = tonumber(stored) - redis.call('ZCARD', KEYS[1])
local rank = redis.call('ZRANK', KEYS[2], ARGV[1])
if not rank then
  if ARGV[6] == '0' then
    if free > 0 and redis.call('ZCARD', KEYS[2]) == 0 then
      redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
      return {'granted', 0}
    end
    return {'busy'}
  end
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), ARGV[1])
  rank = redis.call('ZRANK', KEYS[2], ARGV[1])
end
if rank < free then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  return {'granted', 0}
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[4]), ARGV[1])
local left = -1
for _, zset in ipairs({KEYS[1], KEYS[3]}) do
  local first = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if first[2] and (left < 0 or tonumber(first[2]) - now < left) then
    left = tonumber(first[2]) - now
  end
end
return {'queued', rank, left}
"""

# SEM_RENEW: extend the caller's permit, if it still has one that has not expired.
# KEYS[1] holders  KEYS[2] queue  KEYS[3] waiting   ARGV[1] id  ARGV[2] hold ms
# returns 1 renewed, 0 the permit is gone (expired, or never held)
SEM_RENEW = _SEM_PROLOGUE + """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
  return 1
end
return 0
"""

# SEM_LEAVE: give a permit back, or leave the queue; wake the waiters either way.
# KEYS[1] holders  KEYS[2] queue  KEYS[3] waiting   ARGV[1] id  ARGV[2] wake channel
# returns 1 a permit was given back, 0 the caller held none (expired, or only waited)
SEM_LEAVE = """
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('PUBLISH', ARGV[2], 'left')
return removed
"""

# FENCE_RAISE (Redlock): raise a master's token counter to at least ARGV[2], only while
# the caller still holds that master's lock, so the next acquisition there gets a
# larger token than the one the caller is about to use.
# KEYS[1] lock  KEYS[2] state (the job protocol's value, lockworker.model.codec)
# ARGV[1] the caller's exact lock value  ARGV[2] token  ARGV[3] retention ms
# returns 1 raised (or already high enough), 0 the caller does not hold this master
FENCE_RAISE = LUA_PROLOGUE + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local raw = redis.call('GET', KEYS[2])
local st = {status = 'pending', attempt = '0', token = '0', run = '', owner = ''}
if raw then
  st = lw_state(raw)
  if not st then return 0 end
end
if lw_gt(ARGV[2], st.token) then
  local kept = st.due or st.run
  redis.call('SET', KEYS[2], lw_state_value(st.status, st.attempt, ARGV[2], kept, st.owner),
             'PX', ARGV[3])
end
return 1
"""

# REDLOCK_RELEASE: delete one master's lock if the caller's acquisition holds it. Matched
# on the run id and owner (unique per acquisition), so it also clears a grant whose
# reply was lost, as the Redlock algorithm requires after a failed attempt. Publishes
# 'released' on the wake channel, unless it is '' (a failed attempt giving back its
# grants: waking the waiters then would have every loser of a split vote retry at once).
# KEYS[1] lock   ARGV[1] '<run>|<owner>'   ARGV[2] wake channel, or ''
# returns 1 deleted, 0 not held by that acquisition (expired, or never granted)
REDLOCK_RELEASE = LUA_PROLOGUE + """
local cur = redis.call('GET', KEYS[1])
local l = cur and lw_lock(cur)
if l and l.run .. '|' .. l.owner == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then redis.call('PUBLISH', ARGV[2], 'released') end
  return 1
end
return 0
"""
