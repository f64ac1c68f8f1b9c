"""lockworker beside the worker frameworks on a Redis broker: jobs/s with three worker
processes, and a killed worker's job.

Every tool runs against the same server (the run's own), with three worker processes
and the same handlers (:mod:`benchmarks.peer_jobs`, one round trip per job):

- **jobs/s**: a backlog of ``jobs`` one-round-trip jobs is queued (lockworker: submitted
  to one stream that three processes read through one consumer group,
  ``StreamSource(..., group=...)``, each ``serve(source, concurrency=c)`` for each ``c``
  of :data:`LOCKWORKER_CONCURRENCY`; RQ: ``SimpleWorker``, one job at a time; Celery:
  the ``threads`` pool with 4 threads, and the ``solo`` pool; Dramatiq, arq, saq,
  streaq, taskiq-redis and huey: :mod:`benchmarks.peer_frameworks`, 4 at a time), then
  the three workers are released at once (a go message to processes that are ready;
  Celery: workers that are up are told to consume the queue, ``add_consumer``). Time
  runs from the first job's start to the moment every job has run; each job's runs are
  counted, and the server's and the worker processes' CPU and the server's commands
  over the row are taken, per job.
- **a killed worker's job**: one job that works for ``hold`` seconds; once it started,
  the process running it gets SIGKILL. Latency = from the kill to the job's next start
  (or "not within ``bound`` s"); the run then watches until ``bound`` (or the rerun's
  end) and counts the runs after the kill and how many ran at once. Each tool with
  its defaults and with a tuned setting where it has one (:data:`SETTINGS`); the trials
  run side by side, each with its own queue (or namespace) and workers, since they
  mostly wait.

A tool that does not import, or whose workers do not start, gets a row that says so
(``not available: <reason>``); the others still run.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis

from benchmarks import peer_frameworks as fw
from benchmarks.common import command_calls, server_cpu
from benchmarks.peer_workers import (
    CONCURRENCY,
    PROCESSES,
    RQ_MAINTENANCE,
    RQ_TIMEOUT_MARGIN,
    RQ_WORKER_TTL,
    TUNED_LEASE,
    Workers,
)

REPLY_TIMEOUT = 60.0
LOCKWORKER = "lockworker"
LOCKWORKER_CONCURRENCY = (1, CONCURRENCY)
"""lockworker's rows: ``serve(group=)`` at concurrency 1 (its best on two cores in
issue 42's runs) and at the section's concurrency, the frameworks' own."""
FRAMEWORKS = (
    "RQ", "Celery (threads)", "Celery (solo)", "Dramatiq", "arq", "saq", "streaq",
    "taskiq-redis", "huey",
)
THROUGHPUT = (LOCKWORKER, *FRAMEWORKS)
AT_MOST_ONCE = ("huey",)
"""Tools that acknowledge nothing (huey takes a job with BRPOP): no trial with a
setting that reruns a killed worker's job exists; their default's trial shows it."""
C = fw.CONCURRENCY
SETTINGS: dict[tuple[str, str], str] = {
    (LOCKWORKER, "default"): (
        "`lock_timeout=10` (the default lease), 3 processes in one group"
    ),
    (LOCKWORKER, "tuned"): f"`lock_timeout={TUNED_LEASE:g}`, 3 processes in one group",
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
    ("Dramatiq", "default"): f"`RedisBroker()`, `Worker(worker_threads={C})`",
    ("Dramatiq", "tuned"): (
        f"`RedisBroker(heartbeat_timeout={fw.DRAMATIQ_HEARTBEAT_MS}, "
        f"maintenance_chance={fw.DRAMATIQ_MAINTENANCE})`, `Worker(worker_threads={C})`"
    ),
    ("arq", "default"): f"`Worker(max_jobs={C})`, `enqueue_job()`",
    ("arq", "tuned"): (
        f"`Worker(max_jobs={C}, job_timeout=<the job's work> + {fw.TIMEOUT_MARGIN} s)`"
    ),
    ("saq", "default"): f"`Worker(concurrency={C})`, `enqueue()`",
    ("saq", "tuned"): (
        f"`Worker(concurrency={C}, timers={{\"sweep\": {fw.SAQ_SWEEP}}})`, `enqueue(retries=2, "
        f"timeout=<the job's work> + {fw.TIMEOUT_MARGIN} s)`"
    ),
    ("streaq", "default"): f"`Worker(concurrency={C})`",
    ("streaq", "tuned"): f"`Worker(concurrency={C}, idle_timeout={fw.TUNED_IDLE:g})`",
    ("taskiq-redis", "default"): f"`RedisStreamBroker()`, `max_async_tasks={C}`",
    ("taskiq-redis", "tuned"): (
        f"`RedisStreamBroker(idle_timeout={fw.TUNED_IDLE * 1000:.0f})`, `max_async_tasks={C}`"
    ),
    ("huey", "default"): (
        f"`RedisHuey()`, `create_consumer(workers={C}, worker_type=\"thread\")`"
    ),
}
NEEDS = {
    "RQ": "rq", "Celery (threads)": "celery", "Celery (solo)": "celery", **fw.MODULES,
}


def unavailable(tool: str) -> str:
    """Why ``tool`` cannot run here ("" if it can): its module does not import."""
    module = NEEDS.get(tool)
    if module is None:
        return ""
    try:
        importlib.import_module(module)
    except Exception as error:  # any failure to import: the row says which
        return f"not available: {_reason(error)}"
    return ""


def _reason(error: BaseException) -> str:
    text = " ".join(str(error).split())[:160]
    if type(error) is RuntimeError and text:  # the harness's own: its text says it all
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


# -- the measurements -------------------------------------------------------------------


@dataclass
class PeerRate:
    tool: str
    jobs: int
    concurrency: int = 0
    """lockworker's ``serve`` concurrency (0: a framework's row)."""
    seconds: float = float("nan")
    distinct: int = 0
    runs: int = 0
    error: str = ""
    server_cpu: float = float("nan")
    """CPU seconds the server used from the release to the last job."""
    workers_cpu: float = float("nan")
    """CPU seconds the three worker processes used meanwhile."""
    commands: int = 0
    """Commands the server executed meanwhile (those inside scripts too)."""
    window: float = float("nan")
    """Seconds from the release to the last job (the CPU figures' window)."""

    @property
    def label(self) -> str:
        if self.tool != LOCKWORKER:
            return self.tool
        return f"lockworker `serve(group=)`, concurrency {self.concurrency}"

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds and not self.error else float("nan")

    @property
    def once(self) -> bool:
        return self.distinct == self.runs == self.jobs

    def per_job(self, value: float) -> float:
        return value / self.jobs if self.jobs else float("nan")

    @property
    def busy_cores(self) -> float:
        return (self.server_cpu + self.workers_cpu) / self.window if self.window else float("nan")


def _first_start(client: redis.Redis, keyspace: str) -> float:
    first = client.get(f"{keyspace}:first")
    if first is not None:
        return float(first)
    head = client.lindex(f"{keyspace}:starts", 0)
    return float(head.split()[0]) if head is not None else float("nan")


def _cpu(pids: list[int]) -> float:
    """CPU seconds (user + system, all threads) the live processes ``pids`` used so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def throughput(tool: str, port: int, client: redis.Redis, jobs: int,
               concurrency: int = CONCURRENCY) -> PeerRate:
    result = PeerRate(tool, jobs, concurrency if tool == LOCKWORKER else 0)
    result.error = unavailable(tool)
    if result.error:
        return result
    workers = Workers(tool, "default", port, concurrency=concurrency)
    try:
        workers.__enter__()
    except Exception as error:  # the tool's workers do not start here: the row says so
        result.error = f"not available: {_reason(error)}"
        return result
    runs_key = f"{workers.keyspace}:runs"
    try:
        workers.queue(client, "record", [(port, workers.keyspace, n) for n in range(jobs)])
        cpu, server, calls = _cpu(workers.pids), server_cpu(client), command_calls(client)
        released = time.monotonic()
        workers.go()
        deadline = time.monotonic() + REPLY_TIMEOUT + jobs / 50
        while int(client.hlen(runs_key)) < jobs:
            if time.monotonic() > deadline:
                result.error = f"{client.hlen(runs_key)} of {jobs} jobs ran within the time"
                break
            time.sleep(0.005)
        end = time.monotonic()
        result.workers_cpu = _cpu(workers.pids) - cpu
        result.server_cpu = server_cpu(client) - server
        result.commands = command_calls(client) - calls
        result.window = end - released
        result.seconds = end - _first_start(client, workers.keyspace)
    except Exception as error:  # the row says what broke; the other rows still run
        result.error = f"error: {_reason(error)}"
        return result
    finally:
        workers.__exit__()
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
    result.error = unavailable(tool)
    if result.error:
        return result
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=REPLY_TIMEOUT)
    workers = Workers(tool, setting, port, hold=hold)
    try:
        workers.__enter__()
    except Exception as error:  # the tool's workers do not start here: the row says so
        result.error = f"not available: {_reason(error)}"
        client.close()
        return result
    try:
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
        workers.__exit__()
        client.close()
    after = [one for one in starts if one[0] > killed_at]
    if after:
        result.latency = after[0][0] - killed_at
    result.runs_after = len(after)
    result.at_once = _peak(after, ended, killed_at + result.watched)
    return result


def recoveries(port: int, bound: float, hold: float) -> list[Recovery]:
    """Every tool's trial with each setting, side by side (one thread each)."""
    wanted = list(SETTINGS)
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
    rows = [(LOCKWORKER, c) for c in LOCKWORKER_CONCURRENCY]
    rows += [(tool, CONCURRENCY) for tool in FRAMEWORKS]
    for tool, concurrency in rows:
        if say is not None:
            say(f"  peers: {tool}{f' (concurrency {concurrency})' if tool == LOCKWORKER else ''}"
                f", {jobs} jobs over {PROCESSES} processes")
        rates.append(throughput(tool, port, client, jobs, concurrency))
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

    return ", ".join(
        [f"rq {_version('rq')}", f"celery {_version('celery')} (kombu {_version('kombu')})"]
        + [f"{name} {_version(dist)}" for name, dist in fw.DISTRIBUTIONS.items()
           if name != "taskiq-redis"]
        + [f"taskiq {_version('taskiq')} (taskiq-redis {_version('taskiq-redis')})"]
    )
