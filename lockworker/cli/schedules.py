"""The schedules section of ``lockworker status`` and of the dashboard: each schedule's
latest tick and what became of it, its next tick, and its counts, read from its hash on
the server (:mod:`lockworker.protocol.schedules`).

Schedules are few: each registers itself when it starts being served, and is read from
the registry (:mod:`lockworker.cli.registered`; a SCAN of the schedules' hashes only
while none of them is registered), at most :data:`MOST` of them. A schedule's next tick
comes from its definition, which each serving process records in the hash when it
begins serving; a hash without one (written by hand, or by another release) shows what
it knows and says the rest is unknown. "Now" is the server's clock, as for due-ness.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import redis

from lockworker.cli import registered
from lockworker.cli.cells import aligned, duration, natural, printable
from lockworker.model.codec import decode_state
from lockworker.model.keys import JobKeys
from lockworker.model.schedule import TICK_FORMAT, from_definition
from lockworker.protocol import text
from lockworker.protocol.schedules import (
    Progress,
    decode_progress,
    schedule_key,
)

MOST = 1000
"""The most schedule hashes read: a bound on the list, not a count anyone reaches."""
UNKNOWN = "unknown (no definition recorded)"


def moment(second: int | None) -> str | None:
    """Epoch seconds as ``2026-11-30T06:00:00Z`` (a tick id's form), or None."""
    if second is None:
        return None
    return datetime.fromtimestamp(second, timezone.utc).strftime(TICK_FORMAT)


@dataclass(frozen=True)
class ScheduleRow:
    """One schedule as its hash tells it (times as ``%Y-%m-%dT%H:%M:%SZ``, UTC)."""

    namespace: str
    name: str
    spec: str | None
    """``every 300 s``, ``cron '30 2 * * *' in Europe/Berlin``; None: not recorded."""
    last_tick: str | None
    """The latest tick decided (None before any)."""
    outcome: str | None
    """Of the latest tick: running, waiting, ran, skipped; with the status of its job
    where the reader knows it (``ran (done)``, ``ran (gave_up)``)."""
    last_ran: str | None
    """The latest tick whose job was resolved."""
    next_due: str | None
    """The first tick after the latest decided one (None: the definition is unknown);
    in the past when a tick is due that no process has taken up (none serves)."""
    next_due_in: float | None
    """Seconds until then, negative when overdue."""
    ran: int = 0
    skipped: int = 0
    caught_up: int = 0
    dropped: int = 0
    """Ticks a catch-up policy left out (due while no process served)."""
    running: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    definition: dict[str, Any] | None = None


def schedule_keys(client: redis.Redis, namespace: str | None) -> list[tuple[str, str, str]]:
    """``(key, namespace, name)`` of every schedule's hash (of ``namespace`` if given)."""
    found = itertools.islice(registered.schedules(client, namespace), MOST)
    keys = {(schedule_key(ns, name), ns, name) for ns, name in found}
    return sorted(keys, key=lambda k: (natural(k[1]), natural(k[2])))


def schedule_row(
    namespace: str, name: str, seen: Progress, now: float, job_state: str | None = None
) -> ScheduleRow:
    """One row from a decoded hash, at server time ``now``; ``job_state`` is the latest
    tick's job's state where the caller read it."""
    schedule = from_definition(name, seen.definition)
    next_due = None
    if schedule is not None:
        next_due = schedule.next_after(now if seen.last is None else seen.last)
    outcome = seen.outcome
    if outcome == "ran" and job_state in ("done", "gave_up"):
        outcome = f"ran ({job_state})"
    return ScheduleRow(
        namespace, name, None if schedule is None else schedule.spec, moment(seen.last),
        outcome, moment(seen.last_ran), moment(next_due),
        None if next_due is None else round(next_due - now, 3),
        seen.ran, seen.skipped, seen.caught_up, seen.dropped,
        [str(moment(t)) for t in seen.running], [str(moment(t)) for t in seen.waiting],
        seen.definition if schedule is not None else None,
    )


def finished(client: redis.Redis, namespace: str, job_id: str) -> str | None:
    """The state of a job read now (one GET), if lockworker wrote it."""
    try:
        raw = client.get(JobKeys(namespace, job_id).state)
    except redis.ResponseError:  # a key of another type: not a state lockworker wrote
        return None
    decoded = None if raw is None else decode_state(raw)
    return None if decoded is None else decoded.status.value


def schedule_rows(
    client: redis.Redis, namespace: str | None = None,
    jobs: Mapping[tuple[str, str], str] | None = None,
) -> list[ScheduleRow]:
    """Every schedule's row (of ``namespace`` if given); ``jobs`` maps ``(namespace,
    job id)`` to a state the caller already read, to tell a tick done from given up."""
    rows: list[ScheduleRow] = []
    keys = schedule_keys(client, namespace)
    if not keys:
        return rows
    secs, micros = client.time()
    now = int(secs) + int(micros) / 1e6
    for key, ns, name in keys:
        fields = {text(k): text(v) for k, v in client.hgetall(key).items()}
        seen = decode_progress(fields)
        tick_id = None if seen.last is None else f"{name}@{moment(seen.last)}"
        state = None if jobs is None or tick_id is None else jobs.get((ns, tick_id))
        if state is None and jobs is not None and tick_id is not None and seen.outcome == "ran":
            state = finished(client, ns, tick_id)  # the caller lists no finished job
        rows.append(schedule_row(ns, name, seen, now, state))
    return rows


HEADER = (
    "SCHEDULE", "NAMESPACE", "DEFINITION", "LAST TICK", "OUTCOME", "NEXT DUE",
    "RAN", "SKIPPED", "CAUGHT UP", "DROPPED",
)


def due(row: ScheduleRow) -> str:
    """``2026-11-30T06:00:00Z (in 4m10s)``, ``... (overdue 12.0s)``, or ``-``."""
    if row.next_due is None or row.next_due_in is None:
        return "-"
    if row.next_due_in < 0:
        return f"{row.next_due} (overdue {duration(-row.next_due_in)})"
    return f"{row.next_due} (in {duration(row.next_due_in)})"


def table(rows: list[ScheduleRow]) -> str:
    """The schedules, aligned with a header (empty when there are none), and a line
    saying so when a definition is unknown."""
    if not rows:
        return ""
    cells = [HEADER] + [
        (printable(r.name), printable(r.namespace), printable(r.spec or UNKNOWN),
         r.last_tick or "-", r.outcome or "-", due(r),
         str(r.ran), str(r.skipped), str(r.caught_up), str(r.dropped))
        for r in rows
    ]
    out = aligned(cells)
    if any(r.spec is None for r in rows):
        out += (
            "\nno process of this release has recorded a definition for a schedule "
            "marked unknown: its next tick is unknown until one serves it"
        )
    return out
