"""lockworker beside RQ and Celery: jobs/s with three worker processes, and a killed
worker's job.

Every tool runs against the same server (the run's own), with three worker processes
and the same handlers (:mod:`benchmarks.peer_jobs`):

- **jobs/s**: a backlog of ``jobs`` one-round-trip jobs is queued (lockworker: submitted
  to one stream, which three primaries read, fan-out, each ``serve(source,
  concurrency=4)``; RQ: ``SimpleWorker``, one job at a time; Celery: the ``threads``
  pool with 4 threads, and the ``solo`` pool), then the three workers are released at
  once (lockworker and RQ: a go message to processes that are ready; Celery: workers
  that are up are told to consume the queue, ``add_consumer``). Time runs from the
  first job's start to the moment every job has run; each job's runs are counted.
- **a killed worker's job**: one job that works for ``hold`` seconds; once it started,
  the process running it gets SIGKILL. Latency = from the kill to the job's next start
  (or "not within ``bound`` s"); the run then watches until ``bound`` (or the rerun's
  end) and counts the runs after the kill and how many ran at once. Each tool with
  its defaults and with a tuned setting (:data:`SETTINGS`); the trials run side by
  side, each with its own queue (or namespace) and workers, since they mostly wait.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import redis

from benchmarks.common import installed
from benchmarks.peer_workers import (
    PROCESSES,
    RQ_MAINTENANCE,
    RQ_TIMEOUT_MARGIN,
    RQ_WORKER_TTL,
    TUNED_LEASE,
    Workers,
)

REPLY_TIMEOUT = 60.0

THROUGHPUT = ("lockworker", "RQ", "Celery (threads)", "Celery (solo)")
SETTINGS: dict[tuple[str, str], str] = {
    ("lockworker", "default"): "`lock_timeout=10` (the default lease), 3 primaries",
    ("lockworker", "tuned"): f"`lock_timeout={TUNED_LEASE:g}`, 3 primaries",
    ("RQ", "default"): "`SimpleWorker()`, `enqueue()`",
    ("RQ", "tuned"): (
        f"`SimpleWorker(maintenance_interval={RQ_MAINTENANCE}, "
        f"worker_ttl={RQ_WORKER_TTL})`, `enqueue(retry=Retry(max=1), "
        f"job_timeout=<the job's work> + {RQ_TIMEOUT_MARGIN} s)`"
    ),
    ("Celery (threads)", "default"): "`-P threads -c 4`, defaults",
    ("Celery (threads)", "tuned"): (
        "`-P threads -c 4`, `task_acks_late=True`, `worker_prefetch_multiplier=1`, "
        "`broker_transport_options`: `visibility_timeout=10`, "
        "`unacked_restore_interval=1`, `unacked_restore_throttle=1`"
    ),
}
NEEDS = {"RQ": "rq", "Celery (threads)": "celery", "Celery (solo)": "celery"}


def available(tool: str) -> bool:
    return installed(NEEDS.get(tool))


# -- the measurements -------------------------------------------------------------------


@dataclass
class PeerRate:
    tool: str
    jobs: int
    seconds: float = float("nan")
    distinct: int = 0
    runs: int = 0
    error: str = ""

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds else float("nan")

    @property
    def once(self) -> bool:
        return self.distinct == self.runs == self.jobs


def _first_start(client: redis.Redis, keyspace: str) -> float:
    first = client.get(f"{keyspace}:first")
    if first is not None:
        return float(first)
    head = client.lindex(f"{keyspace}:starts", 0)  # lockworker's processes
    return float(head.split()[0]) if head is not None else float("nan")


def throughput(tool: str, port: int, client: redis.Redis, jobs: int) -> PeerRate:
    result = PeerRate(tool, jobs)
    with Workers(tool, "default", port) as workers:
        runs_key = f"{workers.keyspace}:runs"
        workers.queue(client, "record", [(port, workers.keyspace, n) for n in range(jobs)])
        workers.go()
        deadline = time.monotonic() + REPLY_TIMEOUT + jobs / 50
        while int(client.hlen(runs_key)) < jobs:
            if time.monotonic() > deadline:
                result.error = f"{client.hlen(runs_key)} of {jobs} jobs ran within the time"
                break
            time.sleep(0.005)
        end = time.monotonic()
        result.seconds = end - _first_start(client, workers.keyspace)
    time.sleep(0.05)
    counts = [int(v) for v in client.hvals(runs_key)]
    result.distinct, result.runs = len(counts), sum(counts)
    return result


@dataclass
class Recovery:
    tool: str
    setting: str
    bound: float
    hold: float
    latency: float | None = None
    """Seconds from the kill to the job's next start (None: not within ``bound``)."""
    runs_after: int = 0
    """Runs of the job that started after the kill, within the watch."""
    at_once: int = 0
    """The most runs of the job that were running at the same time after the kill."""
    watched: float = 0.0
    error: str = ""


def _runs(client: redis.Redis, keyspace: str) -> tuple[list[tuple[float, int]], list[int]]:
    starts = [
        (float(at), int(pid)) for at, _, pid in
        (raw.decode().split() for raw in client.lrange(f"{keyspace}:starts", 0, -1))
    ]
    ends = [int(raw.decode().split()[2]) for raw in client.lrange(f"{keyspace}:ends", 0, -1)]
    return sorted(starts), ends


def _peak(starts: list[tuple[float, int]], ended: list[float], watched_until: float) -> int:
    events = [(at, 1) for at, _ in starts] + [(at, -1) for at in ended if at <= watched_until]
    peak = now = 0
    for _, step in sorted(events):
        now += step
        peak = max(peak, now)
    return peak


def recovery(tool: str, setting: str, port: int, bound: float, hold: float) -> Recovery:
    result = Recovery(tool, setting, bound, hold)
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=REPLY_TIMEOUT)
    try:
        with Workers(tool, setting, port, hold=hold) as workers:
            keyspace = workers.keyspace
            workers.go()
            workers.queue(client, "hold", [(port, keyspace, hold)])
            deadline = time.monotonic() + REPLY_TIMEOUT
            while not client.llen(f"{keyspace}:starts"):
                if time.monotonic() > deadline:
                    raise RuntimeError("the job did not start")
                time.sleep(0.01)
            pid = _runs(client, keyspace)[0][0][1]
            killed_at = workers.kill(pid)
            until = killed_at + bound
            while time.monotonic() < until:
                starts, _ = _runs(client, keyspace)
                if len(starts) > 1:  # the rerun: watch it to its end, then stop
                    until = min(killed_at + bound, starts[1][0] + hold + 1.0)
                time.sleep(0.02)
            result.watched = time.monotonic() - killed_at
            starts, _ = _runs(client, keyspace)
            ended = [
                float(raw.split()[0]) for raw in client.lrange(f"{keyspace}:ends", 0, -1)
            ]
    except Exception as error:  # reported in the table, the other trials go on
        result.error = f"{type(error).__name__}: {error}"
        return result
    finally:
        client.close()
    after = [one for one in starts if one[0] > killed_at]
    if after:
        result.latency = after[0][0] - killed_at
    result.runs_after = len(after)
    result.at_once = _peak(after, ended, killed_at + result.watched)
    return result


def recoveries(port: int, bound: float, hold: float) -> list[Recovery]:
    """Every tool's trial with each setting, side by side (one thread each)."""
    wanted = [key for key in SETTINGS if available(key[0])]
    results: dict[tuple[str, str], Recovery] = {}

    def one(key: tuple[str, str]) -> None:
        results[key] = recovery(key[0], key[1], port, bound, hold)

    threads = [threading.Thread(target=one, args=(key,), daemon=True) for key in wanted]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[key] for key in wanted if key in results]


@dataclass
class PeersRun:
    jobs: int
    bound: float
    hold: float
    rates: list[PeerRate]
    recoveries: list[Recovery]
    versions: str = ""
    side_by_side: bool = False
    """The trials ran during the jobs/s rows (a quick run)."""


def run(port: int, client: redis.Redis, *, jobs: int, bound: float, hold: float,
        side_by_side: bool = False, say: Any = None) -> PeersRun:
    """The jobs/s rows one after another, then the killed-job trials side by side (or,
    with ``side_by_side``, for a quick smoke run, the trials during the jobs/s rows)."""
    found: list[list[Recovery]] = []
    trials = threading.Thread(
        target=lambda: found.append(recoveries(port, bound, hold)), daemon=True
    )
    if side_by_side:
        trials.start()
    rates = []
    for tool in THROUGHPUT:
        if available(tool):
            if say is not None:
                say(f"  peers: {tool}, {jobs} jobs over {PROCESSES} processes")
            rates.append(throughput(tool, port, client, jobs))
    if say is not None:
        say(f"  peers: a killed worker's job, {len(SETTINGS)} trials side by side, "
            f"watched up to {bound:g} s" + (" (running already)" if side_by_side else ""))
    if not side_by_side:
        trials.start()
    trials.join()
    return PeersRun(
        jobs, bound, hold, rates, found[0] if found else [], versions(), side_by_side
    )


def versions() -> str:
    from benchmarks.common import _version

    return f"rq {_version('rq')}, celery {_version('celery')} (kombu {_version('kombu')})"
