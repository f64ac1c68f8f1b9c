"""A stream of jobs served by a primary and two backups (``Worker.serve``).

A backlog of jobs is submitted to a Redis stream (``lockworker.submit``); then three
OS processes, a primary and two backups (``role="backup"``, ``backup_delay=0.5``),
each read the whole stream with their own ``StreamSource`` and serve it with
``Worker.serve(source, concurrency=c)``. Each job's ``on_acquired`` makes one round trip
that records who ran it. The clock runs from the moment the three processes are told
to start until the last job has run; every job must run exactly once.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import redis

import lockworker
from benchmarks.common import quiet_logging, reap, spawn

LEASE = 10.0
ROLES = ("primary", "backup", "backup")
CONCURRENCY = (1, 4, 16)
REPLY_TIMEOUT = 60.0


def _keys(namespace: str) -> tuple[str, str, str]:
    return f"bench:{namespace}:ran", f"bench:{namespace}:by", f"bench:{namespace}:ids"


def child_main(port: int, setup: tuple[str, str, str, int], pipe: Connection) -> None:
    """One serving process: get ready, wait for ``go``, serve until SIGTERM.

    ``setup``: (namespace, stream, role, concurrency).
    """
    namespace, stream, role, concurrency = setup
    quiet_logging(to_devnull=True)
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=REPLY_TIMEOUT)
    owner = f"{role}-{os.getpid()}"
    ran, by, ids = _keys(namespace)

    def on_acquired(job: lockworker.Job) -> None:
        record = client.pipeline(transaction=False)
        record.incr(ran)
        record.hincrby(by, owner, 1)
        record.sadd(ids, job.id)
        record.execute()

    worker = lockworker.Worker(
        client, namespace=namespace, lock_timeout=LEASE, retention=600.0, owner=owner,
        role=role, backup_delay=0.5, on_acquired=on_acquired,
    )
    source = lockworker.StreamSource(client, stream, owner=owner)
    client.ping()
    pipe.send("ready")
    pipe.recv()
    try:
        worker.serve(source, concurrency=concurrency)
    finally:
        worker.close()
        client.close()


@dataclass
class StreamRun:
    concurrency: int
    jobs: int
    seconds: float = 0.0
    submit_seconds: float = 0.0
    ran: int = 0
    distinct: int = 0
    by_role: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds else float("nan")

    @property
    def exactly_once(self) -> bool:
        return self.ran == self.jobs == self.distinct


def run_one(port: int, client: redis.Redis, jobs: int, concurrency: int) -> StreamRun:
    namespace = f"bench-stream-{uuid.uuid4().hex[:8]}"
    stream = namespace
    ran_key, by_key, ids_key = _keys(namespace)
    result = StreamRun(concurrency, jobs)
    started = time.monotonic()
    for n in range(jobs):
        lockworker.submit(client, stream, f"job-{n}", {"n": n})
    result.submit_seconds = time.monotonic() - started

    procs, pipes = spawn(
        child_main, [(port, (namespace, stream, role, concurrency)) for role in ROLES]
    )
    try:
        for pipe in pipes:
            if not pipe.poll(REPLY_TIMEOUT) or pipe.recv() != "ready":
                raise RuntimeError("a serving process did not get ready")
        start = time.monotonic()
        for pipe in pipes:
            pipe.send("go")
        deadline = start + REPLY_TIMEOUT + jobs / 20
        while int(client.get(ran_key) or 0) < jobs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the stream was not served within {deadline - start:.0f}s")
            time.sleep(0.005)
        result.seconds = time.monotonic() - start
    finally:
        for proc in procs:
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)
        reap(procs, pipes)
    time.sleep(0.05)  # a job started just before the stop is counted too
    result.ran = int(client.get(ran_key) or 0)
    result.distinct = int(client.scard(ids_key))
    for owner, count in client.hgetall(by_key).items():
        role = owner.decode().split("-", 1)[0]
        result.by_role[role] = result.by_role.get(role, 0) + int(count)
    return result


def run(port: int, client: redis.Redis, jobs: int) -> list[StreamRun]:
    return [run_one(port, client, jobs, concurrency) for concurrency in CONCURRENCY]
