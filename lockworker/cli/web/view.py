"""What the dashboard shows, read from Redis the way ``lockworker status`` reads it.

A :class:`Collector` reads every leader, live worker, stream and schedule (found in the
registry: :mod:`lockworker.cli.registered`) and the jobs each namespace's index lists
and counts (held, backing off, pending, given up: :mod:`lockworker.cli.web.jobs`; not
the finished ones, whatever their number) into a :class:`View`, again and again in a
thread of its own: every ``refresh`` seconds, but never busier than a third of the time
(a read of 10,000 jobs takes a fraction of a second, so it is not repeated back to
back). Pages are cut from the latest view, so a page costs no read of its own and loads
at once however many jobs there are.

Between two reads it compares who held each job and each leadership: a job (or a term)
whose holder changed to another process with a greater fencing token was handed over,
and the :class:`Handover` is kept (the newest :data:`KEPT` of them) for the page to
show as it happens. So that the panel does not start empty, the first read also reads
the attempt histories of the :data:`SEEDED` most recently written jobs it listed
(bounded: no walk of every job; finished jobs are not listed) and keeps the handovers
they record (:func:`recorded_handovers`).
What the server holds (:mod:`lockworker.cli.footprint`: keys and bytes per namespace
by kind, from a bounded sample) is read at most every :data:`MEMORY_EVERY` seconds.
Each schedule's hash (:mod:`lockworker.cli.schedules`: few, found in the registry) is
read with every view, and so is each stream (:mod:`lockworker.cli.readers`: one script
per stream, few of them, found in the registry as ``lockworker status`` finds them: its
entries, its namespaces' progress, its readers, its delayed jobs and when the next is
due, a countdown not worth leaving seconds old). What the workers did per minute over the last hour
(:mod:`lockworker.cli.throughput`: one script per namespace) is read at most every
:data:`RATES_EVERY` seconds (the workers send their counts every few seconds).
A job's attempt history (``Snapshot.history``, where the library
records one) is read when a page shows the job.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from inspect import signature
from typing import Any

import redis
import structlog

from lockworker.cli import footprint, status, throughput
from lockworker.cli.kept import Kept
from lockworker.cli.readers import StreamRow, stream_rows
from lockworker.cli.schedules import ScheduleRow, schedule_rows
from lockworker.cli.status import Row
from lockworker.cli.web import jobs as listing
from lockworker.cli.web.jobs import Counts
from lockworker.cli.workers import WorkerRow, worker_rows
from lockworker.clock import Clock, SystemClock, wall_time
from lockworker.daemons.redrive import reset_job
from lockworker.errors import ForeignValueError
from lockworker.model.footprint import Footprint
from lockworker.model.history import handed_over
from lockworker.model.keys import JobKeys
from lockworker.model.rates import Bucket
from lockworker.model.redrive import Redrive
from lockworker.model.state import Snapshot
from lockworker.protocol import ScriptProtocol
from lockworker.serving.settings import DAY, DONE_RETENTION

KEPT = 100
"""How many handovers the dashboard remembers (the newest)."""
BUSY = 3.0
"""A read is followed by at least BUSY times its own duration of rest."""
SEEDED = 200
"""How many jobs' histories (the most recently written) the first read looks through
for the handovers they record."""
MEMORY_EVERY = 30.0
"""Seconds between two samples of what the server holds (memory moves slowly)."""
RATES_EVERY = 5.0
"""Seconds between two reads of the per-minute counts (sent every few seconds)."""

log = structlog.get_logger("lockworker.cli.web")


@dataclass(frozen=True)
class Handover:
    """A job or a leadership that passed from one process to another."""

    seen_at: float
    """Wall-clock time of the read that saw it."""
    kind: str
    """``job`` or ``leader``."""
    namespace: str
    id: str
    before: str
    after: str
    token: int
    """The new holder's fencing token (a term's number, for a leader)."""
    attempt: int | None
    recorded: bool = False
    """Read from the job's attempt history at the dashboard's start (``seen_at`` is
    when the new holder's attempt started), not seen between two reads."""


@dataclass(frozen=True)
class View:
    """Everything one read saw."""

    taken_at: float
    """Wall-clock time of the read (for display)."""
    read_seconds: float
    leaders: tuple[Row, ...] = ()
    workers: tuple[WorkerRow, ...] = ()
    jobs: tuple[Row, ...] = ()
    error: str | None = None
    """Why the read failed (the previous rows are kept), with any password masked."""
    counts: Counts = field(default_factory=dict)
    """namespace -> state -> number of jobs (None: not counted, finished jobs read
    from the index)."""
    memory: Footprint | None = None
    """What the server holds, as last sampled (None before the first sample)."""
    schedules: tuple[ScheduleRow, ...] = ()
    rates: dict[str, list[Bucket]] = field(default_factory=dict)
    """namespace -> its last hour's minutes, as last read (:mod:`.throughput`)."""
    streams: tuple[StreamRow, ...] = ()

    def select(
        self, *, namespace: str | None = None, state: str | None = None, query: str = ""
    ) -> list[Row]:
        """The job rows of ``namespace``/``state`` (any if None) whose id holds ``query``."""
        return [
            r for r in self.jobs
            if (namespace is None or r.namespace == namespace)
            and (state is None or r.state == state)
            and (not query or query in r.id)
        ]


Seen = dict[tuple[str, str, str], tuple[str, int, int | None]]
"""(kind, namespace, id) -> (last holder, its token, its attempt)."""


def handovers(seen: Seen, rows: Sequence[Row], at: float) -> tuple[list[Handover], Seen]:
    """The handovers since ``seen`` that ``rows`` show, and what is seen now.

    A row's holder is the live holder, or else whoever last held the job (a leadership:
    only a live one; a vacant term keeps the previous leader remembered). A holder other
    than the remembered one, with a greater token, took over from it.
    """
    found: list[Handover] = []
    now: Seen = {}
    for row in rows:
        key = (row.kind, row.namespace, row.id)
        before = seen.get(key)
        if row.holder is None:
            if before is not None:
                now[key] = before
            continue
        now[key] = (row.holder, row.token, row.attempt)
        if before is not None and before[0] != row.holder and row.token > before[1]:
            found.append(Handover(at, row.kind, row.namespace, row.id, before[0], row.holder,
                                  row.token, row.attempt))
    return found, now


def recorded_handovers(row: Row, records: Sequence[Any]) -> list[Handover]:
    """The handovers a job's attempt history records (:func:`handed_over`)."""
    try:
        pairs = handed_over(tuple(records))
    except (AttributeError, TypeError):  # records of another shape: none to tell
        return []
    return [
        Handover(after.started_ms / 1000.0, "job", row.namespace, row.id, before.owner,
                 after.owner, after.token, after.attempt, recorded=True)
        for before, after in pairs
    ]


def history(snapshot: Snapshot) -> tuple[Any, ...]:
    """The job's attempt records, oldest first (none where the library keeps none)."""
    return tuple(getattr(snapshot, "history", ()) or ())


def last_error(records: Sequence[Any]) -> str | None:
    """``Type: message`` of the latest attempt that recorded an error, or None."""
    for record in reversed(records):
        error = getattr(record, "error", None)
        kind = getattr(record, "error_type", None)
        if error or kind:
            return f"{kind}: {error}" if kind and error else str(kind or error)
    return None


class Collector:
    """Reads the views and keeps the handovers; thread-safe. ``masked``: texts (a
    password) that must never appear in an error shown."""

    def __init__(
        self, client: redis.Redis, *, retention: float = DAY, refresh: float = 1.0,
        done_retention: float = DONE_RETENTION,
        namespace: str | None = None, masked: Sequence[str] = (), clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.retention = retention
        self.kept = Kept(retention, done_retention)
        self.refresh = refresh
        self.namespace = namespace
        self.masked = tuple(m for m in masked if m)
        self.clock = clock or SystemClock()
        self._view = View(taken_at=0.0, read_seconds=0.0, error="not read yet")
        self._handovers: deque[Handover] = deque(maxlen=KEPT)
        self._seen: Seen = {}
        self._errors: dict[tuple[str, str, int, int], str | None] = {}
        self._lock = threading.Lock()
        self._reading = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._memory: tuple[float, Footprint] | None = None
        self._rates: tuple[float, dict[str, list[Bucket]]] | None = None

    def mask(self, message: str) -> str:
        for secret in self.masked:
            message = message.replace(secret, "***")
        return message

    @property
    def view(self) -> View:
        with self._lock:
            return self._view

    @property
    def handovers(self) -> list[Handover]:
        """Newest first."""
        with self._lock:
            return list(reversed(self._handovers))

    def read(self) -> View:
        """Read everything now; a failed read keeps the rows and says why."""
        with self._reading:
            started = self.clock.monotonic()
            try:
                leaders = status.leader_rows(self.client) if self.namespace is None else []
                workers = worker_rows(self.client, self.namespace)
                jobs, counts = listing.read(self.client, self.namespace, self.kept)
                states = {(r.namespace, r.id): r.state for r in jobs}
                timed = schedule_rows(self.client, self.namespace, states)
                streams = stream_rows(self.client, self.namespace)
            except (redis.RedisError, OSError) as exc:
                error = self.mask(f"{type(exc).__name__}: {exc}")
                log.warning("dashboard.read_failed", error=error)
                with self._lock:
                    old = self._view
                    self._view = View(wall_time(), old.read_seconds, old.leaders, old.workers,
                                      old.jobs, error, old.counts, old.memory,
                                      old.schedules, old.rates, old.streams)
                    return self._view
            memory = self.memory(started)
            rated = self.rates(started)
            for ns, by_state in counts.items():  # finished jobs are not counted one by
                if by_state.get("done") is None and ns in rated:  # one: the last hour's
                    by_state["done"] = throughput.summary(rated[ns])["last_hour"]["done"]
            took = self.clock.monotonic() - started
            view = View(wall_time(), took, tuple(leaders), tuple(workers), tuple(jobs),
                        None, counts, memory, tuple(timed), rated, tuple(streams))
            found, seen = handovers(self._seen, [*leaders, *jobs], view.taken_at)
            with self._lock:
                self._view, self._seen = view, seen
                self._handovers.extend(found)
            for handover in found:
                log.info("dashboard.handover", kind=handover.kind, namespace=handover.namespace,
                         id=handover.id, before=handover.before, after=handover.after,
                         token=handover.token)
            return view

    def memory(self, now: float) -> Footprint | None:
        """What the server holds: sampled again once :data:`MEMORY_EVERY` seconds have
        passed since the last sample; the last one kept if this one fails."""
        last = self._memory
        if last is not None and now - last[0] < MEMORY_EVERY:
            return last[1]
        try:
            found = footprint.read(self.client, self.namespace)
        except (redis.RedisError, OSError) as exc:
            log.warning("dashboard.memory_failed", error=self.mask(f"{type(exc).__name__}: {exc}"))
            return None if last is None else last[1]
        self._memory = (now, found)
        return found

    def rates(self, now: float) -> dict[str, list[Bucket]]:
        """Each namespace's last hour per minute: read again once :data:`RATES_EVERY`
        seconds have passed since the last read; the last one kept if this one fails."""
        last = self._rates
        if last is not None and now - last[0] < RATES_EVERY:
            return last[1]
        try:
            found = throughput.read(self.client, self.namespace)
        except (redis.RedisError, OSError) as exc:
            log.warning("dashboard.rates_failed", error=self.mask(f"{type(exc).__name__}: {exc}"))
            return {} if last is None else last[1]
        self._rates = (now, found)
        return found

    def start(self) -> None:
        """Read once now (with the handovers the recent jobs' histories record), then
        keep reading in a daemon thread until :meth:`stop`."""
        self.seed(self.read())
        self._thread = threading.Thread(target=self._run, name="dashboard-reader", daemon=True)
        self._thread.start()

    def seed(self, view: View) -> None:
        """Keep the handovers recorded in the histories of the :data:`SEEDED` jobs of
        ``view`` written last, oldest first, before any seen since."""
        recent = sorted(
            (r for r in view.jobs if r.state != "foreign"),
            key=lambda r: float("inf") if r.age is None else r.age,
        )[:SEEDED]
        found: list[Handover] = []
        for row in recent:
            try:
                seen = self.inspect(row.namespace, row.id)
            except (redis.RedisError, OSError):
                return  # the next reads say why; the panel fills as handovers happen
            if seen is not None:
                found.extend(recorded_handovers(row, history(seen)))
        found.sort(key=lambda h: h.seen_at)
        with self._lock:
            live = list(self._handovers)
            self._handovers.clear()
            self._handovers.extend(found[-KEPT:])
            self._handovers.extend(live)

    def _run(self) -> None:
        while not self.clock.wait(self._stop, max(self.refresh, BUSY * self.view.read_seconds)):
            self.read()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def inspect(self, namespace: str, job_id: str) -> Snapshot | None:
        """The job as Redis has it now (with its history where recorded); None if its
        keys hold values lockworker did not write."""
        protocol = ScriptProtocol(self.client)
        read: Callable[..., Snapshot] = protocol.inspect
        keys = JobKeys.of(namespace, job_id)
        try:
            if "history" in signature(read).parameters:  # a library that records attempts
                return read(keys, history=True)
            return read(keys)
        except ForeignValueError:
            return None

    def last_errors(self, rows: Sequence[Row]) -> dict[tuple[str, str], str | None]:
        """The last recorded error of each job of ``rows`` (a page of given-up jobs):
        read once per attempt of a job, then remembered."""
        found: dict[tuple[str, str], str | None] = {}
        for row in rows:
            key = (row.namespace, row.id, row.token, row.attempt or 0)
            with self._lock:
                known = key in self._errors
                error = self._errors.get(key)
            if not known:
                seen = self.inspect(row.namespace, row.id)
                error = last_error(history(seen)) if seen is not None else None
                error = self.mask(error) if error is not None else None
                with self._lock:
                    self._errors[key] = error
                    if len(self._errors) > 10 * KEPT:
                        self._errors.pop(next(iter(self._errors)))
            found[(row.namespace, row.id)] = error
        return found

    def reset(self, namespace: str, job_id: str, expect: str | None = None) -> Redrive:
        """Make a job that nobody holds pending again (a held one is refused), and
        re-drive it (:mod:`lockworker.daemons.redrive`); with ``expect``, only if it is
        still in that state."""
        keys = JobKeys.of(namespace, job_id)
        done = reset_job(
            self.client, ScriptProtocol(self.client), keys, round(self.retention * 1000),
            expect=expect,
        )
        log.info("dashboard.reset", namespace=namespace, id=job_id, result=done.result.value,
                 redriven=done.stream,
                 resubmit=done.resubmit() if done.stranded else None)
        return done
