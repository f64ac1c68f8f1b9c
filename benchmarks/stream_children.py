"""The serving processes of the stream section: lockworker's and plain consumer groups'.

One process per :class:`Setup`. It connects, says ``ready``, waits for ``go``, serves
until the parent says ``stop`` (or kills it), and answers ``stop`` with what it
counted since ``go`` (round trips, commands sent by name, CPU seconds, the handler's
time). Kinds:

- ``serve``: ``lockworker.Worker.serve(StreamSource(...), concurrency=c)``; with
  ``group`` the source is the shared consumer group's (``group=``), without it every
  process reads every entry (fan-out);
- ``aio``: the same with ``lockworker.aio.Worker``;
- ``pool``: the consumer group's reads, each handler in a pool of ``concurrency``
  threads and nothing else: what serving in threads costs before any protocol;
- ``cg``: plain redis-py on a Redis Streams consumer group. ``primary``: XREADGROUP
  COUNT 100, the handler for each entry in turn, one XACK per batch. ``backup``: every
  :data:`POLL` s one request of XAUTOCLAIM (entries idle longer than the lease) and
  XINFO CONSUMERS; once the primary has been idle longer than the lease it reads new
  entries too. ``member``: reads like the primary, and XAUTOCLAIMs entries idle longer
  than the lease every :data:`POLL` s (and whenever a read comes back empty).
- ``keys``: the floor of any protocol that keeps a lease and a state key per job, in
  plain redis-py (:func:`_keys`): no attempt count, history, fencing, wake-up or
  takeover, only what every such protocol must write.
"""

from __future__ import annotations

import asyncio
import os
import resource
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import redis
import redis.asyncio
from redis.cluster import RedisCluster

import lockworker
import lockworker.aio
from benchmarks.common import quiet_logging
from benchmarks.stream_kit import (
    AioTallyConnection,
    Tally,
    TallyConnection,
    entries_key,
    log_key,
)

BATCH = 100
POLL = 0.1
"""Seconds between a consumer group's XAUTOCLAIM checks."""
BACKUP_DELAY = 0.5
REPLY_TIMEOUT = 60.0


@dataclass(frozen=True)
class Setup:
    kind: str
    """``serve``, ``aio``, ``pool`` or ``cg``."""
    port: int
    namespace: str
    stream: str
    role: str
    """``primary``/``backup`` (fan-out and ``cg``), ``member`` (a shared group)."""
    concurrency: int = 16
    lease: float = 10.0
    group: str | None = None
    cluster: bool = False
    record_port: int | None = None
    """Where the handler's log goes (``serve`` only; default: the served server)."""


def _client(setup: Setup) -> Any:
    if setup.cluster:
        cluster = RedisCluster(host="127.0.0.1", port=setup.port, socket_timeout=REPLY_TIMEOUT)
        for node in cluster.get_nodes():  # RedisCluster takes no connection_class
            pool = node.redis_connection.connection_pool
            pool.connection_class = TallyConnection
            pool.reset()  # the connections made so far (uncounted) are dropped
        return cluster
    pool = redis.ConnectionPool(
        host="127.0.0.1", port=setup.port, socket_timeout=REPLY_TIMEOUT,
        connection_class=TallyConnection,
    )
    return redis.Redis(connection_pool=pool)


def _switches() -> int:
    """The times this process's threads gave up the CPU to wait (voluntary context
    switches): for a reply, for another of its threads, or for the interpreter lock."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


class Child:
    """What every kind shares: the handler, the counts, the ``stop`` listener."""

    def __init__(self, setup: Setup, pipe: Connection) -> None:
        self.setup, self.pipe = setup, pipe
        self.owner = f"{setup.role}-{os.getpid()}"
        self.log = log_key(setup.stream)
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.handled, self.handler_seconds, self.cpu = 0, 0.0, 0.0
        self.switches = 0

    def handled_one(self, started: float) -> None:
        spent = time.monotonic() - started
        with self.lock:
            self.handled += 1
            self.handler_seconds += spent

    def record(self, client: Any, job: str) -> None:
        """The handler: one round trip that records who ran ``job``, and when."""
        started = time.monotonic()
        client.rpush(self.log, f"{job} {started:.6f} {self.owner}")
        self.handled_one(started)

    def go(self, on_stop: Any) -> None:
        """Say ready, wait for go, start counting, and listen for stop."""
        self.pipe.send("ready")
        self.pipe.recv()
        Tally.reset()
        self.cpu = time.process_time()
        self.switches = _switches()

        def listen() -> None:
            self.pipe.recv()
            trips, sent = Tally.snapshot()
            with self.lock:
                mean = self.handler_seconds / self.handled if self.handled else 0.0
            self.pipe.send({
                "round_trips": trips, "sent": sent, "handled": self.handled,
                "cpu": time.process_time() - self.cpu, "handler_seconds": mean,
                "switches": _switches() - self.switches,
            })
            self.stopped.set()
            on_stop()

        threading.Thread(target=listen, daemon=True).start()


def _serve(setup: Setup, pipe: Connection) -> None:
    child = Child(setup, pipe)
    client = _client(setup)
    record = client if setup.record_port is None else redis.Redis(port=setup.record_port)

    def on_acquired(job: lockworker.Job) -> None:
        started = time.monotonic()
        record.rpush(child.log, f"{job.id} {started:.6f} {child.owner}")
        child.handled_one(started)

    worker = lockworker.Worker(
        client, namespace=setup.namespace, lock_timeout=setup.lease, retention=600.0,
        owner=child.owner, role="backup" if setup.role == "backup" else "primary",
        backup_delay=BACKUP_DELAY, on_acquired=on_acquired,
    )
    extra = {} if setup.group is None else {"group": setup.group}
    source = lockworker.StreamSource(client, setup.stream, owner=child.owner, **extra)
    client.ping()
    child.go(worker.stop)
    try:
        worker.serve(source, concurrency=setup.concurrency)
    finally:
        worker.close()
        client.close()


async def _aio_serve(setup: Setup, pipe: Connection) -> None:
    child = Child(setup, pipe)
    pool = redis.asyncio.ConnectionPool(
        host="127.0.0.1", port=setup.port, socket_timeout=REPLY_TIMEOUT,
        connection_class=AioTallyConnection,
    )
    client = redis.asyncio.Redis(connection_pool=pool)
    reader = _client(setup)

    async def on_acquired(job: lockworker.Job) -> None:
        started = time.monotonic()
        await client.rpush(child.log, f"{job.id} {started:.6f} {child.owner}")
        child.handled_one(started)

    worker = lockworker.aio.Worker(
        client, namespace=setup.namespace, lock_timeout=setup.lease, retention=600.0,
        owner=child.owner, role="backup" if setup.role == "backup" else "primary",
        backup_delay=BACKUP_DELAY, on_acquired=on_acquired,
    )
    extra = {} if setup.group is None else {"group": setup.group}
    source = lockworker.StreamSource(reader, setup.stream, owner=child.owner, **extra)
    await client.ping()
    await asyncio.to_thread(child.go, worker.stop)
    try:
        await worker.serve(source, concurrency=setup.concurrency)
    finally:
        await worker.close()
        await client.aclose()
        reader.close()


def _consumer_group(setup: Setup, pipe: Connection) -> None:
    child = Child(setup, pipe)
    client = _client(setup)
    key, group, lease_ms = entries_key(setup.stream), setup.group or "", int(setup.lease * 1000)

    def handle(entries: list[Any]) -> None:
        if not entries:
            return
        for _id, fields in entries:
            child.record(client, fields[b"job_id"].decode())
        client.xack(key, group, *[entry_id for entry_id, _ in entries])

    def read() -> list[Any]:
        got = client.xreadgroup(group, child.owner, {key: ">"}, count=BATCH, block=100)
        return list(got[0][1]) if got else []

    def claim() -> list[Any]:
        got = client.xautoclaim(key, group, child.owner, lease_ms, "0-0", count=BATCH)
        return list(got[1])

    if setup.role == "primary":  # known to the group, idle from now, before any read
        client.xgroup_createconsumer(key, group, child.owner)
    child.go(lambda: None)
    reading = setup.role != "backup"
    last_claim = time.monotonic()
    while not child.stopped.is_set():
        if setup.role == "backup":
            check = client.pipeline(transaction=False)
            check.xautoclaim(key, group, child.owner, lease_ms, "0-0", count=BATCH)
            check.xinfo_consumers(key, group)
            claimed, consumers = check.execute()
            handle(list(claimed[1]))
            primary = [c for c in consumers if _text(c["name"]).startswith("primary")]
            if not primary or all(int(c["idle"]) > lease_ms for c in primary):
                reading = True  # the primary is gone: read new entries too
            if reading:
                handle(read())
            elif not claimed[1]:
                time.sleep(POLL)
            continue
        got = read()
        handle(got)
        if not got or time.monotonic() - last_claim >= POLL:
            handle(claim())
            last_claim = time.monotonic()
    client.close()


def _pool(setup: Setup, pipe: Connection) -> None:
    """The ceiling of serving handlers in threads: the consumer group's reads (XREADGROUP
    COUNT 100), each entry's handler in a pool of ``concurrency`` threads, one XACK per
    batch once its handlers ran; no lease, no attempt, nothing else."""
    child = Child(setup, pipe)
    client = _client(setup)
    key, group = entries_key(setup.stream), setup.group or ""
    pool = ThreadPoolExecutor(setup.concurrency)
    free = threading.Semaphore(setup.concurrency)

    def one(job: str) -> None:
        try:
            child.record(client, job)
        finally:
            free.release()

    client.xgroup_createconsumer(key, group, child.owner)
    child.go(lambda: None)
    while not child.stopped.is_set():
        got = client.xreadgroup(group, child.owner, {key: ">"}, count=BATCH, block=100)
        entries = list(got[0][1]) if got else []
        running = []
        for _id, fields in entries:
            free.acquire()
            running.append(pool.submit(one, fields[b"job_id"].decode()))
        for future in running:
            future.result()
        if entries:
            client.xack(key, group, *[entry_id for entry_id, _ in entries])
    pool.shutdown()
    client.close()


async def _aio_pool(setup: Setup, pipe: Connection) -> None:
    """The ceiling of serving handlers in asyncio tasks, as :func:`_pool` is in threads:
    the consumer group's reads (XREADGROUP COUNT 100) on the loop, each entry's handler
    a task (at most ``concurrency`` at once) on a ``redis.asyncio`` client, one XACK per
    batch once its handlers ran; no lease, no attempt, nothing else."""
    child = Child(setup, pipe)
    pool = redis.asyncio.ConnectionPool(
        host="127.0.0.1", port=setup.port, socket_timeout=REPLY_TIMEOUT,
        connection_class=AioTallyConnection,
    )
    client = redis.asyncio.Redis(connection_pool=pool)
    key, group = entries_key(setup.stream), setup.group or ""
    free = asyncio.Semaphore(setup.concurrency)

    async def one(job: str) -> None:
        try:
            started = time.monotonic()
            await client.rpush(child.log, f"{job} {started:.6f} {child.owner}")
            child.handled_one(started)
        finally:
            free.release()

    await client.xgroup_createconsumer(key, group, child.owner)
    await asyncio.to_thread(child.go, lambda: None)
    while not child.stopped.is_set():
        got = await client.xreadgroup(group, child.owner, {key: ">"}, count=BATCH, block=100)
        entries = list(got[0][1]) if got else []
        running = []
        for _id, fields in entries:
            await free.acquire()
            running.append(asyncio.ensure_future(one(fields[b"job_id"].decode())))
        await asyncio.gather(*running)
        if entries:
            await client.xack(key, group, *[entry_id for entry_id, _ in entries])
    await client.aclose()


# The floor's steps (:func:`_keys`). KEYS: each job's lease and state keys, in turn.
# CLAIM: a lease for each job not DONE and not leased; ARGV[1] holder, ARGV[2] lease ms,
# ARGV[3] retention ms; returns 1 (granted) or 0 for each job.
_CLAIM = """
local out = {}
for i = 1, #KEYS / 2 do
  local st = redis.call('GET', KEYS[2 * i])
  out[i] = 0
  if not (st and string.sub(st, 1, 5) == 'done|')
      and redis.call('SET', KEYS[2 * i - 1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    redis.call('SET', KEYS[2 * i], 'pending|' .. ARGV[1], 'PX', ARGV[3])
    out[i] = 1
  end
end
return out
"""
# DONE: each job whose lease the holder ARGV[1] still has is DONE (ARGV[2] retention ms).
_DONE = """
for i = 1, #KEYS / 2 do
  if redis.call('GET', KEYS[2 * i - 1]) == ARGV[1] then
    redis.call('SET', KEYS[2 * i], 'done|' .. ARGV[1], 'PX', ARGV[2])
    redis.call('DEL', KEYS[2 * i - 1])
  end
end
return 1
"""
# LOOK: how many of the jobs whose state keys are KEYS are not DONE yet.
_LOOK = """
local left = 0
for i = 1, #KEYS do
  local st = redis.call('GET', KEYS[i])
  if not (st and string.sub(st, 1, 5) == 'done|') then left = left + 1 end
end
return left
"""
FLOOR = "keys"
"""The floor's kind (:func:`_keys`)."""
FLOOR_CLAIMS = 16
"""Jobs the floor claims per script (as many as lockworker's serving thread claims)."""
FLOOR_LOOK = 0.002
"""Seconds a floor backup waits before it looks again at jobs not DONE yet."""


def floor_prefix(stream: str) -> str:
    """The prefix of the floor's keys for ``stream`` (the run deletes them after it)."""
    return f"{stream}:floor:"


def _keys(setup: Setup, pipe: Connection) -> None:
    """The floor of a protocol that keeps a lease and a state key per job: what any
    such protocol must cost here, with nothing of lockworker's own. Fan-out: the
    primary reads every entry (XREAD COUNT 100), claims 16 at a time in one script
    (GET state, SET lease NX PX, SET state), runs their handlers in turn and marks
    them DONE in one script (GET lease, SET state, DEL lease); each backup reads every
    entry too and looks at each 16 in one script (GET state), again every
    :data:`FLOOR_LOOK` s while one is not DONE. Through a group (``setup.group``):
    every process reads with XREADGROUP and claims as the primary does, one XACK per
    batch. No attempt count, history, fencing token, wake-up or takeover: a process
    killed here leaves its jobs leased for good, so this kind has no SIGKILL run."""
    child = Child(setup, pipe)
    client = _client(setup)
    claim, done, look = (client.register_script(s) for s in (_CLAIM, _DONE, _LOOK))
    key, group, lease_ms = entries_key(setup.stream), setup.group, int(setup.lease * 1000)
    retention_ms = 600_000
    prefix = floor_prefix(setup.stream)

    def names(job: str) -> tuple[str, str]:
        return f"{prefix}lease:{job}", f"{prefix}state:{job}"

    def serve(jobs: list[str]) -> None:
        for at in range(0, len(jobs), FLOOR_CLAIMS):
            chunk = jobs[at:at + FLOOR_CLAIMS]
            keys = [k for job in chunk for k in names(job)]
            granted = claim(keys=keys, args=[child.owner, lease_ms, retention_ms])
            mine = [job for job, ok in zip(chunk, granted, strict=True) if ok]
            for job in mine:
                child.record(client, job)
            if mine:
                done(keys=[k for job in mine for k in names(job)],
                     args=[child.owner, retention_ms])

    def watch(jobs: list[str]) -> None:
        for at in range(0, len(jobs), FLOOR_CLAIMS):
            states = [names(job)[1] for job in jobs[at:at + FLOOR_CLAIMS]]
            while look(keys=states) and not child.stopped.is_set():
                child.stopped.wait(FLOOR_LOOK)

    child.go(lambda: None)
    last = "0-0"
    while not child.stopped.is_set():
        if group is not None:
            got = client.xreadgroup(group, child.owner, {key: ">"}, count=BATCH, block=100)
        else:
            got = client.xread({key: last}, count=BATCH, block=100)
        entries = list(got[0][1]) if got else []
        if not entries:
            continue
        jobs = [fields[b"job_id"].decode() for _id, fields in entries]
        if group is None and setup.role == "backup":
            watch(jobs)
        else:
            serve(jobs)
        if group is not None:
            client.xack(key, group, *[entry_id for entry_id, _ in entries])
        last = entries[-1][0]
    client.close()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def child_main(setup: Setup, pipe: Connection) -> None:
    quiet_logging(to_devnull=True)
    if setup.kind == "aio":
        asyncio.run(_aio_serve(setup, pipe))
    elif setup.kind == "cg":
        _consumer_group(setup, pipe)
    elif setup.kind == "pool":
        _pool(setup, pipe)
    elif setup.kind == "aiopool":
        asyncio.run(_aio_pool(setup, pipe))
    elif setup.kind == FLOOR:
        _keys(setup, pipe)
    else:
        _serve(setup, pipe)
