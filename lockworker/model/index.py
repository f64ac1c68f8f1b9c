"""A namespace's index of the jobs an operator lists: held, backing off, pending, given up.

Finished jobs are the many; the views list the few that are not finished. So every step
that moves a job into or out of those states (a grant, a renewal, a settle, a give-up,
a reset) writes the job's entry in the same atomic step (script or transaction), and
the views read the index instead of walking every job key.

Layout: one sorted set per namespace and Cluster hash slot,
``lw:index:<namespace>:{<slot's canonical tag>}`` (:mod:`lockworker.model.slots`), so
the entry of a job lives in its own slot and a job's step writes it. Its member is the
job id (escaped as in the job's keys); its score is ``kind * 10**13 + ms``, so one
member per job holds its one state, a ZADD moves it, and a range of scores is one
kind, ordered by time:

=========  ====  ==========================================================
kind       code  ms
=========  ====  ==========================================================
held       1     the grant, or the lease's last renewal (server clock)
backoff    2     when the next attempt is due (a failure's retry schedule)
pending    3     the failure, release or reset that left it free
gave_up    4     when it was given up
=========  ====  ==========================================================

A DONE removes the entry. Entries follow the job's state key, which expires after
``retention`` from its last write: each write of a kind other than held (a failure, a
give-up, a reset: never a clean job's step) trims that kind's entries and the held ones
older than ``retention`` (ZREMRANGEBYSCORE, amortised; a held entry is renewed with its
lease, so an old one is a holder that died and whose job nobody took since), and the
views count only entries younger than that. A clean job costs one ZADD at its grant
and one ZREM at its DONE. A held entry whose lease ran out (its holder died) stays held until
the next step on the job; the views tell it by the lease itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from lockworker.model.keys import all_index_keys, index_key, unescape

__all__ = ["SPAN", "STATES", "Entry", "Kind", "all_index_keys", "entry", "index_key", "score"]

SPAN = 10**13
"""The score span of one kind: milliseconds since the epoch stay below it until 2286."""


class Kind(enum.IntEnum):
    """What an index entry says of its job (its score's leading digit)."""

    HELD = 1
    BACKOFF = 2
    PENDING = 3
    GAVE_UP = 4

    @property
    def low(self) -> int:
        return self.value * SPAN

    @property
    def high(self) -> int:
        return (self.value + 1) * SPAN - 1


STATES = {
    "held": (Kind.HELD,),
    "pending": (Kind.PENDING, Kind.BACKOFF),
    "gave_up": (Kind.GAVE_UP,),
}
"""The kinds each listed job state is found in (a held entry whose lease ran out reads
as pending once its keys are read; a pending job whose retry is due later is BACKOFF).
``done`` has none: a DONE ends a job's entry."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One index entry: a job, its kind, and its time (ms, server clock)."""

    job_id: str
    kind: Kind
    ms: int


def entry(member: str, score: float) -> Entry | None:
    """The entry of a member and score as the index holds them (None if the score is
    not one of a kind's)."""
    value = int(score)
    code, ms = divmod(value, SPAN)
    try:
        kind = Kind(code)
    except ValueError:
        return None
    return Entry(unescape(member), kind, ms)


def score(kind: Kind, ms: int) -> int:
    return kind.value * SPAN + ms


# The Lua side, shared by the job steps' scripts (lockworker.protocol.lua). KEYS[4] is
# the namespace's index key of the job's slot; a primitive's steps pass their lock key
# there instead, and write no entry. The member is the escaped job id, read from the
# state key (KEYS[2]: ``...:{<id>}:state``, the id holds no brace).
LUA = """
local function lw_index(kind, ms, retention)
  if KEYS[4] == nil or KEYS[4] == KEYS[1] then return end
  local id = string.match(KEYS[2], '{([^}]*)}:state$')
  if kind == 0 then
    redis.call('ZREM', KEYS[4], id)
    return
  end
  local base = kind * SPAN
  redis.call('ZADD', KEYS[4], string.format('%.0f', base + ms), id)
  if retention and kind > 1 then
    local cut = ms - tonumber(retention)
    redis.call('ZREMRANGEBYSCORE', KEYS[4], string.format('%.0f', base),
               '(' .. string.format('%.0f', base + cut))
    redis.call('ZREMRANGEBYSCORE', KEYS[4], SPAN, '(' .. string.format('%.0f', SPAN + cut))
  end
end
""".replace("SPAN", str(SPAN))
