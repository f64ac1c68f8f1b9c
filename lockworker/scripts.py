"""Lua sources of the lock protocol's atomic steps.

Each script is one atomic step on the server: no other command runs between its reads
and its writes. Values follow :mod:`lockworker.codec` (``lw1|...``). Headers give the
keys, the arguments and every possible result, in the manner of redis-py's ``lock.py``.
A benchmark (docs/benchmarks.md) chose scripts over WATCH/MULTI/EXEC for the hot path:
one round trip per step instead of three. :mod:`lockworker.txn` keeps the
WATCH/MULTI/EXEC form of the same steps.
"""

from __future__ import annotations

# ACQUIRE: take the next attempt of a pending job, or report why not.
# KEYS[1] lock   KEYS[2] state
# ARGV[1] owner  ARGV[2] lease ms  ARGV[3] max attempts  ARGV[4] retention ms
# ARGV[5] wake channel
# returns one of
#   {'granted', attempt, token, reentered(0|1)}       the caller holds the lease now
#   {'locked', attempt, token, holder, pttl ms}       another process holds it
#   {'done'|'gave_up', attempt, token, last owner}    resolved; nothing to take
#   {'foreign', key, value}                           a key holds a value we did not write
ACQUIRE = """
local status, attempt, token, last = 'pending', 0, 0, ''
local st = redis.call('GET', KEYS[2])
if st then
  local s, a, t, o = string.match(st, '^lw1|([%a_]+)|(%d+)|(%d+)|(.*)$')
  if not s then return {'foreign', KEYS[2], st} end
  status, attempt, token, last = s, tonumber(a), tonumber(t), o
end
if status ~= 'pending' then return {status, attempt, token, last} end
local cur = redis.call('GET', KEYS[1])
if cur then
  local t, a, o = string.match(cur, '^lw1|(%d+)|(%d+)|(.*)$')
  if not t then return {'foreign', KEYS[1], cur} end
  if o == ARGV[1] then return {'granted', tonumber(a), tonumber(t), 1} end
  return {'locked', tonumber(a), tonumber(t), o, redis.call('PTTL', KEYS[1])}
end
if attempt >= tonumber(ARGV[3]) then
  redis.call('SET', KEYS[2], 'lw1|gave_up|' .. attempt .. '|' .. token .. '|' .. last,
             'PX', ARGV[4])
  redis.call('PUBLISH', ARGV[5], 'gave_up')
  return {'gave_up', attempt, token, last}
end
attempt = attempt + 1
token = token + 1
redis.call('SET', KEYS[1], 'lw1|' .. token .. '|' .. attempt .. '|' .. ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], 'lw1|pending|' .. attempt .. '|' .. token .. '|' .. ARGV[1],
           'PX', ARGV[4])
return {'granted', attempt, token, 0}
"""

# RENEW: extend the lease, only for the holder of this exact attempt.
# KEYS[1] lock   KEYS[2] state
# ARGV[1] expected lock value   ARGV[2] lease ms   ARGV[3] retention ms
# returns 1 renewed, 0 not the holder any more
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return 1
end
return 0
"""

# SETTLE: end an attempt (complete, fail, give up or release) and wake the waiters.
# KEYS[1] lock   KEYS[2] state
# ARGV[1] expected lock value   ARGV[2] new state value   ARGV[3] retention ms
# ARGV[4] wake channel          ARGV[5] wake message
# returns 1 applied now, 2 applied already (a retry whose first reply was lost),
#         0 refused: the caller does not hold this attempt's lease
SETTLE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  redis.call('PUBLISH', ARGV[4], ARGV[5])
  return 1
end
if redis.call('GET', KEYS[2]) == ARGV[2] then return 2 end
return 0
"""

# RESET: make a resolved (or, with force, a held) job pending again with no attempts
# spent. The token counter is kept, so fencing tokens never repeat.
# KEYS[1] lock   KEYS[2] state
# ARGV[1] force (0|1)   ARGV[2] retention ms   ARGV[3] wake channel
# returns {'reset', previous status} or {'held', holder} or {'foreign', key, value}
RESET = """
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, 4) ~= 'lw1|' then return {'foreign', KEYS[1], cur} end
local token, status = 0, 'absent'
local st = redis.call('GET', KEYS[2])
if st then
  local s, a, t, o = string.match(st, '^lw1|([%a_]+)|(%d+)|(%d+)|(.*)$')
  if not s then return {'foreign', KEYS[2], st} end
  token, status = tonumber(t), s
end
if cur and ARGV[1] ~= '1' then
  return {'held', string.match(cur, '^lw1|%d+|%d+|(.*)$')}
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], 'lw1|pending|0|' .. token .. '|', 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[3], 'reset')
return {'reset', status}
"""
