"""Indexing the jobs written before the index existed (:mod:`lockworker.model.index`).

A job written by release 0.3.0, or by this release before the index existed, has no
entry: the steps write one only when they move the job. ``lockworker index``
(:mod:`lockworker.cli.reindex`) finds such jobs by their state keys and runs
:data:`INDEX` on each: one script in the job's slot, with the keys of every job step
(:func:`lockworker.protocol.script.script_keys`), that reads the job's state and lease
and writes the entry the steps leave for a job in that state:

- a live lease (a state pending, or none): held, at now (a grant's or a renewal's
  time is not kept; the next renewal moves it anyway);
- pending with a due time (a failure's retry schedule): backing off, at the due time,
  as the failure's settle wrote it, whether or not that time has passed;
- pending and free: pending, at when the state was written, which is ``retention``
  minus its time to live (every writer sets the state's time to live to the
  retention), or now if that cannot be told (no time to live, or a longer one);
- given up: the same, given up;
- done, or no state: no entry (ZREM);
- a value lockworker did not write: nothing written, reported (ForeignValueError).

Why it is safe while workers serve: each job step writes the job's state and its
entry in one atomic script or transaction, and :data:`INDEX` reads the state and
writes the entry in one atomic script too, on the same keys. Whatever the order, the
last of them to run wrote the entry from the state as it stood then, which is the
state until the next step, which writes its own entry again. So the entry is right
after either order, and running the command twice writes the same kinds again. What
it cannot correct is a process of 0.3.0 still serving: its steps change states and
write no entry, so the command runs once the last process of 0.3.0 has stopped
(docs/deployment.md).

Many jobs go in one command (:mod:`lockworker.protocol.batch`: one looped command per
server, one per master on a cluster), each job its own atomic step.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from lockworker.errors import ForeignValueError
from lockworker.model.codec import LUA_PROLOGUE
from lockworker.model.index import LUA as INDEX_HELPER
from lockworker.model.index import Kind
from lockworker.model.keys import JobKeys, parse_state_key, state_pattern
from lockworker.protocol import batch
from lockworker.protocol.decode import text
from lockworker.protocol.luacall import LuaScript
from lockworker.protocol.script import Step

SCAN_COUNT = 1000
"""Keys a SCAN call looks at."""

# INDEX: write a job's index entry from its state and lease, read at one instant.
# KEYS[1] lock   KEYS[2] state   KEYS[3] history (not read)   KEYS[4] index
# ARGV[1] retention ms: the time to live the writers give a state
# returns {kind, ms}   kind 0: no entry (done, or no state); 1 held, 2 backoff,
#                      3 pending, 4 gave_up, at ms (server clock)
#         {'foreign', key, value}   a key holds a value we did not write (nothing written)
INDEX = LUA_PROLOGUE + INDEX_HELPER + """
local cur = redis.call('GET', KEYS[1])
local raw = redis.call('GET', KEYS[2])
local l, st = nil, nil
if cur then
  l = lw_lock(cur)
  if not l then return {'foreign', KEYS[1], cur} end
end
if raw then
  st = lw_state(raw)
  if not st then return {'foreign', KEYS[2], raw} end
end
local now = lw_now_ms()
local retention = tonumber(ARGV[1])
local function written()
  local left = redis.call('PTTL', KEYS[2])
  if left < 0 or left > retention then return now end
  return now - (retention - left)
end
local kind, ms = 0, 0
if st and st.status == 'done' then
  kind = 0
elseif st and st.status == 'gave_up' then
  kind, ms = 4, written()
elseif l then
  kind, ms = 1, now
elseif st and st.due then
  kind, ms = 2, tonumber(st.due)
elseif st then
  kind, ms = 3, written()
end
if kind == 0 then lw_index(0) else lw_index(kind, ms, ARGV[1]) end
return {kind, string.format('%.0f', ms)}
"""

INDEX_SCRIPT = _INDEX = LuaScript(INDEX)


@dataclass(frozen=True, slots=True)
class Indexed:
    """What :data:`INDEX` wrote for a job: its kind at ``ms``, or no entry (None)."""

    job_id: str
    kind: Kind | None
    ms: int


def indexed_reply(keys: JobKeys, reply: Any) -> Indexed:
    """The INDEX script's reply (ForeignValueError raised for a foreign value)."""
    if text(reply[0]) == "foreign":
        raise ForeignValueError(text(reply[1]), text(reply[2]))
    code = int(reply[0])
    return Indexed(keys.job_id, Kind(code) if code else None, int(reply[1]))


def index_step(keys: JobKeys, retention_ms: int) -> Step[Indexed]:
    """The step that indexes the job of ``keys`` (its state's time to live was
    ``retention_ms`` when written)."""
    return Step(_INDEX, keys, (retention_ms,), partial(indexed_reply, keys))


def index_jobs(
    client: Any, jobs: Sequence[JobKeys], retention_ms: int
) -> list[Indexed | Exception]:
    """Index ``jobs``, :data:`lockworker.protocol.batch.MAX_BATCH` at a time; per job,
    what was written or the exception it stands for (a foreign value). A connection
    error is raised: every step is safe to send again."""
    out: list[Indexed | Exception] = []
    for start in range(0, len(jobs), batch.MAX_BATCH):
        steps = [index_step(k, retention_ms) for k in jobs[start:start + batch.MAX_BATCH]]
        out.extend(batch.send(client, steps))
    return out


def masters(client: Any) -> list[Any]:
    """A client per master behind ``client`` (a cluster's primaries; else itself)."""
    primaries = getattr(client, "get_primaries", None)
    if primaries is None:
        return [client]
    return [client.get_redis_connection(node) for node in primaries()]


def scan_jobs(client: Any, namespace: str | None = None) -> Iterator[JobKeys]:
    """The keys of every job that has a state (of ``namespace``, or of every one), on
    every master. SCAN may return a key twice (the table resized meanwhile): indexing a
    job twice writes the same entry, so no set of every key seen is kept (millions of
    jobs); a count may include that job twice."""
    pattern = state_pattern(namespace=namespace)
    for node in masters(client):
        for raw in node.scan_iter(match=pattern, count=SCAN_COUNT):
            keys = job_of(raw)
            if keys is not None:
                yield keys


def job_of(raw: Any) -> JobKeys | None:
    """The keys of the job whose state key SCAN returned (None: not a job's)."""
    found = parse_state_key(text(raw))
    return None if found is None else JobKeys(*found)
