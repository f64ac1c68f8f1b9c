"""The schedule steps: deciding a tick once for every process, and its progress.

Each schedule has one hash on the server (:func:`schedule_key`, one hash tag, so one
Cluster slot), the only record of what was decided about its ticks:

    last        the latest tick decided (epoch seconds): a tick at or before it that
                has no decision was dropped by a catch-up policy, and stays dropped
    resolved    the progress: every tick at or before it is settled (its job resolved,
                skipped or dropped); only ever grows
    r:<tick>    a tick admitted to run whose job is not resolved yet (started or not)
    w:<tick>    a tick waiting for the running one to end (``overlap="wait"``)
    s:<tick>    a tick skipped (``overlap="skip"``), kept until the progress passes it
    ran skipped caught_up dropped    counts (``dropped``: ticks a catch-up policy left
                out, counted by the process that decided the tick after them)
    catching    the latest tick that was already due when a missed tick was admitted
                by ``catch_up="all"``: ticks up to it are missed ones, run in turn,
                never skipped behind the catch-up tick that still runs
    last_ran    the latest tick whose job was resolved
    definition  what the schedule was when a process last began serving it (JSON:
                ``{"every": 300}`` or ``{"cron": "30 2 * * *", "tz": "UTC"}``), so
                ``lockworker status`` can tell its next tick; no script reads it

ADMIT decides one tick, the same way for every process that asks (the first to ask
decides, the others read the decision); RESOLVE settles a tick whose job is resolved.
Both move the progress to the first tick still open, minus one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lockworker.model.keys import JobKeys, Space, parse_state_key, state_pattern
from lockworker.protocol.luacall import LuaScript

_ADVANCE = """
local key = KEYS[1]
local function open_ticks()
  local runs, waits = {}, {}
  for _, f in ipairs(redis.call('HKEYS', key)) do
    local kind, tick = string.match(f, '^([rw]):(%d+)$')
    if kind == 'r' then table.insert(runs, tonumber(tick)) end
    if kind == 'w' then table.insert(waits, tonumber(tick)) end
  end
  return runs, waits
end
local function number(field)
  return tonumber(redis.call('HGET', key, field) or '-1')
end
local function advance()
  local runs, waits = open_ticks()
  local low = nil
  for _, t in ipairs(runs) do if low == nil or t < low then low = t end end
  for _, t in ipairs(waits) do if low == nil or t < low then low = t end end
  local progress = number('last')
  if low ~= nil then progress = low - 1 end
  if progress > number('resolved') then
    redis.call('HSET', key, 'resolved', progress)
    for _, f in ipairs(redis.call('HKEYS', key)) do
      local tick = string.match(f, '^s:(%d+)$')
      if tick and tonumber(tick) <= progress then redis.call('HDEL', key, f) end
    end
  end
end
local function promote()
  local runs, waits = open_ticks()
  if #runs == 0 and #waits > 0 then
    redis.call('HDEL', key, 'w:' .. waits[1])
    redis.call('HSET', key, 'r:' .. waits[1], 1)
  end
end
"""

# ADMIT: decide tick ARGV[1] (or read its decision).
# KEYS[1] the schedule's hash
# ARGV[1] tick (epoch s)   ARGV[2] overlap: skip, allow or wait
# ARGV[3] 1 if the tick is a missed one that catch-up runs (counted if it decides)
# ARGV[4] with ARGV[3] 1: the latest tick due then (recorded as 'catching' if it decides)
# ARGV[5] how many ticks lie between the latest decided one, as the caller read it
# (ARGV[6], '' for none), and this one: dropped by the catch-up policy once it decides,
# counted in 'dropped' (unless another process decided a tick since that read: the
# caller's count is then not about the ticks left out, and nothing is counted)
# returns {verdict, decided, dropped}: the verdict 'run', 'wait', 'skip' or 'past'
# (settled already, or dropped), 1 if this call decided it, 0 if it read an earlier
# decision (so each decision is counted once, by the process that made it), and the
# ticks this call counted dropped
ADMIT = LuaScript(_ADVANCE + """
local tick = tonumber(ARGV[1])
if tick <= number('resolved') then return {'past', 0, 0} end
promote()
if redis.call('HEXISTS', key, 'r:' .. tick) == 1 then return {'run', 0, 0} end
if redis.call('HEXISTS', key, 'w:' .. tick) == 1 then return {'wait', 0, 0} end
if redis.call('HEXISTS', key, 's:' .. tick) == 1 then return {'skip', 0, 0} end
if tick <= number('last') then return {'past', 0, 0} end
local dropped = tonumber(ARGV[5] or '0') or 0
if dropped > 0 and number('last') == (tonumber(ARGV[6] or '') or -1) then
  redis.call('HINCRBY', key, 'dropped', dropped)
else
  dropped = 0
end
redis.call('HSET', key, 'last', tick)
if ARGV[3] == '1' then
  redis.call('HINCRBY', key, 'caught_up', 1)
  if tonumber(ARGV[4] or '-1') > number('catching') then
    redis.call('HSET', key, 'catching', ARGV[4])
  end
end
local runs, waits = open_ticks()
local verdict = 'run'
if #runs > 0 and ARGV[2] == 'skip' then verdict = 'skip' end
if #runs > 0 and ARGV[2] == 'wait' then
  verdict = 'wait'
  if #waits > 0 then verdict = 'skip' end
end
if verdict == 'run' then redis.call('HSET', key, 'r:' .. tick, 1) end
if verdict == 'wait' then redis.call('HSET', key, 'w:' .. tick, 1) end
if verdict == 'skip' then
  redis.call('HSET', key, 's:' .. tick, 1)
  redis.call('HINCRBY', key, 'skipped', 1)
end
advance()
return {verdict, 1, dropped}
""")

# RESOLVE: the job of tick ARGV[1] is resolved (DONE, done elsewhere, given up).
# KEYS[1] the schedule's hash   ARGV[1] tick (epoch s)
# returns 1 if this call settled it, 0 if it was settled already
RESOLVE = LuaScript(_ADVANCE + """
local tick = tonumber(ARGV[1])
local settled = redis.call('HDEL', key, 'r:' .. tick)
if settled == 1 then
  redis.call('HINCRBY', key, 'ran', 1)
  if tick > number('last_ran') then redis.call('HSET', key, 'last_ran', tick) end
end
promote()
advance()
return settled
""")


def schedule_key(namespace: str, name: str) -> str:
    """The hash of schedule ``name`` in ``namespace`` (see the module docstring)."""
    return JobKeys.of(namespace, name, Space.SCHEDULE).extra("ticks")


def schedule_pattern(namespace: str | None = None) -> str:
    """A SCAN pattern matching every schedule's hash (of ``namespace``, if given)."""
    return state_pattern(Space.SCHEDULE, namespace)[: -len("state")] + "ticks"


def parse_schedule_key(key: str) -> tuple[str, str] | None:
    """``(namespace, name)`` of a schedule's hash, or None if ``key`` is not one."""
    if not key.endswith(":ticks"):
        return None
    return parse_state_key(key[: -len("ticks")] + "state", Space.SCHEDULE)


@dataclass(frozen=True)
class Progress:
    """A schedule's hash decoded (ticks in epoch seconds; see the module docstring)."""

    last: int | None = None
    resolved: int | None = None
    last_ran: int | None = None
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    skipped_recent: list[int] = field(default_factory=list)
    ran: int = 0
    skipped: int = 0
    caught_up: int = 0
    dropped: int = 0
    definition: dict[str, Any] | None = None
    """None when no process of this release recorded it, or it does not read as one."""

    @property
    def outcome(self) -> str | None:
        """What became of the latest tick decided: ``running`` (admitted, its job not
        resolved yet), ``waiting`` (for the running one), ``ran`` (its job resolved:
        done, or given up after its attempts), ``skipped``; None before any."""
        if self.last is None:
            return None
        if self.last in self.running:
            return "running"
        if self.last in self.waiting:
            return "waiting"
        if self.last == self.last_ran:
            return "ran"
        return "skipped"


def decode_progress(fields: Mapping[str, str]) -> Progress:
    """A schedule's hash (fields and values as text) as :class:`Progress`; a field
    that does not read as lockworker writes it is left out."""

    def number(name: str) -> int | None:
        value = fields.get(name, "")
        return int(value) if value.lstrip("-").isdigit() and int(value) >= 0 else None

    def ticks(kind: str) -> list[int]:
        return sorted(int(f[2:]) for f in fields if f.startswith(kind) and f[2:].isdigit())

    try:
        found = json.loads(fields.get("definition", "null"))
    except ValueError:
        found = None
    return Progress(
        last=number("last"), resolved=number("resolved"), last_ran=number("last_ran"),
        running=ticks("r:"), waiting=ticks("w:"), skipped_recent=ticks("s:"),
        ran=number("ran") or 0, skipped=number("skipped") or 0,
        caught_up=number("caught_up") or 0, dropped=number("dropped") or 0,
        definition=found if isinstance(found, dict) else None,
    )
