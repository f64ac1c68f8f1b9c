"""Three streams through shared groups: a 3-master cluster against one server.

Three streams, each on its own master of a Redis Cluster (its hash tag chosen so), are
served by :data:`PER_STREAM` processes each, every process one member of its stream's
shared group (``serve(StreamSource(..., group=...), concurrency=16)``); then the same
three streams and processes against one server. jobs/s is all jobs over the time from
the start signal until every job has run. Server CPU is summed over the masters
(``INFO cpu``), the processes' CPU is their own (``time.process_time()``), so the
report can say where the time went on each topology.
"""

from __future__ import annotations

import math
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from benchmarks.stream_children import Setup
from benchmarks.stream_kit import Costs, Outcome, backlog
from benchmarks.stream_runner import Measured, run_fleet
from lockworker.testing import Cluster
from lockworker.testing.server import RedisServer

MASTERS = 3
PER_STREAM = 2
CONCURRENCY = 16
GROUP = "bench"
ONE = "1 server"
MANY = f"{MASTERS}-master cluster"


@dataclass
class Topology:
    name: str
    outcome: Outcome | None = None
    costs: Costs | None = None
    window: float = float("nan")
    per_master_cpu: list[float] = field(default_factory=list)
    error: str = ""

    @property
    def busy_cores(self) -> float:
        if self.costs is None or math.isnan(self.window):
            return float("nan")
        return (self.costs.client_cpu + self.costs.server_cpu) / self.window


@dataclass
class ClusterRun:
    jobs: int
    """Jobs per stream."""
    topologies: list[Topology] = field(default_factory=list)
    cores: int = os.cpu_count() or 0

    def get(self, name: str) -> Topology | None:
        return next((t for t in self.topologies if t.name == name), None)


def _streams_per_master(cluster: Cluster, base: str) -> list[str]:
    """One stream name per master: its hash tag (the name) hashes to that master."""
    chosen: dict[int, str] = {}
    n = 0
    while len(chosen) < MASTERS:
        name = f"{base}-{n}"
        chosen.setdefault(cluster.node_of(f"{{{name}}}").port, name)
        n += 1
    return list(chosen.values())


def _measure(topology: Topology, port: int, *, cluster: bool, streams: list[str],
             jobs: int, harness: Any, servers: list[Any], namespace: str) -> None:
    for stream in streams:
        backlog(harness, stream, jobs, prefix=f"{stream}-job")
    setups = [
        Setup("serve", port, namespace, stream, "member", CONCURRENCY, 10.0, GROUP, cluster)
        for stream in streams for _ in range(PER_STREAM)
    ]
    cpu_before = [_cpu(s) for s in servers]
    measured: Measured = run_fleet(setups, streams, jobs, harness, servers)
    topology.per_master_cpu = [_cpu(s) - b for s, b in zip(servers, cpu_before, strict=True)]
    if measured.timed_out:
        raise RuntimeError(f"{measured.outcome.distinct} of {len(streams) * jobs} jobs ran")
    topology.outcome, topology.costs = measured.outcome, measured.costs
    topology.window = measured.window


def _cpu(client: Any) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def run(jobs: int, unavailable: str = "") -> ClusterRun:
    result = ClusterRun(jobs)
    base = f"bench-cl-{uuid.uuid4().hex[:6]}"
    for name in (MANY, ONE):
        topology = Topology(name)
        result.topologies.append(topology)
        if unavailable:
            topology.error = unavailable
            continue
        try:
            if name == MANY:
                with Cluster(masters=MASTERS) as cluster:
                    streams = _streams_per_master(cluster, base)
                    harness = cluster.client()
                    servers = [m.client() for m in cluster.masters]
                    try:
                        _measure(topology, cluster.masters[0].port, cluster=True,
                                 streams=streams, jobs=jobs, harness=harness,
                                 servers=servers, namespace=base)
                    finally:
                        harness.close()
                        for s in servers:
                            s.close()
            else:
                with RedisServer() as server:
                    client = server.client()
                    try:
                        streams = [f"{base}-{n}" for n in range(MASTERS)]
                        _measure(topology, server.port, cluster=False, streams=streams,
                                 jobs=jobs, harness=client, servers=[client],
                                 namespace=base)
                    finally:
                        client.close()
        except Exception as exc:  # reported on the page, not lost
            topology.error = f"{type(exc).__name__}: {exc}"[:300]
    return result
