"""A stream's failover: a primary and two backups, the primary stopped mid-stream.

A backlog of jobs is submitted to one stream (``lockworker.submit``); three OS
processes, a primary and two backups (``role="backup"``, ``backup_delay=0.5``), each
read the whole stream with their own ``StreamSource`` (fan-out) and serve it with
``serve(source, concurrency=4)``: ``lockworker.Worker`` in the sync rows,
``lockworker.aio.Worker`` in the asyncio rows. Each job's ``on_acquired`` makes one round
trip that records when it started and in which process. Once a quarter of the jobs has
run, the primary gets SIGKILL (a crash) or SIGTERM (a clean stop, as in a deploy); the
run then waits until every job has run or ``cap`` seconds have passed since the signal,
whichever comes first, so that a slow failover ends in bounded time (and says so).

Every process reads ``time.monotonic()``, one system-wide clock on Linux, so the start
times recorded by the processes and the signal's time taken here can be subtracted.
The module also hosts the lockworker processes of :mod:`benchmarks.peers` (three
members of one consumer group, ``StreamSource(..., group=...)``), which share the
child's code.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import redis
import redis.asyncio

import lockworker
import lockworker.aio
from benchmarks import peer_jobs
from benchmarks.common import quiet_logging, reap, spawn

ROLES = ("primary", "backup", "backup")
CONCURRENCY = 4
BACKUP_DELAY = 0.5
LEASE = 2.0
"""Seconds: the lease of the failover rows (renewed by each worker's heartbeat)."""
TARGET_RATIO = 0.8
"""The backups' jobs/s after the primary is gone, as a share of the primary's before."""
WINDOW = 0.5
"""Seconds: the sliding window over which "the backups serve at 0.8x" is judged."""
REPLY_TIMEOUT = 60.0
CASES = (("SIGKILL", "sync"), ("SIGTERM", "sync"), ("SIGKILL", "aio"), ("SIGTERM", "aio"))


@dataclass(frozen=True)
class Setup:
    """What one serving process does (it is pickled to a ``spawn`` child)."""

    namespace: str
    stream: str
    role: str
    kind: str
    """``sync`` (``lockworker.Worker``) or ``aio`` (``lockworker.aio.Worker``)."""
    lease: float
    hold: float = 0.0
    """Seconds ``on_acquired`` sleeps after recording its start (0: a one-round-trip job)."""
    concurrency: int = CONCURRENCY
    group: str | None = None
    """Read the stream through this shared consumer group (``group=``), not fan-out."""
    peer: bool = False
    """``on_acquired`` is :func:`benchmarks.peer_jobs.record`, the frameworks' handler
    (one round trip: the job's run counted, the first start kept), not the rows' own."""


def keys(namespace: str) -> tuple[str, str]:
    """``(starts, runs)``: a list of "monotonic-time role pid" per run, runs per job id."""
    return f"bench:{namespace}:starts", f"bench:{namespace}:runs"


def _sync_main(setup: Setup, port: int, pipe: Connection) -> None:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=REPLY_TIMEOUT)
    starts, runs = keys(setup.namespace)
    tag = f"{setup.role} {os.getpid()}"
    keyspace = f"bench:{setup.namespace}"

    def on_acquired(job: lockworker.Job) -> None:
        if setup.peer:
            peer_jobs.record(port, keyspace, job.id)
            return
        record = client.pipeline(transaction=False)
        record.rpush(starts, f"{time.monotonic():.6f} {tag}")
        record.hincrby(runs, job.id, 1)
        record.execute()
        if setup.hold:
            time.sleep(setup.hold)  # the heartbeat renews the lease meanwhile
            client.rpush(f"bench:{setup.namespace}:ends", f"{time.monotonic():.6f} {tag}")

    worker = lockworker.Worker(
        client, namespace=setup.namespace, lock_timeout=setup.lease, retention=600.0,
        owner=f"{setup.role}-{os.getpid()}", role=setup.role, backup_delay=BACKUP_DELAY,
        on_acquired=on_acquired,
    )
    source = lockworker.StreamSource(
        client, setup.stream, owner=worker.owner, group=setup.group
    )
    client.ping()
    pipe.send("ready")
    pipe.recv()
    try:
        worker.serve(source, concurrency=setup.concurrency)  # until SIGTERM
    finally:
        worker.close()
        client.close()


async def _aio_main(setup: Setup, port: int, pipe: Connection) -> None:
    client = redis.asyncio.Redis(host="127.0.0.1", port=port, socket_timeout=REPLY_TIMEOUT)
    reader = redis.Redis(host="127.0.0.1", port=port, socket_timeout=REPLY_TIMEOUT)
    starts, runs = keys(setup.namespace)
    tag = f"{setup.role} {os.getpid()}"

    async def on_acquired(job: lockworker.Job) -> None:
        async with client.pipeline(transaction=False) as record:
            record.rpush(starts, f"{time.monotonic():.6f} {tag}")
            record.hincrby(runs, job.id, 1)
            await record.execute()
        if setup.hold:
            await asyncio.sleep(setup.hold)
            await client.rpush(f"bench:{setup.namespace}:ends", f"{time.monotonic():.6f} {tag}")

    worker = lockworker.aio.Worker(
        client, namespace=setup.namespace, lock_timeout=setup.lease, retention=600.0,
        owner=f"{setup.role}-{os.getpid()}", role=setup.role, backup_delay=BACKUP_DELAY,
        on_acquired=on_acquired,
    )
    source = lockworker.StreamSource(reader, setup.stream, owner=worker.owner)
    await client.ping()
    pipe.send("ready")
    await asyncio.to_thread(pipe.recv)
    try:
        await worker.serve(source, concurrency=setup.concurrency)  # until SIGTERM
    finally:
        await worker.close()
        await client.aclose()
        reader.close()


def child_main(setup: Setup, port: int, pipe: Connection) -> None:
    """One serving process: get ready, wait for ``go``, serve until SIGTERM (or killed)."""
    quiet_logging(to_devnull=True)
    if setup.kind == "aio":
        asyncio.run(_aio_main(setup, port, pipe))
    else:
        _sync_main(setup, port, pipe)


class Processes:
    """Serving processes started together, released by one ``go``; stopped on exit."""

    def __init__(self, port: int, setups: list[Setup]) -> None:
        self.procs, self.pipes = spawn(child_main, [(setup, port) for setup in setups])

    def __enter__(self) -> Processes:
        for pipe in self.pipes:
            if not pipe.poll(REPLY_TIMEOUT) or pipe.recv() != "ready":
                self.__exit__()
                raise RuntimeError("a serving process did not get ready")
        return self

    def go(self) -> float:
        for pipe in self.pipes:
            pipe.send("go")
        return time.monotonic()

    def signal(self, index: int, signum: int) -> float:
        """Send ``signum`` to process ``index``; returns the time just before it."""
        pid = self.procs[index].pid
        assert pid is not None
        at = time.monotonic()
        os.kill(pid, signum)
        return at

    def pid(self, index: int) -> int:
        pid = self.procs[index].pid
        assert pid is not None
        return pid

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            # ``terminate``, not ``os.kill``: a process that died (a trial killed it) may
            # be reaped at any moment by another thread starting a process (trials run
            # side by side), and a signal sent to its pid then fails.
            proc.terminate()
        reap(self.procs, self.pipes)


def read_starts(client: redis.Redis, namespace: str) -> list[tuple[float, str, int]]:
    """The recorded runs as ``(monotonic time, role, pid)``, in time order."""
    starts, _ = keys(namespace)
    rows = []
    for raw in client.lrange(starts, 0, -1):
        at, role, pid = raw.decode().split()
        rows.append((float(at), role, int(pid)))
    return sorted(rows)


@dataclass
class FailoverRun:
    how: str
    """``SIGKILL`` or ``SIGTERM``."""
    kind: str
    """``sync`` or ``aio``."""
    jobs: int
    kill_after: int
    cap: float
    lease: float
    before_rate: float = float("nan")
    """The primary's jobs/s, from its first job to the signal."""
    first_after: float | None = None
    """Seconds from the signal to the backups' first job (None: none within ``cap``)."""
    steady_after: float | None = None
    """Seconds from the signal until the backups' jobs/s over a WINDOW first reached
    TARGET_RATIO x ``before_rate`` (None: not within ``cap``)."""
    after_rate: float = float("nan")
    """The backups' jobs/s from their first job after the signal to their last."""
    left: int = 0
    """Jobs that had not run when the run ended (0: every job ran)."""
    seconds_after: float = 0.0
    """Seconds from the signal until the last job ran (or until ``cap``)."""
    twice: int = 0
    """Jobs that ran more than once (a crash's in-flight jobs may: at least once)."""
    by_role: dict[str, int] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.after_rate / self.before_rate if self.before_rate else float("nan")

    @property
    def steady_target(self) -> float:
        """Seconds within which the backups must serve at 0.8x: the lease + 1 s after
        a crash, a round trip + 1 s (taken as 1 s) after a clean stop."""
        return (self.lease if self.how == "SIGKILL" else 0.0) + 1.0

    @property
    def met(self) -> bool:
        return (
            self.left == 0
            and self.ratio >= TARGET_RATIO
            and self.steady_after is not None
            and self.steady_after <= self.steady_target
        )


def _steady(times: list[float], at: float, wanted: float) -> float | None:
    """The first start time ``t`` in ``times`` from which the jobs started in
    ``[t, t + WINDOW]`` reach ``wanted`` jobs/s (a shorter tail window counts if it
    spans at least WINDOW / 2); returned relative to ``at``."""
    end = times[-1] if times else at
    for i, t in enumerate(times):
        span = min(WINDOW, end - t)
        if span < WINDOW / 2:
            return None
        count = sum(1 for u in times[i:] if u <= t + span)
        if count / span >= wanted:
            return t - at
    return None


def analyse(result: FailoverRun, rows: list[tuple[float, str, int]], killed_at: float,
            runs: dict[bytes, bytes]) -> None:
    primary = [t for t, role, _ in rows if role == "primary" and t <= killed_at]
    if len(primary) >= 2:
        result.before_rate = len(primary) / (killed_at - primary[0])
    after = [t for t, role, _ in rows if role != "primary" and t > killed_at]
    for _, role, _ in rows:
        result.by_role[role] = result.by_role.get(role, 0) + 1
    if after:
        result.first_after = after[0] - killed_at
        if len(after) >= 2 and after[-1] > after[0]:
            result.after_rate = (len(after) - 1) / (after[-1] - after[0])
        result.steady_after = _steady(after, killed_at, TARGET_RATIO * result.before_rate)
    result.left = result.jobs - len(runs)
    result.twice = sum(1 for count in runs.values() if int(count) > 1)


def run_one(port: int, client: redis.Redis, how: str, kind: str, *, jobs: int,
            cap: float, lease: float) -> FailoverRun:
    namespace = f"bench-failover-{uuid.uuid4().hex[:8]}"
    _, runs_key = keys(namespace)
    result = FailoverRun(how, kind, jobs, jobs // 4, cap, lease)
    for n in range(jobs):
        lockworker.submit(client, namespace, f"job-{n}", {"n": n})
    setups = [Setup(namespace, namespace, role, kind, lease) for role in ROLES]
    signum = signal.SIGKILL if how == "SIGKILL" else signal.SIGTERM
    with Processes(port, setups) as procs:
        start = procs.go()
        while int(client.hlen(runs_key)) < result.kill_after:
            if time.monotonic() > start + REPLY_TIMEOUT:
                raise RuntimeError("the primary did not serve a quarter of the stream")
            time.sleep(0.002)
        killed_at = procs.signal(0, signum)
        while int(client.hlen(runs_key)) < jobs and time.monotonic() < killed_at + cap:
            time.sleep(0.005)
        result.seconds_after = time.monotonic() - killed_at
    time.sleep(0.05)  # a job started just before the stop is counted too
    analyse(result, read_starts(client, namespace), killed_at, client.hgetall(runs_key))
    return result


def run(port: int, client: redis.Redis, *, jobs: int, cap: float,
        lease: float = LEASE, say: Any = None) -> list[FailoverRun]:
    results = []
    for how, kind in CASES:
        if say is not None:
            say(f"  failover: {how}, {kind}, {jobs} jobs, at most {cap:g} s after the signal")
        results.append(run_one(port, client, how, kind, jobs=jobs, cap=cap, lease=lease))
    return results
