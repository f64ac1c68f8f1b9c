"""Lua sources of the lock protocol's atomic steps.

Each script is one atomic step on the server: no other command runs between its reads
and its writes. Values follow :mod:`lockworker.model.codec` (``lw2|...``) and are parsed by its
shared :data:`~lockworker.model.codec.LUA_PROLOGUE`; tokens and attempts stay decimal strings
from end to end, so they are exact at any size. Headers give the keys, the arguments
and every possible result, in the manner of redis-py's ``lock.py``. A benchmark
(docs/benchmarks.md) chose scripts over WATCH/MULTI/EXEC for the hot path: one round
trip per step instead of three. :mod:`lockworker.protocol.txn` keeps the WATCH/MULTI/EXEC form of
the same steps.

Fencing tokens of a job id that the server does not know (a new id, one forgotten after
``retention``, or one lost with the server's data) start at the server's clock in
microseconds, so they stay above every token handed out for that id before, as long as
the server's clock does not go back by more than ``retention``.
"""

from __future__ import annotations

from lockworker.model.codec import LUA_PROLOGUE
from lockworker.model.history import FOLD_LIMIT_MS, HISTORY_CAP
from lockworker.model.index import LUA as INDEX
from lockworker.model.index import Kind

# The attempt history (lockworker.model.history): KEYS[3] of every job step, a list of
# records ``lw2|<attempt>|<token>|<run>|<started ms>|<ended ms>|<ending>|<JSON>``.
# ``lw_last`` reads the last record before a step writes anything: LINDEX raises
# WRONGTYPE for a key of another type (reported as ForeignValueError), and a value that
# is not a record is returned so the step can report it foreign; ``lw_tail`` (a settle)
# reads the last two values so, which also tell whether the record is the only one.
# ``lw_keep`` trims only a list that a push made longer than the cap, and keeps it as
# long as the state. ``lw_folds`` is history.folds (a DONE that folds the job's one
# clean attempt into its state), ``lw_owner_tail`` record_tail(owner) (json.dumps's
# escapes, ensure_ascii=False), ``lw_implied_start`` history.implied_start and
# ``lw_implied`` the record a new job's grant did not write (txnparts.implied).
HISTORY = f"""
local function lw_record(v)
  local a, t, r, s, e, k, tail = string.match(v,
    '^lw2|([0-9]+)|([0-9]+)|([0-9a-f]*)|([0-9]+)|([0-9]*)|([a-z_]*)|({{.*)$')
  if not (lw_num(a) and lw_num(t)) then return nil end
  return {{attempt = a, token = t, run = r, started = s, ended = e, ending = k, tail = tail}}
end
local function lw_record_value(r)
  return 'lw2|' .. r.attempt .. '|' .. r.token .. '|' .. r.run .. '|' .. r.started .. '|'
    .. r.ended .. '|' .. r.ending .. '|' .. r.tail
end
local function lw_last(key)
  local v = redis.call('LINDEX', key, -1)
  if not v then return false, nil end
  return lw_record(v), v
end
local function lw_ms(ms)
  return string.format('%.0f', ms)
end
local function lw_keep(key, retention, length)
  if length and length > {HISTORY_CAP} then redis.call('LTRIM', key, -{HISTORY_CAP}, -1) end
  redis.call('PEXPIRE', key, retention)
end
local function lw_tail(key)
  local vs = redis.call('LRANGE', key, -2, -1)
  local v = vs[#vs]
  if not v then return false, nil, 0 end
  return lw_record(v), v, #vs
end
local function lw_token_ms(t)
  if #t <= 3 then return '0' end
  return string.sub(t, 1, #t - 3)
end
local function lw_folds(rec, count, token, ending, tail, now)
  return ending == 'done' and count == 1 and rec and rec.token == token and rec.ending == ''
    and rec.tail == tail and rec.started == lw_token_ms(token)
    and now - tonumber(rec.started) >= 0 and now - tonumber(rec.started) < {FOLD_LIMIT_MS}
end
local function lw_close_lost(key, rec, now)
  if rec and rec.ending == '' then
    rec.ended, rec.ending = now, 'lost'
    redis.call('LSET', key, -1, lw_record_value(rec))
  end
end
local function lw_implied_start(attempt, token, now)
  if attempt ~= '1' or #token < 4 or #token > 18 then return nil end
  local started = lw_token_ms(token)
  local took = now - tonumber(started)
  if took < 0 or took >= {FOLD_LIMIT_MS} then return nil end
  return started
end
""" + r"""
local function lw_owner_tail(owner)
  local named = {['"'] = '\\"', ['\\'] = '\\\\', ['\n'] = '\\n', ['\r'] = '\\r',
                 ['\t'] = '\\t', ['\b'] = '\\b', ['\f'] = '\\f'}
  local escaped = string.gsub(owner, '[%z\1-\31"\\]', function(c)
    return named[c] or string.format('\\u%04x', string.byte(c))
  end)
  return '{"owner":"' .. escaped .. '"}'
end
local function lw_implied(st, rec, now, lost)
  if st.status ~= 'pending' or st.run == '' or (rec and rec.token == st.token) then
    return nil
  end
  local started = lw_implied_start(st.attempt, st.token, now)
  if not started then return nil end
  return lw_record_value({attempt = st.attempt, token = st.token, run = st.run,
    started = started, ended = lost and lw_ms(now) or '', ending = lost and 'lost' or '',
    tail = lw_owner_tail(st.owner)})
end
"""

# ACQUIRE: take the next attempt of a pending job, or report why not.
# KEYS[1] lock   KEYS[2] state   KEYS[3] history   KEYS[4] index (or the lock: none)
# ARGV[1] owner  ARGV[2] lease ms  ARGV[3] max attempts  ARGV[4] retention ms
# ARGV[5] wake channel  ARGV[6] run  ARGV[7] the JSON that ends the grant's record
# returns one of
#   {'granted', attempt, token, reentered(0|1)}      the caller's run holds the lease now
#   {'locked', attempt, token, holder, pttl ms, run} another run holds it
#   {'due', attempt, token, owner, ms left}          free, but its next attempt is not
#                                                    due yet (a failure's retry schedule)
#   {'done'|'gave_up', attempt, token, owner, run}   resolved; nothing to take
#   {'foreign', key, value}                          a key holds a value we did not write
# Only the same run re-enters (a retry whose reply was lost): a restarted process with
# the same owner label has a new run, and waits out its predecessor's lease.
# The grant of a job the server does not know (no state) writes its lease and state and
# no record: its attempt's record is implied by them (attempt 1, its run and owner,
# started at its token's milliseconds, lockworker.model.history.implied_start) until
# its settle writes it or folds it. Any other grant appends its attempt's record; it,
# and an acquire that gives the job up, first close the last record as lost if it is
# still open (its lease ran out), or push the implied one closed as lost (lw_implied).
ACQUIRE = LUA_PROLOGUE + HISTORY + INDEX + """
local status, attempt, token, run, last, due = 'pending', '0', nil, '', '', nil
local raw = redis.call('GET', KEYS[2])
local st = nil
if raw then
  st = lw_state(raw)
  if not st then return {'foreign', KEYS[2], raw} end
  status, attempt, token, run, last, due = st.status, st.attempt, st.token, st.run, st.owner,
                                           st.due
end
if status ~= 'pending' then return {status, attempt, token, last, run} end
if not raw then
  -- A job the server does not know: its first token is the server's clock, read once
  -- (the token and the grant's time), and the lease is written only where no key is
  -- (NX: a lease, or a key of another type, is read below as it always was).
  token = lw_now_us()
  if redis.call('SET', KEYS[1], lw_lock_value(token, '1', ARGV[6], ARGV[1]), 'NX',
                'PX', ARGV[2]) then
    redis.call('SET', KEYS[2], lw_state_value('pending', '1', token, ARGV[6], ARGV[1]),
               'PX', ARGV[4])
    lw_index(1, tonumber(lw_token_ms(token)), ARGV[4])
    return {'granted', '1', token, 0}
  end
  token = nil
end
local cur = redis.call('GET', KEYS[1])
if cur then
  local l = lw_lock(cur)
  if not l then return {'foreign', KEYS[1], cur} end
  if l.run == ARGV[6] and l.owner == ARGV[1] then
    return {'granted', l.attempt, l.token, 1}
  end
  return {'locked', l.attempt, l.token, l.owner, redis.call('PTTL', KEYS[1]), l.run}
end
local rec, seen = lw_last(KEYS[3])
if rec == nil then return {'foreign', KEYS[3], seen} end
local now = lw_now_ms()
local lost = lw_implied(st, rec, now, true)
if token and not lw_gt(ARGV[3], attempt) then
  redis.call('SET', KEYS[2], lw_state_value('gave_up', attempt, token, due or run, last),
             'PX', ARGV[4])
  if lost then
    lw_keep(KEYS[3], ARGV[4], redis.call('RPUSH', KEYS[3], lost))
  elseif rec and rec.ending == '' then
    lw_close_lost(KEYS[3], rec, lw_ms(now))
    lw_keep(KEYS[3], ARGV[4])
  end
  lw_index(4, now, ARGV[4])
  redis.call('PUBLISH', ARGV[5], 'gave_up')
  return {'gave_up', attempt, token, last, run}
end
if due then
  local left = tonumber(due) - now
  if left > 0 then return {'due', attempt, token, last, left} end
end
attempt, token, now = lw_incr(attempt), lw_incr(token), lw_ms(now)
redis.call('SET', KEYS[1], lw_lock_value(token, attempt, ARGV[6], ARGV[1]), 'PX', ARGV[2])
redis.call('SET', KEYS[2], lw_state_value('pending', attempt, token, ARGV[6], ARGV[1]),
           'PX', ARGV[4])
if lost then redis.call('RPUSH', KEYS[3], lost) else lw_close_lost(KEYS[3], rec, now) end
local length = redis.call('RPUSH', KEYS[3], lw_record_value({attempt = attempt, token = token,
  run = ARGV[6], started = now, ended = '', ending = '', tail = ARGV[7]}))
lw_keep(KEYS[3], ARGV[4], length)
lw_index(1, tonumber(now), ARGV[4])
return {'granted', attempt, token, 0}
"""

# RENEW: extend the lease, only for the holder of this exact attempt and run (and keep
# the job's history as long as its state, if it is a list: never another's key).
# KEYS[1] lock   KEYS[2] state   KEYS[3] history   KEYS[4] index (or the lock: none)
# ARGV[1] expected lock value   ARGV[2] lease ms   ARGV[3] retention ms
# A job's renewal moves its held entry in the index to now (lockworker.model.index):
# an entry older than a lease is a holder that stopped renewing.
# returns 1 renewed, 0 not the holder any more,
#        -1 not the holder, and the job's state is gone: the server lost its data
RENEW = ("""
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  if redis.call('TYPE', KEYS[3])['ok'] == 'list' then redis.call('PEXPIRE', KEYS[3], ARGV[3]) end
  if KEYS[4] and KEYS[4] ~= KEYS[1] then
    local t = redis.call('TIME')
    redis.call('ZADD', KEYS[4], 'XX', string.format('%.0f', INDEX_HELD + t[1] * 1000
      + math.floor(t[2] / 1000)), string.match(KEYS[2], '{([^}]*)}:state$'))
  end
  return 1
end
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
return 0
""").replace("INDEX_HELD", str(Kind.HELD.low))

# The tail of every settle step once the caller's lease is not there: applied already
# (2), refused (0), or refused because the job's state is gone too (-1). A failure that
# wrote a due time (ARGV[6] set), and a DONE that folded in its attempt's duration, are
# found by their fields, as the server's clock wrote the rest.
SETTLE_REFUSED = """
local st = redis.call('GET', KEYS[2])
if st == ARGV[2] then return 2 end
if not st then return -1 end
local was, want = lw_state(st), lw_state(ARGV[2])
if was and was.status == want.status and was.attempt == want.attempt
    and was.token == want.token and was.owner == want.owner
    and ((was.due and ARGV[6] and ARGV[6] ~= '') or (was.took and was.run == want.run)) then
  return 2
end
return 0
"""

# SETTLE: end an attempt (complete, fail, give up or release), close its record in the
# history, and wake the waiters. Nothing is written unless the caller holds the lease:
# a stale holder writes no record.
# KEYS[1] lock   KEYS[2] state   KEYS[3] history   KEYS[4] index (or the lock: none)
# ARGV[1] expected lock value   ARGV[2] new state value   ARGV[3] retention ms
# ARGV[4] wake channel          ARGV[5] wake message
# ARGV[6] (a failure with a retry delay) ms until the next attempt is due: the state
#         written then carries the due time, the server's clock plus this, in the
#         run's place (lockworker.model.codec)
# ARGV[7] how the attempt ended (its record's ending)
# ARGV[8] the JSON that ends its record (owner, and a failure's text)
# ARGV[9] (a release, or a failure due again at once) the namespace's handover channel,
#         told the wake message too: backups holding deliveries back listen there
# returns 1 applied now, 2 applied already (a retry whose first reply was lost),
#         0 refused: the caller does not hold this attempt's lease,
#        -1 refused, and the job's state is gone: the server lost its data,
#        -2 refused: the history's last value is not a record (a foreign value)
# The attempt's record is the last one (its grant appended it), or, for a new job's
# first attempt, implied by the lease (its grant wrote none: ACQUIRE); the settle then
# appends it, started at the token's milliseconds; if it is gone (the key deleted), the
# settle appends one that starts when it ends. A DONE whose record is the history's only
# one, clean, started at its token's milliseconds (lw_folds), or whose implied record
# has no other record beside it, folds it into the state instead (its duration after
# the run), and no history key is left.
SETTLE = LUA_PROLOGUE + HISTORY + INDEX + """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local rec, seen, count = lw_tail(KEYS[3])
  if rec == nil then return -2 end
  local value = ARGV[2]
  local now = lw_now_ms()
  local status = lw_state(value).status
  if ARGV[6] and ARGV[6] ~= '' then
    local st = lw_state(value)
    local due = string.format('%.0f', now + tonumber(ARGV[6]))
    value = lw_state_value(st.status, st.attempt, st.token, due, st.owner)
    lw_index(2, now + tonumber(ARGV[6]), ARGV[3])
  elseif status == 'done' then
    lw_index(0)
  elseif status == 'gave_up' then
    lw_index(4, now, ARGV[3])
  else
    lw_index(3, now, ARGV[3])
  end
  local held = lw_lock(ARGV[1])
  local ours = rec and rec.token == held.token
  local implied = not ours and lw_implied_start(held.attempt, held.token, now)
  local started = nil
  if lw_folds(rec, count, held.token, ARGV[7], ARGV[8], now) then
    started = rec.started
    redis.call('DEL', KEYS[1], KEYS[3])
  elseif implied and count == 0 and ARGV[7] == 'done' then
    started = implied
    redis.call('DEL', KEYS[1])
  end
  if started then
    local st = lw_state(value)
    value = lw_state_value(st.status, st.attempt, st.token,
                           st.run .. string.format('%x', now - tonumber(started)), st.owner)
    redis.call('SET', KEYS[2], value, 'PX', ARGV[3])
  else
    redis.call('DEL', KEYS[1])
    redis.call('SET', KEYS[2], value, 'PX', ARGV[3])
    local at = lw_ms(now)
    local ended = {attempt = held.attempt, token = held.token, run = held.run,
                   started = implied or at, ended = at, ending = ARGV[7], tail = ARGV[8]}
    if ours and rec.ending == '' then
      ended.started = rec.started
      redis.call('LSET', KEYS[3], -1, lw_record_value(ended))
      lw_keep(KEYS[3], ARGV[3])
    else
      lw_keep(KEYS[3], ARGV[3], redis.call('RPUSH', KEYS[3], lw_record_value(ended)))
    end
  end
  redis.call('PUBLISH', ARGV[4], ARGV[5])
  if ARGV[9] and ARGV[9] ~= '' then redis.call('PUBLISH', ARGV[9], ARGV[5]) end
  return 1
end
""" + SETTLE_REFUSED


# RESET: make a known job pending again with no attempts spent. The token counter is
# kept, so fencing tokens never repeat; so is the attempt history (kept as long as the
# state again, if it is a list; a DONE state's folded attempt is written back to it, and
# so is the implied record of a first attempt whose grant wrote none: ACQUIRE).
# KEYS[1] lock   KEYS[2] state   KEYS[3] history   KEYS[4] index (or the lock: none)
# ARGV[1] force (0|1)   ARGV[2] retention ms   ARGV[3] wake channel
# ARGV[4] (optional) the state the caller expects: pending, held, done or gave_up
# returns {'reset', previous status}   the job is pending again
#         {'changed', state}           not in the expected state (nothing written)
#         {'held', holder}             a live lease holds it (and not forced)
#         {'absent'}                   the server knows no such job; nothing written
#         {'foreign', key, value}      a key holds a value we did not write (and not
#                                      forced; forced, the value is replaced)
RESET = LUA_PROLOGUE + HISTORY + INDEX + """
local force = ARGV[1] == '1'
local cur = redis.call('GET', KEYS[1])
local raw = redis.call('GET', KEYS[2])
if not cur and not raw then return {'absent'} end
local l, st = nil, nil
if cur then
  l = lw_lock(cur)
  if not l and not force then return {'foreign', KEYS[1], cur} end
end
if raw then
  st = lw_state(raw)
  if not st and not force then return {'foreign', KEYS[2], raw} end
end
if ARGV[4] and ARGV[4] ~= '' then
  local now = (st and st.status) or (raw and 'foreign') or 'pending'
  if cur and now == 'pending' then now = 'held' end
  if now ~= ARGV[4] then return {'changed', now} end
end
if l and not force then return {'held', l.owner} end
local token = (st and st.token) or (l and l.token) or lw_now_us()
local now = lw_now_ms()
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], lw_state_value('pending', '0', token, '', ''), 'PX', ARGV[2])
local kind = redis.call('TYPE', KEYS[3])['ok']
local started = st and st.took and lw_token_ms(st.token)
if started and #started <= 15 and kind == 'none' then
  -- The DONE state held the job's one attempt: it goes back to the history (a token
  -- of over 18 digits never folds one: its milliseconds are not a Lua number).
  redis.call('RPUSH', KEYS[3], lw_record_value({attempt = st.attempt, token = st.token,
    run = st.run, started = started, ended = lw_ms(tonumber(started) + tonumber(st.took, 16)),
    ending = 'done', tail = lw_owner_tail(st.owner)}))
  kind = 'list'
elseif st and (kind == 'none' or kind == 'list') then
  -- A new job's first attempt whose grant wrote no record: it goes to the history,
  -- open (read as lost: its lease is gone)
  local rec = false
  if kind == 'list' then rec = lw_last(KEYS[3]) end
  local implied = rec ~= nil and lw_implied(st, rec, now, false)
  if implied then
    redis.call('RPUSH', KEYS[3], implied)
    kind = 'list'
  end
end
if kind == 'list' then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
lw_index(3, now, ARGV[2])
redis.call('PUBLISH', ARGV[3], 'reset')
return {'reset', (st and st.status) or 'pending'}
"""


# INSPECT: read a job's state, its lease and the lease's time left, and the server's
# clock (which tells a due time still ahead), at one instant. Writes nothing. Reads
# only what can change the answer: nothing more of a resolved job (its lease no longer
# counts), no time left of a lease that is not there, and the clock only for a free
# job with a state (which may hold a due time); a look behind a fast primary mostly
# finds its jobs DONE, so this is one command per look, not four.
# KEYS[1] lock   KEYS[2] state
# returns {state or false, lock or false, pttl ms (-2 none, -1 no expiry), TIME or false}
INSPECT = """
local st = redis.call('GET', KEYS[2])
if st and (string.sub(st, 1, 9) == 'lw2|done|' or string.sub(st, 1, 12) == 'lw2|gave_up|') then
  return {st, false, -2, false}
end
local lock = redis.call('GET', KEYS[1])
if lock then return {st, lock, redis.call('PTTL', KEYS[1]), false} end
return {st, false, -2, st and redis.call('TIME')}
"""
