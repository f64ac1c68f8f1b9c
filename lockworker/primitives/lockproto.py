"""The ``Lock``'s own atomic steps: the job protocol's acquire, plus hand-off and queue.

A plain job-protocol lock is unfair under contention: the releasing process usually
re-takes the lock before any woken waiter's request reaches the server (measured: 500
handovers for 1,800 passes a second with 4 processes). Two cures, each one round trip
per step, like the job protocol:

*Hand-off* (the default). The release publishes on the wake channel; PUBLISH returns
how many connections listen. If any do, the release also leaves a short-lived
hand-off mark naming the releasing *seat* (process and thread). While the mark lives,
that seat cannot take the lock again; anyone else can, and the first grant deletes the
mark. A woken waiter thus gets in first, and a lock nobody waits for costs nothing
more (no mark is set). Keys of lock ``report``::

    lw:lock:locks:{report}:handoff   the releasing seat, for at most HANDOFF seconds

*Queue* (``Lock(..., fair=True)``). Waiters take tickets as the semaphore's do
(:mod:`lockworker.primitives.lua`): only the first in the queue may take a free lock,
so the lock passes in order of arrival. Waiters keep their place alive with their
retries; a dead waiter's place expires after ``ttl`` and is purged by the next step::

    lw:lock:locks:{report}:queue     zset: acquisition run -> ticket
    lw:lock:locks:{report}:waiting   zset: acquisition run -> expiry (server ms)
    lw:lock:locks:{report}:tickets   the ticket counter
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Sequence
from typing import Any

import redis
from redis.commands.core import Script

from lockworker import scripts
from lockworker.codec import LUA_PROLOGUE, Holder, LockValue
from lockworker.keys import JobKeys
from lockworker.protocol import (
    ScriptProtocol,
    _foreign_on_wrongtype,
    decode_acquire,
    settle_plan,
    settle_result,
    text,
)
from lockworker.state import Grant, Settle, Snapshot

HANDOFF = 0.05
"""Seconds a releaser that others wait for stays out, unless a waiter takes it sooner."""

_ACQUIRE_BODY = scripts.ACQUIRE[len(LUA_PROLOGUE):]
_ACQUIRE_FN = "local function lw_acquire()\n" + _ACQUIRE_BODY + "\nend\n"

# LOCK_ACQUIRE: the job protocol's ACQUIRE, refused to the seat that just handed off.
# KEYS[1] lock  KEYS[2] state  KEYS[3] hand-off mark
# ARGV[1..6] as ACQUIRE  ARGV[7] the caller's seat
# returns ACQUIRE's replies, or {'handoff', ms}: the caller handed off; look again in ms
LOCK_ACQUIRE = LUA_PROLOGUE + _ACQUIRE_FN + """
local mark = redis.call('GET', KEYS[3])
if mark then
  if mark == ARGV[7] then return {'handoff', redis.call('PTTL', KEYS[3])} end
  local r = lw_acquire()
  if r[1] == 'granted' then redis.call('DEL', KEYS[3]) end
  return r
end
return lw_acquire()
"""

# LOCK_RELEASE: SETTLE's release, and a hand-off mark if anyone listens for it.
# KEYS[1] lock  KEYS[2] state  KEYS[3] hand-off mark
# ARGV[1..5] as SETTLE  ARGV[6] the releaser's seat  ARGV[7] hand-off ms
# ARGV[8] receivers that are no waiters (1: the releaser's own idle subscription)
# returns as SETTLE
LOCK_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  if redis.call('PUBLISH', ARGV[4], ARGV[5]) > tonumber(ARGV[8]) then
    redis.call('SET', KEYS[3], ARGV[6], 'PX', ARGV[7])
  end
  return 1
end
""" + scripts.SETTLE_REFUSED


# FAIR_ACQUIRE: ACQUIRE for the first in the queue (or anyone when nobody queues).
# KEYS[1] lock  KEYS[2] state  KEYS[3] queue  KEYS[4] waiting  KEYS[5] tickets
# ARGV[1..6] as ACQUIRE (ARGV[6], the run, names the caller's place)
# ARGV[7] place ms  ARGV[8] '1' queue if not granted, '0' one try that never queues
# returns ACQUIRE's replies, or {'queued', ms}: others are ahead; look again within ms
FAIR_ACQUIRE = LUA_PROLOGUE + _ACQUIRE_FN + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, w in ipairs(gone) do redis.call('ZREM', KEYS[3], w) end
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  redis.call('PUBLISH', ARGV[5], 'expired')
end
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
local r = {'queued', tonumber(ARGV[7])}
if not first or first == ARGV[6] then
  r = lw_acquire()
  if r[1] == 'granted' then
    if first then
      redis.call('ZREM', KEYS[3], ARGV[6])
      redis.call('ZREM', KEYS[4], ARGV[6])
    end
    return r
  end
  if r[1] ~= 'locked' then return r end
end
if ARGV[8] == '1' then
  if not redis.call('ZSCORE', KEYS[3], ARGV[6]) then
    redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[5]), ARGV[6])
  end
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[7]), ARGV[6])
end
return r
"""

# FAIR_LEAVE: give up a place in the queue; wake the queue (the next may be first now).
# KEYS[1] queue  KEYS[2] waiting   ARGV[1] run  ARGV[2] wake channel   returns 0|1
FAIR_LEAVE = """
redis.call('ZREM', KEYS[2], ARGV[1])
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if removed > 0 then redis.call('PUBLISH', ARGV[2], 'left') end
return removed
"""

_HOST = socket.gethostname()


def seat() -> str:
    """This thread of this process: who may not re-take a lock it just handed off."""
    return f"{_HOST}:{os.getpid()}:{threading.get_ident()}"


class LockSteps:
    """The ``Lock``'s steps on one client; ``fair`` picks queue over hand-off."""

    def __init__(self, client: redis.Redis, keys: JobKeys, *, fair: bool) -> None:
        self.client = client
        self.keys = keys
        self.fair = fair
        self.protocol = ScriptProtocol(client)
        self._acquire: Script = client.register_script(FAIR_ACQUIRE if fair else LOCK_ACQUIRE)
        self._release: Script = client.register_script(LOCK_RELEASE)
        self._leave: Script = client.register_script(FAIR_LEAVE)
        self._handoff_ms = max(1, round(HANDOFF * 1000))
        extra = ("queue", "waiting", "tickets") if fair else ("handoff",)
        self._keys = [keys.lock, keys.state, *(keys.extra(k) for k in extra)]

    def acquire(
        self, who: Holder, ttl_ms: int, max_attempts: int, retention_ms: int, *, queue: bool
    ) -> Grant | Snapshot | float:
        """One try: a :class:`Grant`, what holds the lock, or seconds to look again in."""
        args: list[Any] = [who.owner, ttl_ms, max_attempts, retention_ms, self.keys.wake, who.run]
        args += [ttl_ms, "1" if queue else "0"] if self.fair else [seat()]
        reply = self._run(self._acquire, self._keys, args)
        kind = text(reply[0])
        if kind in ("handoff", "queued"):
            return max(0, int(reply[1])) / 1000.0
        return decode_acquire(self.keys, reply)

    def release(self, held: LockValue, retention_ms: int, listening: bool) -> Settle:
        """Release; ``listening``: this process's subscription, which is no waiter's."""
        if self.fair:
            return self.protocol.release(self.keys, held, retention_ms)
        new_state, message = settle_plan(held, "release", 0)
        args = [held.encode(), new_state.encode(), retention_ms, self.keys.wake, message,
                seat(), self._handoff_ms, 1 if listening else 0]
        return settle_result(int(self._run(self._release, self._keys[:3], args)), new_state)

    def leave(self, who: Holder) -> None:
        """Give up this acquisition's place in the queue (fair locks only)."""
        if self.fair:
            self._run(self._leave, self._keys[2:4], [who.run, self.keys.wake])

    def _run(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return script(keys=list(keys), args=list(args), client=self.client)
        except redis.ResponseError as exc:
            raise _foreign_on_wrongtype(self.keys, exc) from exc
