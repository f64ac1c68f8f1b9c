"""Delayed jobs of a stream: held in a sorted set until due, then added to the stream.

A job submitted with ``delay=`` or ``at=`` does not wait in the stream: an entry held
back there for hours would hold back its stream's progress and trimming, and let the
DONE records of the entries after it run out while they still count. It waits in the
stream's ``delayed`` sorted set instead (same hash tag as the stream, so the same
Cluster slot), scored by its due time in the server's epoch ms. Every reader of the
stream runs :data:`MOVE_DUE` before it reads: each due member is added to the stream
(``XADD``, the fields :func:`lockworker.submit` writes) and removed from the set in
one script, so it is added once however many readers run it; the reply bounds the
reader's blocking read by the time to the next due member.

A member is ``<id>:<length of the job id in bytes>:<job id><payload JSON>``: ``<id>``
(16 hex digits, random) makes each submission its own member, so the same job and
payload submitted twice wait twice, as two plain submits add two entries.
"""

from __future__ import annotations

import secrets

import redis

from lockworker.model.keys import JobKeys
from lockworker.protocol.decode import text
from lockworker.protocol.luacall import LuaScript

DELAYED = "delayed"
"""The suffix of a stream's sorted set of delayed jobs (``...:{<stream>}:delayed``)."""

MOVE_BATCH = 100
"""Due members one :data:`MOVE_DUE` adds to the stream at most: a large backlog come
due is moved over a few reads, never in one script that stalls the server."""

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# ADD_DELAYED: KEYS[1] entries   KEYS[2] delayed
# ARGV[1] ms   ARGV[2] '1': ARGV[1] is the due time in epoch ms, '0': ms from now
# ARGV[3] the member   ARGV[4] job id   ARGV[5] payload JSON
# returns {the entry id if it was due already (added to the stream at once) or '',
# the due time in epoch ms}
ADD_DELAYED = LuaScript(_NOW + """
local due = tonumber(ARGV[1])
if ARGV[2] == '0' then due = now + due end
if due <= now then
  return {redis.call('XADD', KEYS[1], '*', 'job_id', ARGV[4], 'payload', ARGV[5]), due}
end
redis.call('ZADD', KEYS[2], due, ARGV[3])
return {'', due}
""")

# MOVE_DUE: KEYS[1] entries   KEYS[2] delayed   ARGV[1] most members to move
# Adds each member due by the server's TIME to the stream, in due order, and removes
# it; a member that does not parse is removed. Nothing due: one ZRANGE of one member.
# returns {members moved, ms until the next member is due (0: more are due now, -1:
# none waits)}
MOVE_DUE = LuaScript(_NOW + """
local function next_in()
  local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if #head == 0 then return -1 end
  return math.max(0, tonumber(head[2]) - now)
end
local wait = next_in()
if wait ~= 0 then return {0, wait} end
local limit = tonumber(ARGV[1])
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
for _, m in ipairs(due) do
  local a = string.find(m, ':', 1, true)
  local b = a and string.find(m, ':', a + 1, true)
  local n = b and tonumber(string.sub(m, a + 1, b - 1))
  if n and n > 0 then
    redis.call('XADD', KEYS[1], '*', 'job_id', string.sub(m, b + 1, b + n),
               'payload', string.sub(m, b + n + 1))
  end
  redis.call('ZREM', KEYS[2], m)
end
if #due >= limit then return {#due, 0} end
return {#due, next_in()}
""")


def delayed_key(keys: JobKeys) -> str:
    """The sorted set of a stream's delayed jobs (``keys``: the stream's)."""
    return keys.extra(DELAYED)


def member(job_id: str, payload: str) -> tuple[str, str]:
    """A new delayed submission's ``(id, member)`` (see the module)."""
    ident = secrets.token_hex(8)
    return ident, f"{ident}:{len(job_id.encode('utf-8'))}:{job_id}{payload}"


def add_delayed(
    client: redis.Redis, keys: JobKeys, job_id: str, payload: str, when: tuple[int, bool]
) -> tuple[str, str | None, int]:
    """Submit a delayed job due ``when`` (:func:`lockworker.config.due`): ``(its id,
    the entry id if it was due already and went to the stream at once, else None, its
    due time in epoch ms)``."""
    ms, absolute = when
    ident, value = member(job_id, payload)
    entry, due = ADD_DELAYED(
        client, [keys.extra("entries"), delayed_key(keys)],
        [ms, "1" if absolute else "0", value, job_id, payload],
    )
    return ident, (text(entry) or None), int(due)


def move_due(client: redis.Redis, keys: JobKeys, batch: int = MOVE_BATCH) -> tuple[int, int | None]:
    """Run :data:`MOVE_DUE` for a stream: ``(members moved, ms until the next is due,
    None if none waits)``."""
    moved, wait = MOVE_DUE(client, [keys.extra("entries"), delayed_key(keys)], [batch])
    return int(moved), (None if int(wait) < 0 else int(wait))

