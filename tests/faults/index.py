"""The namespace's index against the job states, once a scenario has settled.

The index (:mod:`lockworker.model.index`) is written by the same atomic step that
writes a job's state, so after any fault, once every process has stopped, a scan of
the job states and a scan of the index keys must agree. For each job state SCAN finds:

- DONE: no entry;
- GAVE_UP: a GAVE_UP entry;
- pending with a due time (a failure's retry schedule): a BACKOFF entry at that very
  time, whether it is still ahead or passed since (nothing steps on a job once every
  process has stopped, and the entry moves only with a step);
- pending with a live lock: a HELD entry;
- pending, free, no due time: PENDING, or HELD (the holder died, its lease ran out, and
  no step on the job came since to move the entry).

And every entry belongs to a job with a state (none without a job), sits in the index
key of its job's slot, and has a score of one of the kinds; the views' counts
(:func:`lockworker.protocol.index.count`) are the entries the scan found. Jobs whose
keys a scenario deleted by hand (``forgotten``: what expiry of their records does) may
keep an entry without a state, as an expired job's entry stays until a later write of
its kind trims it. A disagreement is an ``index_disagrees`` violation naming the job
and both sides. The index is read before the states: a lease that runs out between
the two reads leaves a held entry and a free job, which is allowed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from lockworker.model.codec import StateValue, decode_state
from lockworker.model.index import Kind, entry
from lockworker.model.keys import JobKeys, escape, index_key, parse_state_key, state_pattern
from lockworker.model.keys import unescape as unescape_name
from lockworker.model.state import JobStatus
from lockworker.protocol import index as reading
from lockworker.protocol.decode import text

from .history import Violation

KIND = "index_disagrees"
INDEX_HEAD = "lw:index:"


@dataclass(frozen=True)
class Job:
    """A job state SCAN found: its namespace, id, decoded state (None: the value does
    not follow the grammar) and whether a lease (the lock key) is live."""

    namespace: str
    job_id: str
    state: StateValue | None
    locked: bool


@dataclass(frozen=True)
class Indexed:
    """An index entry as the server holds it: which key, member and score."""

    key: str
    member: str
    score: float

    @property
    def namespace(self) -> str:
        return unescape_name(self.key[len(INDEX_HEAD):].partition(":{")[0])


@dataclass(frozen=True)
class Counts:
    """The views' counts of one namespace (held, backoff, pending, gave_up)."""

    namespace: str
    kinds: tuple[int, int, int, int]


def expected(job: Job) -> tuple[frozenset[Kind], int | None]:
    """The kinds of entry ``job``'s state allows (empty: none) and the entry's time
    if the state fixes it (a due time)."""
    state = job.state
    assert state is not None
    if state.status is JobStatus.DONE:
        return frozenset(), None
    if state.status is JobStatus.GAVE_UP:
        return frozenset({Kind.GAVE_UP}), None
    if job.locked:
        return frozenset({Kind.HELD}), None
    if state.due_ms is not None:
        return frozenset({Kind.BACKOFF}), state.due_ms
    return frozenset({Kind.PENDING, Kind.HELD}), None


def describe(job: Job | None) -> str:
    if job is None:
        return "no state"
    if job.state is None:
        return "an undecodable state"
    s = job.state
    due = "" if s.due_ms is None else f", due at {s.due_ms}"
    lock = ", a live lease" if job.locked else ", no lease"
    return f"{s.status.value} (attempt {s.attempt}, token {s.token}{due}{lock})"


def agreement(
    jobs: Iterable[Job],
    entries: Iterable[Indexed],
    counts: Iterable[Counts] = (),
    forgotten: Collection[tuple[str, str]] = (),
) -> list[Violation]:
    """Every disagreement between the job states and the index entries (and the
    views' counts) of a settled server; ``forgotten``: (namespace, job id) whose keys
    were deleted by hand and may have left their entry."""
    out: list[Violation] = []
    states = {(j.namespace, j.job_id): j for j in jobs}
    indexed: dict[tuple[str, str], list[tuple[Indexed, Kind | None, int]]] = {}
    for e in entries:
        decoded = entry(e.member, e.score)
        ns, job_id = e.namespace, unescape_name(e.member)
        kind, ms = (decoded.kind, decoded.ms) if decoded is not None else (None, 0)
        indexed.setdefault((ns, job_id), []).append((e, kind, ms))
        where = index_key(ns, escape(job_id))
        if e.key != where:
            out.append(Violation(KIND, f"{ns}/{job_id}",
                                 f"its entry is in {e.key}, not its slot's key {where}"))
        if kind is None:
            out.append(Violation(KIND, f"{ns}/{job_id}",
                                 f"its entry's score {e.score!r} is of no kind"))
    tally: Counter[tuple[str, Kind]] = Counter()
    for (ns, job_id), found in indexed.items():
        for _e, kind, _ms in found:
            if kind is not None:
                tally[(ns, kind)] += 1
        if len(found) > 1:
            out.append(Violation(KIND, f"{ns}/{job_id}", f"{len(found)} entries: "
                                 f"{[(k.name if k else None, ms) for _e, k, ms in found]}"))
    for key in sorted(states.keys() | indexed.keys()):
        job = states.get(key)
        found = indexed.get(key, [])
        side = ", ".join(f"{k.name if k else '?'} at {ms}" for _e, k, ms in found) or "none"
        name = f"{key[0]}/{key[1]}"
        if job is None:
            if key not in forgotten:
                out.append(Violation(KIND, name, f"the index holds {side} but the job has "
                                     "no state (an entry without a job)"))
            continue
        if job.state is None:
            out.append(Violation(KIND, name, f"{describe(job)}; the index holds {side}"))
            continue
        allowed, at = expected(job)
        kinds = [k for _e, k, _ms in found]
        if not allowed:
            if found:
                out.append(Violation(KIND, name, f"the state is {describe(job)}, which has "
                                     f"no entry, but the index holds {side}"))
            continue
        if len(found) != 1 or kinds[0] not in allowed:
            want = " or ".join(sorted(k.name for k in allowed))
            out.append(Violation(KIND, name, f"the state is {describe(job)}, so the index "
                                 f"should hold {want}, but it holds {side}"))
        elif at is not None and found[0][2] != at:
            out.append(Violation(KIND, name, f"the state is {describe(job)}, but the index's "
                                 f"{kinds[0].name} entry is at {found[0][2]}"))
    for c in counts:
        raw = tuple(tally[(c.namespace, kind)] for kind in Kind)
        if raw != c.kinds:
            out.append(Violation(KIND, c.namespace, f"the views count (held, backoff, "
                                 f"pending, gave_up) {c.kinds}, the index keys hold {raw}"))
    return out


def read_index(client: redis.Redis) -> list[Indexed]:
    out = []
    for raw in client.scan_iter(match=INDEX_HEAD + "*", count=1000):
        key = text(raw)
        pairs = cast(list[tuple[Any, float]], client.zrange(key, 0, -1, withscores=True))
        for member, score in pairs:
            out.append(Indexed(key, text(member), float(score)))
    return out


def read_jobs(client: redis.Redis) -> list[Job]:
    found = []
    for raw in client.scan_iter(match=state_pattern(), count=1000):
        parsed = parse_state_key(text(raw))
        if parsed is not None:
            found.append(JobKeys(parsed[0], parsed[1]))
    out = []
    for start in range(0, len(found), 500):
        chunk = found[start:start + 500]
        pipe = client.pipeline(transaction=False)
        for keys in chunk:
            pipe.get(keys.state)
            pipe.exists(keys.lock)
        replies = pipe.execute()
        for n, keys in enumerate(chunk):
            raw_state, locked = replies[2 * n], replies[2 * n + 1]
            if raw_state is None:
                continue  # expired between the scan and the read
            out.append(Job(keys.namespace, keys.job_id, decode_state(raw_state), bool(locked)))
    return out


def read_counts(client: redis.Redis, namespaces: Iterable[str]) -> list[Counts]:
    out = []
    for ns in sorted(set(namespaces)):
        c = reading.count(client, ns)
        out.append(Counts(ns, (c.held, c.backoff, c.pending, c.gave_up)))
    return out


@dataclass
class Checked:
    """What the check compared (the battery's figures ``states`` and ``entries``: a
    check of nothing proves nothing) and what it found."""

    states: int = 0
    entries: int = 0
    violations: list[Violation] = field(default_factory=list)


def check_server(
    client: redis.Redis, forgotten: Collection[tuple[str, str]] = (),
    into: Checked | None = None,
) -> Checked:
    """The index of every namespace on ``client``'s server against its job states
    (index first, then the states: see the module's docstring)."""
    out = into if into is not None else Checked()
    entries = read_index(client)
    counts = read_counts(client, (e.namespace for e in entries))
    jobs = read_jobs(client)
    out.states += len(jobs)
    out.entries += len(entries)
    out.violations += agreement(jobs, entries, counts, forgotten)
    return out


def check_servers(
    clients: Sequence[redis.Redis], forgotten: Collection[tuple[str, str]] = ()
) -> Checked:
    out = Checked()
    for client in clients:
        check_server(client, forgotten, out)
    return out
