"""Reading a namespace's index (:mod:`lockworker.model.index`): counts and entries.

The index of a namespace is one sorted set per hash slot that holds any entry. One
script per server reads them all (on a cluster, one per master, over the slots it
serves): on a single server it is sent the namespace's key head and names the keys itself
(one call of a few bytes), and asks whether any of them exists at all (EXISTS
over thousands of keys per command: an empty namespace costs a handful of commands),
then skips the keys that
do not exist (most of them, when few jobs are in the listed states), counts each kind
with ZCOUNT, or lists a kind's newest entries with
ZREVRANGEBYSCORE ... LIMIT. The keys travel among the arguments, not as ``KEYS``: a
script without a ``#!`` line may use keys of every slot its node serves (the rule of
scripts before Redis 7, which Redis 7 and Valkey keep; :mod:`lockworker.protocol.many`
relies on the same). The cost is one call per master and a look per slot on the
server (16,384 EXISTS, a few milliseconds), whatever the number of finished jobs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lockworker.model import slots
from lockworker.model.index import Entry, Kind, all_index_keys, entry
from lockworker.model.keys import index_head
from lockworker.protocol.batch import is_cluster
from lockworker.protocol.decode import text
from lockworker.protocol.luacall import LuaScript

# The index keys a script reads: on a single server it is sent the namespace's key head
# only (ARGV[first] non-empty) and names the 16,384 keys itself, from LW_TAGS (the
# canonical tag of each slot, written into the script's source once: the server caches
# it), so a view's call is a few bytes, whatever the slots; on a cluster each master is
# sent its own slots' keys after an empty ARGV[first].
KEYS_OF = """
local function lw_keys(first)
  local head = ARGV[first]
  local keys = {}
  if head == '' then
    for i = first + 1, #ARGV do keys[#keys + 1] = ARGV[i] end
    return keys
  end
  for i, tag in ipairs(LW_TAGS) do keys[i] = head .. '{' .. tag .. '}' end
  return keys
end
"""

# Whether none of ``keys`` exists: EXISTS over thousands of keys at a time (one command
# each, below Lua's stack limit for ``unpack``), so a namespace with nothing listed
# costs a handful of commands, not one per slot. A cluster node refuses a command over
# keys of several slots, even in a script: then (an error, not a number) the caller
# looks key by key, as without this.
NONE = """
local function lw_none(keys)
  for i = 1, #keys, 4000 do
    local n = redis.pcall('EXISTS', unpack(keys, i, math.min(i + 3999, #keys)))
    if type(n) ~= 'number' or n > 0 then return false end
  end
  return true
end
"""

# COUNT: how many entries of each kind the index keys hold, and the server's clock.
# ARGV[1] since: entries of kinds pending, backoff and gave_up at or before this many
#         ms before now are left out (their job's state has expired: older than the
#         writers' retention); 0 counts them all
# ARGV[2] the namespace's key head, or '' and the index keys from ARGV[3] on
# returns {held, backoff, pending, gave_up, now ms}
COUNT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local since = tonumber(ARGV[1])
local out = {0, 0, 0, 0}
local keys = lw_keys(2)
if lw_none(keys) then out[5] = now return out end
for _, key in ipairs(keys) do
  if redis.call('EXISTS', key) == 1 then
    for kind = 1, 4 do
      local low = kind * SPAN
      if kind > 1 and since > 0 then low = '(' .. string.format('%.0f', low + now - since) end
      out[kind] = out[kind] + redis.call('ZCOUNT', key, low, (kind + 1) * SPAN - 1)
    end
  end
end
out[5] = now
return out
"""

# LIST: the newest entries of one kind (by their time), at most ARGV[2] per key (0: all)
# ARGV[1] kind   ARGV[2] limit   ARGV[3] the key head, or '' and the keys from ARGV[4] on
# returns a flat list: member, score, ...
LIST = """
local kind, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
local keys = lw_keys(3)
if lw_none(keys) then return out end
for _, key in ipairs(keys) do
  if redis.call('EXISTS', key) == 1 then
    local found
    if limit > 0 then
      found = redis.call('ZREVRANGEBYSCORE', key, (kind + 1) * SPAN - 1, kind * SPAN,
                         'WITHSCORES', 'LIMIT', 0, limit)
    else
      found = redis.call('ZREVRANGEBYSCORE', key, (kind + 1) * SPAN - 1, kind * SPAN,
                         'WITHSCORES')
    end
    for _, v in ipairs(found) do out[#out + 1] = v end
  end
end
return out
"""

_SPAN = str(10**13)


@functools.cache
def _scripts() -> tuple[LuaScript, LuaScript]:
    """COUNT and LIST with the slots' tags written in (built at the first view)."""
    tags = "local LW_TAGS = {" + ",".join(f"'{tag}'" for tag in slots.tags()) + "}\n"
    prologue = tags + KEYS_OF + NONE
    return (LuaScript(prologue + COUNT.replace("SPAN", _SPAN)),
            LuaScript(prologue + LIST.replace("SPAN", _SPAN)))


@dataclass(frozen=True, slots=True)
class Counts:
    """How many jobs of a namespace the index holds in each kind, and when (server ms)."""

    held: int
    backoff: int
    pending: int
    gave_up: int
    now_ms: int

    def of(self, kind: Kind) -> int:
        return (self.held, self.backoff, self.pending, self.gave_up)[kind.value - 1]


def calls(client: Any, namespace: str) -> list[tuple[Any, Sequence[str]]]:
    """What each server is sent to name the index keys of ``namespace``: on a single
    server (node None) the key head alone; on a cluster, per master, an empty head and
    the keys of the slots it serves."""
    if not is_cluster(client):
        return [(None, [index_head(namespace)])]
    groups: dict[str, tuple[Any, list[str]]] = {}
    for key in all_index_keys(namespace):
        node = client.get_node_from_key(key)
        groups.setdefault(node.name, (node, [""]))[1].append(key)
    return list(groups.values())


def count_args(keys: Sequence[str], since_ms: int) -> list[Any]:
    return [since_ms, *keys]


def list_args(keys: Sequence[str], kind: Kind, limit: int | None) -> list[Any]:
    return [kind.value, limit or 0, *keys]


def add_counts(replies: Sequence[Sequence[Any]]) -> Counts:
    """The sum of every server's COUNT reply (the clock of the last)."""
    total = [0, 0, 0, 0]
    now = 0
    for reply in replies:
        for i in range(4):
            total[i] += int(reply[i])
        now = max(now, int(reply[4]))
    held, backoff, pending, gave_up = total
    return Counts(held, backoff, pending, gave_up, now)


def entries(replies: Sequence[Sequence[Any]], limit: int | None) -> list[Entry]:
    """Every server's LIST reply as entries, newest first, at most ``limit``."""
    found: list[Entry] = []
    for reply in replies:
        for i in range(0, len(reply), 2):
            e = entry(text(reply[i]), float(reply[i + 1]))
            if e is not None:
                found.append(e)
    found.sort(key=lambda e: (-e.ms, e.job_id))
    return found if limit is None else found[:limit]


def _run(script: LuaScript, client: Any, node: Any, args: list[Any]) -> Any:
    return script(client, (), args, node)


def count(client: Any, namespace: str, since_ms: int = 0) -> Counts:
    """How many jobs of ``namespace`` are held, backing off, pending and given up, by
    the index (entries of a state older than ``since_ms`` left out)."""
    return add_counts([
        _run(_scripts()[0], client, node, count_args(keys, since_ms))
        for node, keys in calls(client, namespace)
    ])


def listed(client: Any, namespace: str, kind: Kind, limit: int | None = None) -> list[Entry]:
    """The newest ``limit`` (None: every) entries of ``kind`` in ``namespace``."""
    return entries([
        _run(_scripts()[1], client, node, list_args(keys, kind, limit))
        for node, keys in calls(client, namespace)
    ], limit)


async def acount(client: Any, namespace: str, since_ms: int = 0) -> Counts:
    """:func:`count` on a ``redis.asyncio`` client."""
    return add_counts([
        await _scripts()[0].acall(client, (), count_args(keys, since_ms), node)
        for node, keys in calls(client, namespace)
    ])


async def alisted(
    client: Any, namespace: str, kind: Kind, limit: int | None = None
) -> list[Entry]:
    """:func:`listed` on a ``redis.asyncio`` client."""
    return entries([
        await _scripts()[1].acall(client, (), list_args(keys, kind, limit), node)
        for node, keys in calls(client, namespace)
    ], limit)
