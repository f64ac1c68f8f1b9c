"""Memory while a large backlog is served: the server's, and the serving processes'.

``jobs`` jobs are backlogged in one stream, then a primary and two backups serve it
(``serve()``, concurrency 16, as in the jobs/s rows). The handler's log goes to
another server, so that the served server's ``used_memory`` holds only lockworker's
keys and the stream. Sampled every :data:`EVERY` s: jobs served, ``used_memory``,
and each serving process's resident memory (``VmRSS`` in ``/proc/<pid>/status``).
Afterwards the DONE records of a sample of jobs are measured with ``MEMORY USAGE``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import redis

from benchmarks.common import reap, spawn
from benchmarks.stream_children import REPLY_TIMEOUT, Setup, child_main
from benchmarks.stream_kit import backlog, log_key, unlink_matching
from lockworker.model.keys import JobKeys

EVERY = 0.25
FANOUT = ("primary", "backup", "backup")
DONE_TARGET = 100
"""Bytes of server memory a DONE record may cost (the finished-job window's target)."""
SAMPLED = 200


@dataclass
class Sample:
    at: float
    served: int
    used: int
    data: int = 0
    """``used_memory`` less the clients' buffers (``mem_clients_normal``)."""
    rss: dict[str, int] = field(default_factory=dict)
    """Resident bytes by role (``primary``, ``backup 1``, ``backup 2``)."""


@dataclass
class MemoryRun:
    jobs: int
    empty: int = 0
    empty_data: int = 0
    backlogged: int = 0
    after: int = 0
    samples: list[Sample] = field(default_factory=list)
    done_record: float = float("nan")
    """Mean ``MEMORY USAGE`` bytes of a DONE job's keys (state, its attempt history, and
    lease if any): what a finished job costs for its retention."""
    done_keys: str = ""
    done_value: float = float("nan")
    """Mean bytes of a DONE record's value (``STRLEN`` of its state key): the outcome,
    attempt, finish time, token and owner that latecomers and the views read."""
    done_floor: float = float("nan")
    """Mean ``MEMORY USAGE`` bytes of a bare key named like a DONE record's state key,
    with a one-byte value and the same time to live: the floor of one key per record
    on this server, whatever the value holds."""
    seconds: float = float("nan")
    error: str = ""

    def at(self, share: float) -> Sample | None:
        """The sample nearest to ``share`` of the jobs served."""
        if not self.samples:
            return None
        wanted = share * self.jobs
        return min(self.samples, key=lambda s: abs(s.served - wanted))

    def per_job(self, used: int) -> float:
        return (used - self.empty) / self.jobs if self.jobs else float("nan")

    def per_served(self, sample: Sample) -> float:
        """Server memory (clients' buffers left out) added per job served so far, over
        what the backlog held: flat when serving a job costs the same early and late."""
        grown = sample.data - self.empty_data - (self.backlogged - self.empty)
        return grown / sample.served if sample.served else float("nan")


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def _data(client: redis.Redis) -> int:
    memory = client.info("memory")
    return int(memory["used_memory"]) - int(memory.get("mem_clients_normal", 0))


def _done_record(client: redis.Redis, namespace: str, jobs: int, result: MemoryRun) -> None:
    sizes, kinds, floors, values = [], set(), [], []
    for n in range(0, jobs, max(1, jobs // SAMPLED)):
        keys = JobKeys.of(namespace, f"job-{n}")
        total = 0
        for kind, key in (("state", keys.state), ("history", keys.history), ("lease", keys.lock)):
            size = client.memory_usage(key, samples=0)
            if size is not None:
                total += int(size)
                kinds.add(kind)
        sizes.append(total)
        values.append(int(client.strlen(keys.state)))
        ttl = client.pttl(keys.state)
        bare = keys.state[: -len("state")] + "floor"  # the same length of name
        client.set(bare, "1", px=ttl if ttl and ttl > 0 else 3_600_000)
        floors.append(int(client.memory_usage(bare, samples=0) or 0))
        client.delete(bare)
    result.done_record = sum(sizes) / len(sizes) if sizes else float("nan")
    result.done_floor = sum(floors) / len(floors) if floors else float("nan")
    result.done_keys = " + ".join(sorted(kinds))
    result.done_value = sum(values) / len(values) if values else float("nan")


def _forget(client: redis.Redis, namespace: str) -> None:
    """Remove the run's job keys (the following sections measure memory too)."""
    unlink_matching(client, JobKeys.of(namespace, "x").base.split("{", 1)[0] + "*")


def run(port: int, client: redis.Redis, jobs: int, record_port: int) -> MemoryRun:
    result = MemoryRun(jobs)
    namespace = f"bench-memory-{uuid.uuid4().hex[:8]}"
    record = redis.Redis(port=record_port, socket_timeout=REPLY_TIMEOUT)
    try:
        result.empty, result.empty_data = _used(client), _data(client)
        backlog(client, namespace, jobs)
        result.backlogged = _used(client)
        setups = [
            Setup("serve", port, namespace, namespace, role, 16, 10.0, record_port=record_port)
            for role in FANOUT
        ]
        _serve(setups, client, record, result)
        _done_record(client, namespace, jobs, result)
        _forget(client, namespace)
    except Exception as exc:  # reported on the page, not lost
        result.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        record.delete(log_key(namespace))
        record.close()
    return result


def _serve(setups: list[Setup], client: redis.Redis, record: redis.Redis,
           result: MemoryRun) -> None:
    procs, pipes = spawn(child_main, [(setup,) for setup in setups])
    names = ["primary", "backup 1", "backup 2"]
    log = log_key(setups[0].stream)
    try:
        for pipe in pipes:
            if not pipe.poll(REPLY_TIMEOUT) or pipe.recv() != "ready":
                raise RuntimeError("a serving process did not get ready")
        start = time.monotonic()
        for pipe in pipes:
            pipe.send("go")
        deadline = start + REPLY_TIMEOUT + result.jobs / 20
        while True:
            served = int(record.llen(log))
            pids = [proc.pid or 0 for proc in procs]
            result.samples.append(Sample(
                time.monotonic() - start, served, _used(client),
                _data(client), {name: _rss(pid) for name, pid in zip(names, pids, strict=True)},
            ))
            if served >= result.jobs:
                result.seconds = time.monotonic() - start
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{served} of {result.jobs} jobs served in time")
            time.sleep(EVERY)
        for pipe in pipes:
            pipe.send("stop")
        for pipe in pipes:
            pipe.poll(REPLY_TIMEOUT) and pipe.recv()
    finally:
        reap(procs, pipes)
    result.after = _used(client)
