"""The stream steps of :class:`~lockworker.StreamSource`: fan-out readers' positions, and
consumer-group members' claims, hand-overs and clean-up. What they mean and when they
run: :mod:`lockworker.daemons.sources` and :mod:`lockworker.daemons.groupsource`.

Every key of one stream shares its hash tag (``{<stream>}``), so each script runs on a
cluster unchanged. One rule decides trimming in both modes, whichever step trims
(:data:`_KEEP_FROM`): an entry is removed only once every live fan-out reader resolved
it *and* every consumer group of the stream delivered and acknowledged it. Fan-out
readers and groups may therefore share a stream.

A fan-out reader that names its namespace (``Worker.serve`` tells it the worker's) is
counted through its namespace's **progress**: the entry id up to which every entry is
resolved in that namespace (job states are per namespace), the highest position any
of its readers saved. A reader behind it starts there (TOUCH returns it), and trimming
keeps what follows the progress of each namespace with a live reader, not what follows
each reader's own position: a dead or lagging reader holds back nothing its namespace
has resolved. A reader that names no namespace (release 0.3.0's, or a source read
without ``serve``) holds trimming back by its own position, as before.
"""

from __future__ import annotations

from typing import Any

import redis

from lockworker.model.keys import JobKeys, escape
from lockworker.protocol.decode import text
from lockworker.protocol.luacall import LuaScript

_IDS = """
local function split(id) return string.match(id, '^(%d+)-(%d+)$') end
local function less(a, b)
  local am, as = split(a)
  local bm, bs = split(b)
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
local function after(id)
  local ms, seq = split(id)
  return ms .. '-' .. (tonumber(seq) + 1)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# keep_from(entries, positions, readers, namespaces, progress): forget the fan-out
# readers whose registration ran out (and the progress of a namespace left with no
# live reader); the lowest entry id some live reader or some consumer group still
# needs (nil: nobody reads the stream). A namespace's readers need what follows its
# progress (a reader of it behind that skips to it); a reader of no namespace needs
# what follows its own position; a group needs its oldest unacknowledged entry and
# what follows its last delivered one.
_KEEP_FROM = _IDS + """
local function keep_from(entries, positions, readers, namespaces, progress)
  for _, o in ipairs(redis.call('ZRANGEBYSCORE', readers, '-inf', '(' .. now)) do
    redis.call('ZREM', readers, o)
    redis.call('HDEL', positions, o)
  end
  local low = nil
  local function lower(id) if low == nil or less(id, low) then low = id end end
  local held = {}
  for _, o in ipairs(redis.call('HKEYS', namespaces)) do
    if redis.call('ZSCORE', readers, o) then  -- else forgotten (by 0.3.0's trimming too)
      local ns, pos = redis.call('HGET', namespaces, o), redis.call('HGET', positions, o)
      pos = pos or '0-0'
      if held[ns] == nil or less(pos, held[ns]) then held[ns] = pos end
    else
      redis.call('HDEL', namespaces, o)
    end
  end
  local flat = redis.call('HGETALL', progress)
  for i = 1, #flat, 2 do
    if held[flat[i]] == nil then redis.call('HDEL', progress, flat[i])
    else held[flat[i]] = flat[i + 1] end
  end
  for _, pos in pairs(held) do lower(after(pos)) end
  for _, o in ipairs(redis.call('ZRANGE', readers, 0, -1)) do
    if redis.call('HEXISTS', namespaces, o) == 0 then
      lower(after(redis.call('HGET', positions, o) or '0-0'))
    end
  end
  if redis.call('TYPE', entries)['ok'] == 'stream' then
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', entries)) do
      local name, last = nil, '0-0'
      for i = 1, #g, 2 do
        if g[i] == 'name' then name = g[i + 1] end
        if g[i] == 'last-delivered-id' then last = g[i + 1] end
      end
      lower(after(last))
      local p = redis.call('XPENDING', entries, name)
      if tonumber(p[1]) > 0 then lower(p[2]) end
    end
  end
  return low
end
"""

# TOUCH (fan-out): register (or refresh) a reader, save its position, move its
# namespace's progress, forget readers gone too long, and trim what nobody needs.
# KEYS[1] entries   KEYS[2] positions   KEYS[3] readers   KEYS[4] namespaces
# KEYS[5] progress   KEYS[6] notdone (optional: 0.3.0 and earlier callers pass 5)
# ARGV[1] owner   ARGV[2] position to save ('' for none)   ARGV[3] reader ttl ms
# ARGV[4] start for a new reader ('0-0', '$' or an entry id)   ARGV[5] the reader's
# namespace ('' for none)   ARGV[6] the highest entry id up to ARGV[2] that this
# reader resolved otherwise than DONE ('' or absent for none): recorded in
# KEYS[6] (namespace -> the highest such id of any of its readers) in the same step
# that moves the position past it, so a backup that follows the progress knows which
# entries it covers were not DONE (:data:`FOLLOW`)
# returns {the owner's saved position, its namespace's progress ('' for none), how
# many ms of entries it was behind that progress (what it skips, of the entries still
# in the stream)}.
# Positions and progress only move forward. A reader of a namespace is never behind
# its progress once touched: everything up to it is resolved in the namespace. One
# that joins a namespace (new, forgotten, or of no namespace until now) starts at the
# progress; the first reader of a namespace starts the progress at its own position.
TOUCH = LuaScript(_KEEP_FROM + """
local owner, ns = ARGV[1], ARGV[5]
local pos = redis.call('HGET', KEYS[2], owner)
if not pos then
  pos = ARGV[4]
  if pos == '$' then
    local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
    if #last > 0 then pos = last[1][1] else pos = '0-0' end
  end
end
local progress, behind = '', 0
if ns ~= '' and KEYS[6] and ARGV[6] and ARGV[6] ~= '' then
  local nd = redis.call('HGET', KEYS[6], ns)
  if not nd or less(nd, ARGV[6]) then redis.call('HSET', KEYS[6], ns, ARGV[6]) end
end
if ns ~= '' then
  local g = redis.call('HGET', KEYS[5], ns)
  if redis.call('HGET', KEYS[4], owner) ~= ns then
    if g then pos = g
    elseif ARGV[2] ~= '' and less(pos, ARGV[2]) then pos = ARGV[2] end
    redis.call('HSET', KEYS[4], owner, ns)
  elseif ARGV[2] ~= '' and less(pos, ARGV[2]) then
    pos = ARGV[2]
  end
  if g and less(pos, g) then
    local gm, pm = split(g), split(pos)
    local head = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
    if #head == 0 then pm = gm elseif less(pos, head[1][1]) then pm = split(head[1][1]) end
    behind = math.max(0, tonumber(gm) - tonumber(pm))
    pos = g
  end
  redis.call('HSET', KEYS[5], ns, pos)
  progress = pos
else
  redis.call('HDEL', KEYS[4], owner)
  if ARGV[2] ~= '' and less(pos, ARGV[2]) then pos = ARGV[2] end
end
redis.call('HSET', KEYS[2], owner, pos)
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), owner)
local low = keep_from(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
if low then redis.call('XTRIM', KEYS[1], 'MINID', low) end
return {pos, progress, behind}
""")

# FOLLOW (fan-out, a backup following its namespace's progress): read it, and the
# highest entry id resolved otherwise than DONE in the namespace (TOUCH's ARGV[6]).
# KEYS[1] progress   KEYS[2] notdone   ARGV[1] namespace
# returns {progress or false, highest not-DONE entry id or false}
FOLLOW = LuaScript("""
return {redis.call('HGET', KEYS[1], ARGV[1]), redis.call('HGET', KEYS[2], ARGV[1])}
""")

NOT_DONE = "notdone"
"""The suffix of the hash ``namespace -> highest entry id resolved otherwise than DONE``
(given up, or skipped as a job that cannot run) by a reader of that namespace. Written by
TOUCH with the position that passes it, never deleted (one field per namespace); a
value too high only costs a backup looks it could have saved."""


def follow_keys(keys: JobKeys) -> list[str]:
    """The keys :data:`FOLLOW` takes: the stream's progress and not-DONE hashes."""
    return [keys.extra("progress"), keys.extra(NOT_DONE)]


def followed(reply: Any) -> tuple[str | None, str | None]:
    """FOLLOW's reply: the namespace's progress and its highest not-DONE entry id."""
    progress, not_done = reply
    return (text(progress) or None) if progress else None, (
        (text(not_done) or None) if not_done else None
    )


_MINE = """
local function mine(from)
  local ids = {}
  for i = from, #ARGV do
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
    if #p > 0 and p[1][2] == ARGV[2] then ids[#ids + 1] = ARGV[i] end
  end
  return ids
end
"""

# REFRESH (group): reset the idle time of the entries this member still owns, so that
# nobody claims them while it works on them (others' claims are left alone).
# KEYS[1] entries   ARGV[1] group   ARGV[2] consumer   ARGV[3...] entry ids
# returns how many were refreshed
REFRESH = LuaScript(_MINE + """
local ids = mine(3)
if #ids > 0 then
  ids[#ids + 1] = 'JUSTID'
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, unpack(ids))
  return #ids - 1
end
return 0
""")

# HAND_OVER (group): make the entries this member still owns claimable at once (their
# idle time set to the claim threshold) and tell the members listening.
# KEYS[1] entries   ARGV[1] group   ARGV[2] consumer   ARGV[3] idle ms   ARGV[4] channel
# ARGV[5...] entry ids      returns how many were handed over
HAND_OVER = LuaScript(_MINE + """
local ids = mine(5)
if #ids > 0 then
  local n = #ids
  ids[n + 1], ids[n + 2], ids[n + 3] = 'IDLE', ARGV[3], 'JUSTID'
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, unpack(ids))
  redis.call('PUBLISH', ARGV[4], 'claimable')
  return n
end
return 0
""")

# CLAIM (group): take over up to ARGV[4] entries other members left idle for ARGV[3] ms
# or more (a crashed member's, or handed over); a member never claims from itself.
# KEYS[1] entries   ARGV[1] group   ARGV[2] consumer   ARGV[3] min idle ms   ARGV[4] count
# returns the claimed entries, {{id, {field, value, ...}}, ...}
CLAIM = LuaScript("""
local found = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', ARGV[3], '-', '+',
                         4 * tonumber(ARGV[4]))
local ids = {}
for _, p in ipairs(found) do
  if p[2] ~= ARGV[2] and #ids < tonumber(ARGV[4]) then ids[#ids + 1] = p[1] end
end
if #ids == 0 then return {} end
return redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], unpack(ids))
""")

# TIDY (group): remove the group's consumers that own no entry and did nothing for
# ARGV[2] ms (members gone), then trim what nobody needs any more.
# KEYS[1] entries   KEYS[2] positions   KEYS[3] readers   KEYS[4] namespaces
# KEYS[5] progress   ARGV[1] group   ARGV[2] ms
# returns {consumers removed, entries trimmed}
TIDY = LuaScript(_KEEP_FROM + """
local removed, trimmed = 0, 0
if redis.call('TYPE', KEYS[1])['ok'] == 'stream' then
  local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
  if ok then
    for _, c in ipairs(consumers) do
      local name, pending, idle = nil, 0, 0
      for i = 1, #c, 2 do
        if c[i] == 'name' then name = c[i + 1] end
        if c[i] == 'pending' then pending = tonumber(c[i + 1]) end
        if c[i] == 'idle' then idle = tonumber(c[i + 1]) end
      end
      if pending == 0 and idle > tonumber(ARGV[2]) then
        redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
        removed = removed + 1
      end
    end
  end
end
local low = keep_from(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
if low then trimmed = redis.call('XTRIM', KEYS[1], 'MINID', low) end
return {removed, trimmed}
""")

# LEAVE (group): remove this member's consumer if it owns no entry any more.
# KEYS[1] entries   ARGV[1] group   ARGV[2] consumer     returns 1 if removed, else 0
LEAVE = LuaScript("""
if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return 0 end
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then return 0 end
for _, c in ipairs(consumers) do
  local name, pending = nil, 0
  for i = 1, #c, 2 do
    if c[i] == 'name' then name = c[i + 1] end
    if c[i] == 'pending' then pending = tonumber(c[i + 1]) end
  end
  if name == ARGV[2] then
    if pending > 0 then return 0 end
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
    return 1
  end
end
return 0
""")


FANOUT_KEYS = ("entries", "positions", "readers", "namespaces", "progress")
"""The keys TOUCH and TIDY take, in order (suffixes of the stream's keys): the
``namespaces`` hash (owner -> namespace of a reader that named one) and the
``progress`` hash (namespace -> entry id up to which all is resolved there) are new
since release 0.3.0, which never reads them."""


def fanout_keys(keys: JobKeys) -> list[str]:
    """The :data:`FANOUT_KEYS` of a stream, as TOUCH and TIDY take them."""
    return [keys.extra(suffix) for suffix in FANOUT_KEYS]


def touched(reply: Any) -> tuple[str, str | None, int]:
    """TOUCH's reply: the owner's saved position, its namespace's progress (None for a
    reader of no namespace), and how many ms of entries it was behind that progress."""
    position, progress, behind = reply
    return text(position), (text(progress) or None), int(behind)


def entry_order(entry_id: str) -> tuple[int, int]:
    """An entry id (``<ms>-<seq>``) as a key that sorts as the stream does."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def group_channel(keys: JobKeys, group: str) -> str:
    """The pub/sub channel on which members of ``group`` say an entry is claimable
    (one per group: the group's name, escaped, between a fixed prefix and suffix)."""
    return keys.extra(f"groups:{escape(group)}:wake")


def create_group(client: redis.Redis, entries: str, group: str, start: str) -> bool:
    """Create ``group`` on the stream (and the stream, if missing) reading from
    ``start``; False if it exists already."""
    try:
        client.execute_command(  # type: ignore[no-untyped-call]
            "XGROUP", "CREATE", entries, group, start, "MKSTREAM"
        )
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
        return False
    return True


def missing_group(exc: BaseException) -> bool:
    """True if ``exc`` says the stream or its group is gone (a flushed or restarted
    server): the group is then created again."""
    return isinstance(exc, redis.ResponseError) and "NOGROUP" in str(exc)


Entry = tuple[str, "dict[str, str] | None"]
"""An entry as read: its id and fields (None: the entry was deleted from the stream)."""


def read_reply(reply: Any) -> list[Entry]:
    """The entries of an XREADGROUP reply of one stream (RESP2 or RESP3 form)."""
    if isinstance(reply, dict):  # RESP3: {stream: [[entries]]}
        batches = [batch for value in reply.values() for batch in value]
    else:  # RESP2: [[stream, [entries]]]
        batches = [item[1] for item in reply or ()]
    return [(text(row[0]), _fields(row[1])) for batch in batches for row in batch]


def claimed(reply: Any) -> list[Entry]:
    """The entries a CLAIM reply lists (``{{id, {field, value, ...}}, ...}``)."""
    return [(text(row[0]), _fields(row[1])) for row in reply or ()]


def _fields(raw: Any) -> dict[str, str] | None:
    if raw is None:
        return None
    if isinstance(raw, dict):
        return {text(k): text(v) for k, v in raw.items()}
    items = list(raw)
    return {text(items[i]): text(items[i + 1]) for i in range(0, len(items) - 1, 2)}
