"""Beyond one server: jobs/s through ``serve()`` on one server and on a 3-master Redis
Cluster, and jobs in flight on the cluster.

8 processes each serve their own share of the job ids (``Worker.serve(ids,
concurrency=4)``, an empty ``on_acquired``) against one server, then against a cluster
of 3 masters started from the same binary; jobs/s is all jobs over the time from the
common start to the last process's end. Then the cluster holds ``held`` jobs at once
(:mod:`benchmarks.scale`'s processes, whose hooks block, on the cluster), which shows
how the jobs spread over the masters and how long ``lockworker status --redis
redis+cluster://...`` takes to list them all.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import redis
from redis.cluster import RedisCluster

import lockworker
from benchmarks import scale
from benchmarks.common import cli, quiet_logging, reap, spawn
from lockworker.testing import Cluster
from lockworker.testing.server import RedisServer

PROCESSES = 8
CONCURRENCY = 4
MASTERS = 3
REPLY_TIMEOUT = 120.0


def _client(kind: str, port: int, connections: int) -> Any:
    if kind == "cluster":
        return RedisCluster(host="127.0.0.1", port=port, max_connections=connections)
    return redis.Redis(host="127.0.0.1", port=port, max_connections=connections)


def child_main(kind: str, port: int, namespace: str, ids: list[str], pipe: Connection) -> None:
    """Serve ``ids`` from the common start the parent sends; report the end time."""
    quiet_logging(to_devnull=True)
    client = _client(kind, port, len(ids) + 32)
    worker = lockworker.Worker(
        client, namespace=namespace, lock_timeout=30.0, retention=600.0,
        handle_signals=False, on_acquired=lambda _job: None,
    )
    pipe.send("ready")
    start_at = pipe.recv()
    time.sleep(max(0.0, start_at - time.monotonic()))
    worker.serve([(i, None) for i in ids], concurrency=CONCURRENCY)
    pipe.send(time.monotonic())
    worker.close()
    client.close()


@dataclass
class MastersRun:
    jobs: int
    rates: dict[str, float] = field(default_factory=dict)
    """jobs/s by topology: ``1 server``, ``3-master cluster``."""
    held: int = 0
    held_per_master: list[int] = field(default_factory=list)
    ramp_seconds: float = 0.0
    status_seconds: float = 0.0
    status_rows: int = 0
    error: str = ""


def _throughput(kind: str, port: int, jobs: int) -> float:
    namespace = f"bench-masters-{uuid.uuid4().hex[:8]}"
    ids = [f"job-{n}" for n in range(jobs)]
    procs, pipes = spawn(
        child_main, [(kind, port, namespace, ids[i::PROCESSES]) for i in range(PROCESSES)]
    )
    try:
        for pipe in pipes:
            if not pipe.poll(REPLY_TIMEOUT) or pipe.recv() != "ready":
                raise RuntimeError(f"a {kind} process did not get ready")
        start = time.monotonic() + 0.2
        for pipe in pipes:
            pipe.send(start)
        ends = []
        for pipe in pipes:
            if not pipe.poll(REPLY_TIMEOUT + jobs / 20):
                raise RuntimeError(f"a {kind} process did not finish its jobs")
            ends.append(pipe.recv())
        return jobs / (max(ends) - start)
    finally:
        reap(procs, pipes)


def _held(cluster: Cluster, jobs: int, result: MastersRun) -> None:
    namespace = f"bench-held-{uuid.uuid4().hex[:8]}"
    ids = [f"job-{n}" for n in range(jobs)]
    client = cluster.client()
    port = cluster.masters[0].port
    start = time.monotonic()
    procs, pipes = spawn(  # scale's holding processes, on the cluster
        scale.child_main, [(port, namespace, ids[i::PROCESSES], True) for i in range(PROCESSES)]
    )
    try:
        deadline = start + REPLY_TIMEOUT + jobs / 50
        while int(client.get(f"bench:{namespace}:held") or 0) < jobs:
            if time.monotonic() > deadline:
                raise RuntimeError("not every job was taken on the cluster")
            time.sleep(0.05)
        result.held, result.ramp_seconds = jobs, time.monotonic() - start
        result.held_per_master = [
            sum(1 for i in ids if cluster.node_of(f"{{{i}}}").port == m.port)
            for m in cluster.masters
        ]
        url = "redis+cluster://" + ",".join(f"127.0.0.1:{m.port}" for m in cluster.masters)
        cli("--version", timeout=REPLY_TIMEOUT)  # the bytecode compiled, as installed
        started = time.monotonic()
        done = cli("status", "--namespace", namespace, "--redis", url, "--log-level", "warning",
                   timeout=REPLY_TIMEOUT)
        result.status_seconds = time.monotonic() - started
        result.status_rows = sum(1 for line in done.stdout.splitlines() if line.startswith("job "))
        for pipe in pipes:
            pipe.send("release")
        for pipe in pipes:
            pipe.poll(REPLY_TIMEOUT)
    finally:
        reap(procs, pipes)
        client.close()


def run(jobs: int, held: int) -> MastersRun:
    result = MastersRun(jobs)
    try:
        with RedisServer() as server:
            result.rates["1 server"] = _throughput("server", server.port, jobs)
        with Cluster(masters=MASTERS) as cluster:
            result.rates[f"{MASTERS}-master cluster"] = _throughput(
                "cluster", cluster.masters[0].port, jobs
            )
            _held(cluster, held, result)
    except Exception as exc:  # reported on the page, not lost
        result.error = f"{type(exc).__name__}: {exc}"[:300]
    return result
