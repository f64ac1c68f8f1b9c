"""What ``lockworker status`` reads (:mod:`.statusmain` prints it): jobs and leaders.

Jobs are found through each namespace's index (:mod:`.indexed`; DONE ones, with
``--state done``, by SCAN over their state keys, on a cluster on every master), read in
batches, each batch in one Lua script so a row is one consistent moment (on a cluster,
a batch holds the jobs of one hash slot).
A job's age is how long ago its state key was last written: the workers write it with a
time to live of ``retention`` (default one day; a DONE one, ``done_retention``, one
hour), so age = that - time left. Pass the workers' ``--retention`` and
``--done-retention`` if they use others. Leaders are read with
:meth:`lockworker.Leader.current`, their age from the term's recorded start. The
workers alive in each namespace (primaries and backups, as they registered:
:mod:`lockworker.model.presence`) are read from the namespace's presence set, and the
fan-out readers of each stream from the stream's keys (:mod:`lockworker.cli.readers`),
and each schedule from its hash (:mod:`lockworker.cli.schedules`); what the server
holds, by namespace and kind, from a bounded sample (:mod:`.footprint`).
"""

from __future__ import annotations

import argparse
import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from lockworker.cli import indexed, registered, schedules
from lockworker.cli.cells import aligned, duration, natural, printable
from lockworker.cli.history import cut, last_error
from lockworker.cli.kept import Kept, kept
from lockworker.clock import wall_time
from lockworker.daemons.leader import NAMESPACE as LEADERS
from lockworker.daemons.leader import Leader
from lockworker.errors import ForeignValueError
from lockworker.model.codec import decode_lock, decode_state
from lockworker.model.keys import JobKeys, Space
from lockworker.protocol import ScriptProtocol
from lockworker.protocol.decode import server_ms, snapshot_of

BATCH = 200
"""Jobs read by one script: a consistent moment, and a short pause of the server."""
PIPELINED = 25
"""Batches sent in one round trip on a single server (5,000 jobs' replies at once)."""


@dataclass(frozen=True)
class Row:
    """One job or leader as the table shows it (times in seconds)."""

    kind: str
    namespace: str
    id: str
    state: str
    holder: str | None
    attempt: int | None
    token: int
    lease_left: float | None
    age: float | None
    next_attempt_in: float | None = None
    """A pending job whose failed attempt set its next one ahead: seconds until due."""
    last_error: str | None = None
    """The newest ended attempt's error (``Type: message``), or ``lease lost``."""


# READ_JOBS: state, lock, both TTLs and the last two attempt records of every job in
# the batch, at one moment.
# KEYS: state1, lock1, history1, state2, ...   returns s1, l1, lock pttl1, state pttl1,
# records1, ..., and last the server's TIME (for the jobs' due times).
# A key of another type reads as a value no job has, so it shows as foreign (a history
# of another type as no records).
READ_JOBS = """
local out = {}
local function read(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then return '<a value of another type>' end
  return v
end
for i = 1, #KEYS, 3 do
  out[#out + 1] = read(KEYS[i])
  out[#out + 1] = read(KEYS[i + 1])
  out[#out + 1] = redis.call('PTTL', KEYS[i + 1])
  out[#out + 1] = redis.call('PTTL', KEYS[i])
  local records = redis.pcall('LRANGE', KEYS[i + 2], -2, -1)
  if type(records) == 'table' and records.err then records = {} end
  out[#out + 1] = records
end
out[#out + 1] = redis.call('TIME')
return out
"""


def job_rows(
    client: redis.Redis, keys: list[tuple[str, str, str]], retention: Kept
) -> list[Row]:
    """Read ``keys`` (state key, namespace, id) in batches; one row each."""
    rows: list[Row] = []
    for batch, replies in _read(client, _batches(client, keys)):
        now_ms = server_ms(replies[-1])
        for i, (_key, namespace, job_id) in enumerate(batch):
            rows.append(
                _job_row(namespace, job_id, replies[5 * i : 5 * i + 5], retention, now_ms)
            )
    if isinstance(client, RedisCluster):  # read by slot: back in the order of ``keys``
        order = {(k[1], k[2]): i for i, k in enumerate(keys)}
        rows.sort(key=lambda row: order[(row.namespace, row.id)])
    return rows


def _read(
    client: redis.Redis, batches: Iterator[list[tuple[str, str, str]]]
) -> Iterator[tuple[list[tuple[str, str, str]], Any]]:
    """Each batch with its script's reply (one script per batch: one consistent
    moment). On a single server :data:`PIPELINED` batches go in one round trip (a
    pipeline, not a transaction: each script is atomic on its own); a cluster's batches
    go to their slots' nodes one by one."""
    read = client.register_script(READ_JOBS)

    def names(batch: list[tuple[str, str, str]]) -> list[str]:
        found: list[str] = []
        for state_key, _namespace, _job_id in batch:
            base = state_key[: -len("state")]
            found += [state_key, base + "lock", base + "history"]
        return found

    if isinstance(client, RedisCluster):
        for batch in batches:
            yield batch, read(keys=names(batch), client=client)
        return
    while chunk := list(itertools.islice(batches, PIPELINED)):
        pipe = client.pipeline(transaction=False)
        for batch in chunk:
            read(keys=names(batch), client=pipe)
        yield from zip(chunk, pipe.execute(), strict=True)


def _batches(
    client: redis.Redis, keys: list[tuple[str, str, str]]
) -> Iterator[list[tuple[str, str, str]]]:
    """``keys`` in batches of at most :data:`BATCH` that one script may read: any on a
    single server; on a cluster, only keys of one hash slot (a job's two keys share
    one, ``{<job id>}``), so each batch goes to the node that owns it."""
    if not isinstance(client, RedisCluster):
        for start in range(0, len(keys), BATCH):
            yield keys[start : start + BATCH]
        return
    by_slot: dict[int, list[tuple[str, str, str]]] = {}
    for item in keys:
        by_slot.setdefault(key_slot(item[0].encode()), []).append(item)
    for group in by_slot.values():
        for start in range(0, len(group), BATCH):
            yield group[start : start + BATCH]


def job_age(state_ttl: object, retention: float) -> float | None:
    """Seconds since the state key was written with a time to live of ``retention``,
    from its PTTL ``state_ttl``; None when that cannot be known: the key has no time to
    live, or more than ``retention`` left (the workers keep states longer than
    ``--retention`` says, so any age computed would be too small)."""
    if not isinstance(state_ttl, int) or state_ttl < 0 or state_ttl > retention * 1000:
        return None
    return round(retention - state_ttl / 1000.0, 3)


def _job_row(
    namespace: str, job_id: str, replies: list[Any], retention: Kept, now_ms: int
) -> Row:
    raw_state, raw_lock, lock_ttl, state_ttl, records = replies
    age = job_age(state_ttl, retention.retention)
    if isinstance(raw_state, Exception) or isinstance(raw_lock, Exception):
        return Row("job", namespace, job_id, "foreign", None, None, 0, None, age)
    decoded = None if raw_state is None else decode_state(raw_state)
    lock = None if raw_lock is None else decode_lock(raw_lock)
    if (decoded is None and raw_state is not None) or (lock is None and raw_lock is not None):
        # A value lockworker did not write (READ_JOBS's stand-in for another type too).
        return Row("job", namespace, job_id, "foreign", None, None, 0, None, age)
    pttl = int(lock_ttl) if isinstance(lock_ttl, int) and lock_ttl >= 0 else None
    seen = snapshot_of(decoded, lock, pttl, now_ms)
    age = job_age(state_ttl, retention.of(seen.status.value))
    state = "held" if seen.holder is not None else seen.status.value
    holder = seen.holder if seen.holder is not None else (seen.owner or None)
    lease = seen.pttl_ms / 1000.0 if seen.pttl_ms is not None else None
    due = seen.due_ms / 1000.0 if seen.due_ms is not None else None
    error = last_error(records, seen.token if seen.holder is not None else None)
    return Row(
        "job", namespace, job_id, state, holder, seen.attempt, seen.token, lease, age, due,
        error,
    )


def leader_rows(client: redis.Redis) -> list[Row]:
    """One row per leader name that campaigned (:func:`lockworker.cli.registered.leaders`)."""
    rows = []
    now = wall_time()
    for name in sorted(set(registered.leaders(client)), key=natural):
        try:
            info = Leader.current(client, name)
        except ForeignValueError:
            rows.append(Row("leader", LEADERS, name, "foreign", None, None, 0, None, None))
            continue
        if info is None:
            raw_state = client.get(JobKeys(LEADERS, name, Space.LEADER).state)
            decoded = decode_state(raw_state) if raw_state is not None else None
            token = decoded.token if decoded is not None else 0
            rows.append(Row("leader", LEADERS, name, "vacant", None, None, token, None, None))
            continue
        age = round(max(0.0, now - info.since), 3) if info.since is not None else None
        rows.append(
            Row("leader", LEADERS, name, "leading", info.holder, None, info.token,
                info.lease_left, age)
        )
    return sorted(rows, key=lambda r: natural(r.id))


LISTED = ("held", "pending", "gave_up")
"""The states the table lists unless ``--state`` asks for another (DONE jobs are
counted, not listed: :mod:`lockworker.cli.indexed`)."""


def read_rows(
    client: redis.Redis, keys: list[tuple[str, str, str]], retention: Kept
) -> list[Row]:
    """The jobs of ``keys`` as they are now, sorted naturally; a job whose keys are
    gone since the index listed it gives no row."""
    space = functools.cache(natural)  # a few namespaces, many ids
    keys = sorted(keys, key=lambda k: (space(k[1]), natural(k[2])))
    return [r for r in job_rows(client, keys, retention)
            if r.token or r.holder or r.state == "foreign"]


def collect(
    client: redis.Redis, namespace: str | None, retention: Kept, limit: int | None
) -> list[Row]:
    """Leaders (unless another namespace than theirs was asked for), then the newest
    ``limit`` jobs of each listed state of each namespace, sorted naturally."""
    rows: list[Row] = []
    if namespace in (None, LEADERS):
        rows.extend(leader_rows(client))
    spaces = indexed.namespaces(client, namespace)
    rows.extend(read_rows(client, indexed.listed(client, spaces, LISTED, limit), retention))
    return rows


HEADER = ("KIND", "NAMESPACE", "ID", "STATE", "HOLDER", "ATTEMPT", "TOKEN", "LEASE LEFT", "AGE")


def table(rows: list[Row], *, errors: bool = False) -> str:
    """Aligned columns with a header (and, with ``errors``, each job's last error); a
    line saying so when there is nothing."""
    if not rows:
        return "no jobs found" if errors else "no jobs or leaders found"
    header = (*HEADER, "LAST ERROR") if errors else HEADER
    cells = [header] + [
        (
            r.kind, printable(r.namespace), printable(r.id),
            r.state if r.next_attempt_in is None
            else f"{r.state}, next attempt in {duration(r.next_attempt_in)}",
            printable(r.holder or "-"),
            "-" if r.attempt is None else str(r.attempt), str(r.token),
            duration(r.lease_left), duration(r.age),
        ) + ((printable(cut(r.last_error or "-")),) if errors else ())
        for r in rows
    ]
    return aligned(cells)


def jobs_only(args: argparse.Namespace) -> bool:
    """``--job`` or ``--state``: the jobs asked for, without leaders or workers."""
    return getattr(args, "job", None) is not None or getattr(args, "state", None) is not None


def selected(client: redis.Redis, args: argparse.Namespace) -> list[Row]:
    """The job rows ``--namespace``, ``--job`` and ``--state`` ask for: one job's keys
    (in each namespace, if none is given), or a state's jobs from the index (every one
    unless ``args`` has a ``limit``: ``reset --state`` passes none, it wants them all;
    ``--json`` is never cut)."""
    spaces = indexed.namespaces(client, args.namespace)
    if args.job is not None:
        keys = [indexed.key_of(ns, args.job) for ns in spaces]
    else:
        every = getattr(args, "all", False) or getattr(args, "json", False)
        limit = None if every else getattr(args, "limit", None)
        keys = indexed.listed(client, spaces, [args.state], limit)
    return [r for r in read_rows(client, keys, kept(args)) if args.state in (None, r.state)]


def histories(client: redis.Redis, rows: list[Row]) -> dict[tuple[str, str], Any]:
    """Each row's job's attempts (``--job``), read as ``Worker.inspect`` reads them."""
    protocol = ScriptProtocol(client)
    return {
        (r.namespace, r.id): protocol.inspect(JobKeys(r.namespace, r.id), history=True).history
        for r in rows if r.state != "foreign"
    }


def ticks_told(
    client: redis.Redis, timed: list[schedules.ScheduleRow], retention: Kept
) -> list[schedules.ScheduleRow]:
    """The schedules whose latest tick ran, told ``ran (done)`` or ``ran (gave_up)`` by
    reading that tick's job (one job a schedule: a DONE one is not among the rows)."""
    def tick(row: schedules.ScheduleRow) -> tuple[str, str]:
        return row.namespace, f"{row.name}@{row.last_tick}"

    keys = [indexed.key_of(*tick(r)) for r in timed if r.outcome == "ran" and r.last_tick]
    states = {(r.namespace, r.id): r.state for r in job_rows(client, keys, retention)}
    return [
        replace(row, outcome=f"ran ({states[tick(row)]})")
        if row.outcome == "ran" and states.get(tick(row)) in ("done", "gave_up") else row
        for row in timed
    ]
