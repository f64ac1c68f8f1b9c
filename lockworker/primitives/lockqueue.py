"""The ``Lock``'s atomic steps: a FIFO queue of waiters and a release that grants.

Waking every waiter on a release and letting them race is slow and unfair: each
handover costs the winner a round trip to ask for the lock, the losers one each for
nothing, and the releasing process usually wins its own lock back. Here a release
whose lock others wait for *grants* it: in the same script it writes the first live
waiter's lease (next token, that waiter's run, owner and ttl) and pushes the token
onto that waiter's own grant list, on which the waiter blocks (BLPOP). The new holder
learns it holds the lock when the push arrives, without asking; nobody else wakes. So
the lock passes in order of arrival, at the cost of one blocked connection per
waiting thread. Keys of lock ``report`` in namespace ``locks``::

    lw:lock:locks:{report}:lock          the holder's value and TTL (codec: lw2|...)
    lw:lock:locks:{report}:state         the fencing-token counter (codec), a year
    lw:lock:locks:{report}:queue         zset: waiter run -> ticket (order of arrival)
    lw:lock:locks:{report}:waiters       hash: run -> "place expiry ms|ttl ms|owner";
                                         field "#" numbers the tickets
    lw:lock:locks:{report}:grant:<run>   list: the token granted to that waiter
    lw:lock:locks:{report}:granted       "run|place expiry ms" of the last grant

A waiter's heartbeat is its look: it looks again at least every slice (one second at
most), which keeps its place alive for a slice and :data:`PLACE_MARGIN` more; a place
not refreshed for that long has expired, and the next step that meets it at the head
of the queue drops it. A waiter that died after its last look can still be granted the
lock before its place expires; but it never takes the grant (its grant list stays
full), so once its place would have expired the next look by anyone takes the lock
back and passes it on (``:granted`` says whose grant it is, until when). A dead waiter
is thus passed over within one heartbeat of its death, granted or not. A lock nobody
holds while waiters are queued (its holder died) goes to the first live waiter, which
wakes at the lease's end and takes it.

Times of places come from the server's ``TIME``: one clock for every process.
"""

from __future__ import annotations

from functools import partial
from typing import Any, TypeVar

import redis

from lockworker.errors import ForeignValueError
from lockworker.model.codec import LUA_PROLOGUE, Holder, LockValue, StateValue, decode_grant
from lockworker.model.keys import JobKeys
from lockworker.model.state import Ending, Grant, Settle, Snapshot
from lockworker.primitives.common import ScriptStep
from lockworker.protocol import lua as scripts
from lockworker.protocol.decode import (
    decode_acquire,
    foreign_on_wrongtype,
    settle_plan,
    settle_result,
    text,
)
from lockworker.protocol.luacall import LuaScript

SLICE = 1.0
"""Longest a waiter blocks before it looks again (and so keeps its place alive): the
waiters' heartbeat, at most (a third of the ttl if that is shorter)."""
PLACE_MARGIN = 0.5
"""Seconds a waiter's place outlives one heartbeat: room for a slow round trip, the
server's tick ending a pop late, a short pause."""
MIN_SLICE = 0.001
MIN_WAIT = 0.001

MARKER = "look"
"""What a look pushes onto its caller's grant list so that the pop sent behind it
answers at once (a grant is ``token|attempt``: never this)."""

KEEP_MS = 60_000
"""The queue's keys expire this long after the last waiter looked (abandoned queues)."""

R = TypeVar("R")

# Shared by the three scripts. KEYS[1] lock  KEYS[2] state  KEYS[3] queue  KEYS[4] waiters
# KEYS[5] granted
_QUEUE = LUA_PROLOGUE + """
-- The next attempt and token from the counter, and write the lease of run/owner.
local function lw_take(run, owner, ttl_ms, retention_ms)
  local attempt, token = '1', nil
  local raw = redis.call('GET', KEYS[2])
  if raw then
    local st = lw_state(raw)
    if not st or st.status ~= 'pending' then return {'foreign', KEYS[2], raw} end
    attempt, token = lw_incr(st.attempt), lw_incr(st.token)
  else
    token = lw_now_us()
  end
  redis.call('SET', KEYS[1], lw_lock_value(token, attempt, run, owner), 'PX', ttl_ms)
  redis.call('SET', KEYS[2], lw_state_value('pending', attempt, token, run, owner),
             'PX', retention_ms)
  return {'granted', attempt, token, 0}
end
local function lw_unqueue(run)
  redis.call('ZREM', KEYS[3], run)
  if redis.call('EXISTS', KEYS[3]) == 0 then
    redis.call('DEL', KEYS[4])  -- the last one: the ticket numbers start again
  else
    redis.call('HDEL', KEYS[4], run)
  end
end
-- The first waiter whose place has not expired (dropping those that have):
-- run, ttl ms, owner, place expiry ms; nil if nobody waits.
local function lw_head(now)
  while true do
    local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not first then return nil end
    local info = redis.call('HGET', KEYS[4], first)
    if info then
      local a = string.find(info, '|', 1, true)
      local b = string.find(info, '|', a + 1, true)
      local expiry = tonumber(string.sub(info, 1, a - 1))
      if expiry > now then
        return first, string.sub(info, a + 1, b - 1), string.sub(info, b + 1), expiry
      end
    end
    lw_unqueue(first)
  end
end
-- The lock is ours to give up: grant it to the first live waiter, or free it (writing
-- ``released`` as the state, if given) and publish on the wake channel, unless it is
-- '' (for those that wait without queueing: compute_once's waiters for a value).
local function lw_pass(retention_ms, grant_prefix, channel, released)
  if redis.call('EXISTS', KEYS[3]) == 1 then
    local first, ttl, owner, expiry = lw_head(lw_now_ms())
    if first then
      local r = lw_take(first, owner, ttl, retention_ms)
      if r[1] == 'granted' then
        lw_unqueue(first)
        local g = grant_prefix .. first
        redis.call('RPUSH', g, r[3] .. '|' .. r[2])
        redis.call('PEXPIRE', g, ttl)
        redis.call('SET', KEYS[5], first .. '|' .. expiry, 'PX', ttl)
        return 1
      end
    end
  end
  redis.call('DEL', KEYS[1], KEYS[5])
  if released then redis.call('SET', KEYS[2], released, 'PX', retention_ms) end
  if channel ~= '' then redis.call('PUBLISH', channel, 'released') end
  return 1
end
-- If the lock was granted to ``run`` and not taken (its grant list is still full): ms
-- until that grant is taken back (when the waiter's place would have expired); else nil.
local function lw_unclaimed(run, grant_prefix)
  local g = redis.call('GET', KEYS[5])
  if not g then return nil end
  local bar = string.find(g, '|', 1, true)
  if string.sub(g, 1, bar - 1) ~= run or redis.call('EXISTS', grant_prefix .. run) == 0 then
    return nil
  end
  return tonumber(string.sub(g, bar + 1)) - lw_now_ms()
end
"""

# ACQUIRE: take a free lock if nobody live is queued ahead; else (ARGV[6] = '1') join
# the queue or keep the caller's place alive.
# ARGV[1] owner  ARGV[2] ttl ms  ARGV[3] retention ms  ARGV[4] run  ARGV[5] place ms
# ARGV[6] '1' queue if not granted, '0' one try that never queues
# ARGV[7] ms the queue's keys outlive the caller's look  ARGV[8] grant prefix
# ARGV[9] wake channel ('' for none)
# ARGV[10] ms of the pop sent right behind this look ('0': none, :mod:`.lockwait`);
#          unless the caller is to wait at least that long for a push (another run
#          holds it for longer, or the head's place ends later), a marker (MARKER)
#          is pushed onto the caller's grant list, so the pop answers at once
# A grant that its waiter did not take before its place expired is taken back first.
# returns {'granted', attempt, token, reentered(0|1)}    the caller's run holds it
#         {'locked', attempt, token, owner, pttl ms, run}  another run holds it (pttl:
#                   until the grant is taken back, if sooner and not taken yet)
#         {'queued', ms}            free, but others are ahead; the head's place ends in ms
#         {'foreign', key, value}   a key holds a value we did not write
ACQUIRE = LuaScript(_QUEUE + """
local function lw_look()
local cur = redis.call('GET', KEYS[1])
local r, now, reentered = nil, nil, 1
local l = cur and lw_lock(cur)
if l and l.run ~= ARGV[4] then
  local left = lw_unclaimed(l.run, ARGV[8])
  if left and left <= 0 then  -- granted to a waiter that died: pass it on
    redis.call('DEL', ARGV[8] .. l.run, KEYS[5])
    lw_pass(ARGV[3], ARGV[8], ARGV[9])
    cur, reentered = redis.call('GET', KEYS[1]), 0
  end
end
if cur then
  l = lw_lock(cur)
  if not l then return {'foreign', KEYS[1], cur} end
  if l.run == ARGV[4] and l.owner == ARGV[1] then
    redis.call('DEL', ARGV[8] .. ARGV[4])  -- taken: not to be taken back
    return {'granted', l.attempt, l.token, reentered}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  local left = lw_unclaimed(l.run, ARGV[8])
  if left then pttl = math.max(0, math.min(pttl, left + 1)) end
  r = {'locked', l.attempt, l.token, l.owner, pttl, l.run}
else
  local first, expiry = nil, nil
  if redis.call('EXISTS', KEYS[3]) == 1 then
    now = lw_now_ms()
    local f, _t, _o, e = lw_head(now)
    first, expiry = f, e
  end
  if not first or first == ARGV[4] then
    r = lw_take(ARGV[4], ARGV[1], ARGV[2], ARGV[3])
    if first and r[1] == 'granted' then lw_unqueue(ARGV[4]) end
    return r
  end
  r = {'queued', expiry - now}
end
if ARGV[6] == '1' then
  now = now or lw_now_ms()
  if not redis.call('ZSCORE', KEYS[3], ARGV[4]) then
    redis.call('ZADD', KEYS[3], redis.call('HINCRBY', KEYS[4], '#', 1), ARGV[4])
  end
  local place = (now + tonumber(ARGV[5])) .. '|' .. ARGV[2] .. '|' .. ARGV[1]
  redis.call('HSET', KEYS[4], ARGV[4], place)
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
  redis.call('PEXPIRE', KEYS[4], ARGV[7])
end
return r
end
local r = lw_look()
local pop = tonumber(ARGV[10])
if pop > 0 and not ((r[1] == 'locked' and tonumber(r[5]) + 1 >= pop)
                    or (r[1] == 'queued' and tonumber(r[2]) + 1 >= pop)) then
  local g = ARGV[8] .. ARGV[4]
  if r[1] == 'granted' then  -- taken: no grant of this run is left to take back
    local last = redis.call('GET', KEYS[5])
    if last and string.sub(last, 1, #ARGV[4] + 1) == ARGV[4] .. '|' then
      redis.call('DEL', KEYS[5])
    end
  end
  redis.call('RPUSH', g, '""" + MARKER + """')
  redis.call('PEXPIRE', g, ARGV[2])
end
return r
""")

# RELEASE: give the caller's exact lease up, to the first live waiter if any.
# ARGV[1] the caller's lock value  ARGV[2] the state a release leaves when nobody waits
# ARGV[3] retention ms  ARGV[4] grant prefix  ARGV[5] wake channel
# returns 1 released (and granted, or freed), 2 freed already (a retry whose first
#         reply was lost), 0 refused: not the holder, -1 refused, and the lock's state
#         is gone (the server lost its data). A retry of a release that granted the
#         lock cannot tell it from a lease that expired and was taken: it is refused.
RELEASE = LuaScript(_QUEUE + """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return lw_pass(ARGV[3], ARGV[4], ARGV[5], ARGV[2])
end
""" + scripts.SETTLE_REFUSED)

# LEAVE: give up a place in the queue (a timeout, an interrupt); if the lock was granted
# to the caller meanwhile, pass it on unused.
# ARGV[1] run  ARGV[2] owner  ARGV[3] retention ms  ARGV[4] grant prefix  ARGV[5] channel
# returns 1 the lock had been granted to the caller and was passed on, 0 it had not
LEAVE = LuaScript(_QUEUE + """
lw_unqueue(ARGV[1])
redis.call('DEL', ARGV[4] .. ARGV[1])
local cur = redis.call('GET', KEYS[1])
local l = cur and lw_lock(cur)
if l and l.run == ARGV[1] and l.owner == ARGV[2] then
  return lw_pass(ARGV[3], ARGV[4], ARGV[5])
end
return 0
""")


class LockSteps:
    """The ``Lock``'s three steps for one lock's keys; shares the scripts process-wide.

    Each step is built without I/O (``*_step``: the script, keys, arguments and the
    reading of the reply) and sent by :meth:`run` on a ``redis.Redis`` client or by
    :meth:`arun` on a ``redis.asyncio`` one, so a sync and an async ``Lock`` take the
    same steps. :meth:`acquire`, :meth:`release` and :meth:`leave` are the sync sends.
    """

    __slots__ = ("_channel", "_keys", "client", "grant_prefix", "keys")

    def __init__(self, client: Any, keys: JobKeys, *, publish: bool = False) -> None:
        self.client = client
        self.keys = keys
        self._channel = keys.wake if publish else ""
        self.grant_prefix = keys.extra("grant:")
        self._keys = (keys.lock, keys.state, keys.extra("queue"), keys.extra("waiters"),
                      keys.extra("granted"))

    def grant_key(self, who: Holder) -> str:
        """The list on which ``who`` waits for the lock to be granted."""
        return self.grant_prefix + who.run

    def acquire_step(
        self, who: Holder, ttl_ms: int, retention_ms: int, place_ms: int, *, queue: bool,
        pop_ms: int = 0,
    ) -> ScriptStep[Grant | Snapshot | float]:
        """One look: a :class:`Grant`, the holder, or seconds until the head's place ends.
        ``pop_ms``: the length of the pop sent right behind it (:mod:`.lockwait`)."""
        args = (who.owner, ttl_ms, retention_ms, who.run, place_ms, "1" if queue else "0",
                KEEP_MS, self.grant_prefix, self._channel, pop_ms)
        return ScriptStep(ACQUIRE, self._keys, args, partial(_look, self.keys))

    def release_step(self, held: LockValue, retention_ms: int) -> ScriptStep[Settle]:
        """Release (granting the lock to the first live waiter, if any)."""
        new_state, _ = settle_plan(held, Ending.RELEASE)
        args = (held.encode(), new_state.encode(), retention_ms, self.grant_prefix,
                self._channel)
        return ScriptStep(RELEASE, self._keys, args, partial(_settled, new_state))

    def leave_step(self, who: Holder, retention_ms: int) -> ScriptStep[bool]:
        """Leave the queue; True if the lock had been granted to ``who`` (passed on)."""
        args = (who.run, who.owner, retention_ms, self.grant_prefix, self._channel)
        return ScriptStep(LEAVE, self._keys, args, bool)

    def run(self, step: ScriptStep[R]) -> R:
        try:
            return step.run(self.client)
        except redis.ResponseError as exc:
            raise foreign_on_wrongtype(self.keys, exc) from exc

    async def arun(self, step: ScriptStep[R]) -> R:
        try:
            return await step.arun(self.client)
        except redis.ResponseError as exc:
            raise foreign_on_wrongtype(self.keys, exc) from exc

    def acquire(
        self, who: Holder, ttl_ms: int, retention_ms: int, place_ms: int, *, queue: bool
    ) -> Grant | Snapshot | float:
        return self.run(self.acquire_step(who, ttl_ms, retention_ms, place_ms, queue=queue))

    def release(self, held: LockValue, retention_ms: int) -> Settle:
        return self.run(self.release_step(held, retention_ms))

    def leave(self, who: Holder, retention_ms: int) -> bool:
        return self.run(self.leave_step(who, retention_ms))


def _look(keys: JobKeys, reply: Any) -> Grant | Snapshot | float:
    if text(reply[0]) == "queued":
        return max(0, int(reply[1])) / 1000.0
    seen = decode_acquire(keys, reply)
    if isinstance(seen, Snapshot) and seen.resolved:
        # A lock never resolves: DONE or GAVE_UP here was written by something else.
        raise ForeignValueError(keys.state, seen.status.value)
    return seen


def _settled(new_state: StateValue, reply: Any) -> Settle:
    return settle_result(int(reply), new_state)


def wait_slice(client: Any, ttl: float) -> float:
    """A waiter's longest block: a third of the lease, at most :data:`SLICE`, and less
    than the client's socket timeout (a BLPOP longer than it would fail, on either
    side: redis.asyncio applies the socket timeout to a blocking read too)."""
    pause = min(SLICE, ttl / 3)
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    socket_timeout = kwargs.get("socket_timeout")
    if isinstance(socket_timeout, (int, float)) and socket_timeout > 0:
        pause = min(pause, socket_timeout / 2)
    return max(MIN_SLICE, pause)


def place_ms(slice_: float) -> int:
    """Milliseconds a waiter's place lives after its look: one heartbeat (``slice_``,
    the longest it waits before it looks again) and :data:`PLACE_MARGIN`."""
    return round((slice_ + PLACE_MARGIN) * 1000)


def pause_for(seen: Snapshot | float, now: float, deadline: float | None, slice_: float) -> float:
    """How long a waiter blocks for a grant before looking again, given what its look
    saw (the holder, or seconds until the queue's head's place ends).

    Until the holder's TTL runs out on this process's clock (a dead holder grants
    nothing), or the head of the queue's place ends; at most one slice, so the
    waiter's own place stays alive.
    """
    pause = seen if isinstance(seen, float) else (seen.pttl_ms or 0) / 1000.0
    pause = min(pause + MIN_WAIT, slice_)
    if deadline is not None:
        pause = min(pause, deadline - now)
    return max(MIN_WAIT, pause)


def pushed_grant(key: str, reply: Any) -> tuple[int, int] | None:
    """What a BLPOP on the grant list ``key`` answered: (token, attempt), or None (it
    timed out, or popped a look's marker that a pipelined pop did not take: a grant
    pushed just before that pop was taken instead, or the pop was refused with its
    look after a server restart; the caller looks again, as after a timeout)."""
    if reply is None:
        return None
    raw = reply[1]
    if (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)) == MARKER:
        return None
    grant = decode_grant(reply[1])
    if grant is None:
        raise ForeignValueError(key, str(reply[1]))
    return grant
