"""Scale: many jobs in flight at once, spread over several OS processes.

Each of ``PROCESSES`` processes serves its own share of the job ids
(``Worker.serve(list, concurrency=share)``), and every job's ``on_acquired`` blocks, so
that all jobs end up held at the same time, each with a live lease renewed by its
process's heartbeat. Then:

- **server memory per job** = (``INFO memory`` ``used_memory`` with every job held -
  before the processes started) / jobs; the processes' connections are in the delta
  too, a few kB each;
- **``lockworker status``**: the wall time of the command as a user runs it (a new
  interpreter with lockworker's bytecode compiled, as installing it compiles it,
  ``--namespace``, the table printed), and of its collection step alone
  (``lockworker.cli.status.collect``, the index plus batched reads) in this process.

Then the hooks return, every job is settled DONE, and the memory that the DONE records
keep (for the workers' ``retention``) is measured too.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import redis
from redis.cluster import RedisCluster

import lockworker
from benchmarks.common import cli, quiet_logging, reap, spawn
from lockworker.cli.summary import DEFAULT_LIMIT

PROCESSES = 8
LEASE = 30.0
STATUS_TARGET = 1.0
"""Seconds: the target for listing every job with ``lockworker status``."""
REPLY_TIMEOUT = 120.0


def child_main(
    port: int, namespace: str, ids: list[str], cluster: bool, pipe: Connection
) -> None:
    """Serve ``ids``, each hook blocking until the parent says ``release``; on the
    cluster whose node listens on ``port`` if ``cluster``."""
    quiet_logging(to_devnull=True)
    # One connection per job at the ramp's peak: redis-py's default pool holds 100.
    kwargs: dict[str, Any] = {"socket_timeout": REPLY_TIMEOUT, "max_connections": len(ids) + 32}
    client: Any = (
        RedisCluster(host="127.0.0.1", port=port, **kwargs) if cluster
        else redis.Redis(host="127.0.0.1", port=port, **kwargs)
    )
    release = threading.Event()
    held = f"bench:{namespace}:held"

    def on_acquired(_job: lockworker.Job) -> None:
        client.incr(held)
        release.wait(REPLY_TIMEOUT * 2)

    worker = lockworker.Worker(
        client, namespace=namespace, lock_timeout=LEASE, retention=600.0,
        handle_signals=False, on_acquired=on_acquired,
    )
    server = threading.Thread(
        target=worker.serve, args=([(job_id, None) for job_id in ids],),
        kwargs={"concurrency": len(ids)}, daemon=True,
    )
    server.start()
    pipe.recv()
    release.set()
    server.join(REPLY_TIMEOUT)
    worker.close()
    client.close()
    pipe.send("done")


@dataclass
class ScaleRun:
    jobs: int
    processes: int
    ramp_seconds: float = 0.0
    memory_held: int = 0
    memory_held_data: int = 0
    memory_done: int = 0
    status_seconds: float = 0.0
    status_rows: int = 0
    startup_seconds: float = 0.0
    """``python -m lockworker --version`` in a new interpreter: the imports every command
    pays before it talks to Redis."""
    collect_seconds: float = 0.0
    collect_rows: int = 0
    status_error: str = ""

    @property
    def bytes_per_held_job(self) -> float:
        return self.memory_held / self.jobs

    @property
    def bytes_per_held_data(self) -> float:
        return self.memory_held_data / self.jobs

    @property
    def bytes_per_done_job(self) -> float:
        return self.memory_done / self.jobs

    @property
    def status_ok(self) -> bool:
        """``lockworker status`` as a user runs it, within the target: it counts every
        job and lists the first page of them (``--limit``, 50 by default)."""
        shown = min(self.jobs, DEFAULT_LIMIT)
        return self.status_rows == shown and self.status_seconds < STATUS_TARGET


def _used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def _data_memory(client: redis.Redis) -> int:
    """``used_memory`` less the normal clients' buffers (``mem_clients_normal``)."""
    memory = client.info("memory")
    return int(memory["used_memory"]) - int(memory.get("mem_clients_normal", 0))


def _status(url: str, namespace: str, result: ScaleRun) -> None:
    cli("--version", timeout=120)  # compiles the bytecode: the startup below is a user's
    start = time.monotonic()
    cli("--version", timeout=120)
    result.startup_seconds = time.monotonic() - start
    start = time.monotonic()
    done = cli("status", "--namespace", namespace, "--redis", url, "--log-level", "warning",
               timeout=120)
    result.status_seconds = time.monotonic() - start
    if done.returncode != 0:
        result.status_error = (done.stderr or done.stdout).strip()[:200]
    result.status_rows = sum(1 for line in done.stdout.splitlines() if line.startswith("job "))


def run(port: int, url: str, client: redis.Redis, jobs: int) -> ScaleRun:
    from lockworker.cli.kept import Kept
    from lockworker.cli.status import collect

    namespace = f"bench-scale-{uuid.uuid4().hex[:8]}"
    held_key = f"bench:{namespace}:held"
    result = ScaleRun(jobs, PROCESSES)
    ids = [f"job-{n}" for n in range(jobs)]
    shares = [ids[i::PROCESSES] for i in range(PROCESSES)]
    before = _used_memory(client)
    data_before = _data_memory(client)
    start = time.monotonic()
    procs, pipes = spawn(child_main, [(port, namespace, share, False) for share in shares])
    try:
        deadline = start + REPLY_TIMEOUT + jobs / 50
        while int(client.get(held_key) or 0) < jobs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {client.get(held_key)} of {jobs} jobs were taken")
            time.sleep(0.05)
        result.ramp_seconds = time.monotonic() - start
        result.memory_held = _used_memory(client) - before
        result.memory_held_data = _data_memory(client) - data_before
        _status(url, namespace, result)
        started = time.monotonic()
        rows = collect(client, namespace, Kept(), None)  # every row, not --limit's
        result.collect_seconds = time.monotonic() - started
        result.collect_rows = sum(1 for row in rows if row.kind == "job")
        for pipe in pipes:
            pipe.send("release")
        for pipe in pipes:
            if not pipe.poll(REPLY_TIMEOUT):
                raise RuntimeError("a scale process did not finish its jobs")
            pipe.recv()
    finally:
        reap(procs, pipes)
    result.memory_done = _used_memory(client) - before
    return result
