"""A fan-out reader's entries off the wire: XREAD's reply, and the script a backup reads
with while it trails its primary (:mod:`lockworker.serving.trail`).

A backup trailing a live primary does not read the stream's tail as entries come: it
asks :data:`TRAIL` for its namespace's progress (one call per poll, whatever the job
rate), and for the entries past that progress only when the progress stood still for
``backup_delay`` (then only those at least that old by the server's clock: a job the
primary takes at once is never read), or when a handover asked for them (then all).
"""

from __future__ import annotations

from typing import Any

from lockworker.protocol import text
from lockworker.protocol.luacall import LuaScript

Entries = list[tuple[str, dict[str, str]]]

# TRAIL (fan-out, a backup trailing its primary): its namespace's progress, and the
# entries after both it and the reader's last read entry (at most ARGV[3]; none for 0),
# those at least ARGV[4] ms old by the server's clock (-1: any age).
# KEYS[1] entries   KEYS[2] progress
# ARGV[1] namespace   ARGV[2] the reader's last read entry id   ARGV[3] count
# ARGV[4] age ms
# returns {progress or false, {{id, {field, value, ...}}, ...}}
TRAIL = LuaScript("""
local progress = redis.call('HGET', KEYS[2], ARGV[1])
local count, age = tonumber(ARGV[3]), tonumber(ARGV[4])
if count == 0 then return {progress, {}} end
local function order(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local from = ARGV[2]
if progress then
  local fm, fs = order(from)
  local pm, ps = order(progress)
  if pm > fm or (pm == fm and ps > fs) then from = progress end
end
local upto = '+'
if age >= 0 then
  local now = redis.call('TIME')
  local ms = math.floor(tonumber(now[1]) * 1000 + tonumber(now[2]) / 1000) - age
  if ms < 0 then return {progress, {}} end
  upto = tostring(ms)
end
return {progress, redis.call('XRANGE', KEYS[1], '(' .. from, upto, 'COUNT', count)}
""")


def read_entries(reply: Any) -> Entries:
    """The (id, fields) pairs of an XREAD reply of one stream (RESP2 or RESP3 form)."""
    if isinstance(reply, dict):  # RESP3: {stream: [[entries]]}
        batches = [batch for value in reply.values() for batch in value]
    else:  # RESP2: [[stream, [entries]]]
        batches = [item[1] for item in reply or ()]
    return [
        (text(entry_id), {text(k): text(v) for k, v in (fields or {}).items()})
        for batch in batches
        for entry_id, fields in batch
    ]


def trailed(reply: Any) -> tuple[str | None, Entries]:
    """TRAIL's reply: the namespace's progress (None: none yet) and the entries."""
    progress, raw = reply
    entries: Entries = []
    for entry_id, flat in raw or ():
        values = [text(v) for v in flat or ()]
        entries.append((text(entry_id), dict(zip(values[::2], values[1::2], strict=True))))
    return (text(progress) or None) if progress else None, entries
