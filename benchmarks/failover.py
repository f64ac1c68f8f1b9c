"""Handover and takeover between real OS processes.

Two measurements, each with lockworker and peers, against the same server:

- **handover after a failed attempt**: a holder process's ``on_acquired`` raises while a
  backup process waits for the same job; latency = from the raise to the start of the
  backup's ``on_acquired``. The peers' equivalent: the holder releases the lock while a
  waiter blocks in ``acquire``; latency = from the release call to ``acquire`` returning.
- **takeover after SIGKILL**: a holder renews a short lease (lockworker: the worker's
  own heartbeat) and is killed; latency = from the kill to the waiter's start.
  "beyond lease" subtracts the lease time the server still showed (PTTL) just before
  the kill: what the waiter's waiting strategy costs on top of the lease itself.

Both processes read ``time.monotonic()``, which on Linux is one system-wide clock, so
times taken in different processes can be subtracted. Processes are started with the
``spawn`` method, so each has its own interpreter and connections.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as EventType
from typing import Any

import redis

import lockworker
from benchmarks.common import median, processes, quiet_logging
from lockworker.model.keys import JobKeys

SETTLE = 0.05
"""Seconds the holder lets pass after the waiter reported it is waiting, so that the
waiter is blocked (subscribed, BLPOP-ing, sleeping) when the handover starts."""

HANDOVER_LEASE = 5.0
"""Seconds: the lease in the handover trials (long enough never to expire in them)."""

HOLD_LIMIT = 60.0
"""Seconds a takeover holder holds at most if nobody kills it (keeps every run bounded)."""

REPLY_TIMEOUT = 30.0
"""Seconds to wait for any child's reply before declaring the trial broken."""

KINDS = ("lockworker", "python-redis-lock", "redis-py Lock")
NEEDS = {"python-redis-lock": "redis_lock"}
"""The optional peers' modules; a peer that is not installed is left out."""


class PlannedFailure(Exception):
    """The failure the handover holder raises on purpose."""


def _recv(pipe: Connection, timeout: float = REPLY_TIMEOUT) -> Any:
    if not pipe.poll(timeout):
        raise RuntimeError(f"no reply from a benchmark process within {timeout}s")
    return pipe.recv()


def _peer_key(kind: str, name: str) -> str:
    """The Redis key a peer lock stores its lease under."""
    return f"lock:{name}" if kind == "python-redis-lock" else name


def _peer_lock(client: redis.Redis, kind: str, name: str, lease: float, *, renew: bool) -> Any:
    if kind == "python-redis-lock":
        import redis_lock

        return redis_lock.Lock(client, name, expire=max(1, round(lease)), auto_renewal=renew)
    return client.lock(name, timeout=lease, thread_local=False)


# -- child processes ------------------------------------------------------------------


class _BenchWorker(lockworker.Worker):
    """A worker whose hooks report to the benchmark: ``plan`` says what to do."""

    plan = "record"
    started = 0.0
    pipe: Connection
    waiting: EventType

    def on_acquired(self, job: lockworker.Job) -> None:
        if self.plan == "fail":
            self.pipe.send(("acquired", time.monotonic()))
            self.waiting.wait(REPLY_TIMEOUT)
            time.sleep(SETTLE)
            self.started = time.monotonic()
            raise PlannedFailure("the handover benchmark's planned failure")
        if self.plan == "hold":
            self.pipe.send(("acquired", time.monotonic()))
            time.sleep(HOLD_LIMIT)  # the heartbeat renews the lease meanwhile
            return
        self.started = time.monotonic()

    def on_locked(self, job: lockworker.Job) -> None:
        if self.plan == "record":
            self.waiting.set()


class _Child:
    """The command loop of a long-lived benchmark process (see :func:`child_main`)."""

    def __init__(
        self, port: int, namespace: str, pipe: Connection, waiting: EventType
    ) -> None:
        self.client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=REPLY_TIMEOUT)
        self.namespace = namespace
        self.pipe = pipe
        self.waiting = waiting
        self.workers: dict[float, _BenchWorker] = {}

    def worker(self, lease: float, plan: str) -> _BenchWorker:
        worker = self.workers.get(lease)
        if worker is None:
            worker = _BenchWorker(
                self.client, namespace=self.namespace, lock_timeout=lease, max_attempts=5,
                retention=600.0, handle_signals=False,
            )
            worker.pipe, worker.waiting = self.pipe, self.waiting
            self.workers[lease] = worker
        worker.plan = plan
        worker.started = 0.0
        return worker

    def lockworker_job(self, job_id: str, lease: float, plan: str) -> tuple[Any, ...]:
        worker = self.worker(lease, plan)
        outcome = worker.process(job_id)
        snapshot = worker.inspect(job_id)
        return ("done", worker.started, outcome.value, snapshot.attempt, snapshot.token)

    def peer_hold(self, kind: str, name: str, lease: float) -> tuple[Any, ...]:
        lock = _peer_lock(self.client, kind, name, lease, renew=False)
        lock.acquire()
        self.pipe.send(("acquired", time.monotonic()))
        self.waiting.wait(REPLY_TIMEOUT)
        time.sleep(SETTLE)
        started = time.monotonic()
        lock.release()
        return ("done", started, "released", 0, 0)

    def peer_wait(self, kind: str, name: str, lease: float) -> tuple[Any, ...]:
        lock = _peer_lock(self.client, kind, name, lease, renew=False)
        self.waiting.set()
        lock.acquire()
        started = time.monotonic()
        lock.release()
        return ("done", started, "acquired", 0, 0)

    def serve(self) -> None:
        while True:
            message = self.pipe.recv()
            if message is None:
                return
            op, kind, name, lease = message
            if kind == "lockworker":
                reply = self.lockworker_job(name, lease, "fail" if op == "hold" else "record")
            elif op == "hold":
                reply = self.peer_hold(kind, name, lease)
            else:
                reply = self.peer_wait(kind, name, lease)
            self.pipe.send(reply)

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()
        self.client.close()


def child_main(port: int, namespace: str, pipe: Connection, waiting: EventType) -> None:
    """A long-lived process: runs ``(op, kind, name, lease)`` commands until ``None``."""
    quiet_logging(to_devnull=True)
    child = _Child(port, namespace, pipe, waiting)
    try:
        child.serve()
    finally:
        child.close()


def holder_main(
    pipe: Connection, *, port: int, namespace: str, kind: str, name: str, lease: float
) -> None:
    """A takeover holder: acquire, renew, report, and hold until killed (or HOLD_LIMIT)."""
    quiet_logging(to_devnull=True)
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=REPLY_TIMEOUT)
    if kind == "lockworker":
        worker = _BenchWorker(
            client, namespace=namespace, lock_timeout=lease, max_attempts=5, retention=600.0,
            handle_signals=False,
        )
        worker.pipe, worker.plan = pipe, "hold"
        worker.process(name)
        return
    lock = _peer_lock(client, kind, name, lease, renew=kind == "python-redis-lock")
    lock.acquire()
    stop = threading.Event()
    if kind == "redis-py Lock":
        # redis-py's Lock has no renewal of its own: renew every third of the lease.
        def renew() -> None:
            while not stop.wait(lease / 3):
                lock.reacquire()

        threading.Thread(target=renew, daemon=True).start()
    pipe.send(("acquired", time.monotonic()))
    stop.wait(HOLD_LIMIT)


# -- the measurements -------------------------------------------------------------------


@dataclass
class Handover:
    kind: str
    waits_by: str
    latencies: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return median(self.latencies)


@dataclass
class Takeover:
    kind: str
    renews: str
    waits_by: str
    latencies: list[float] = field(default_factory=list)
    beyond: list[float] = field(default_factory=list)
    early: int = 0
    """Trials in which the waiter started before the holder was killed (must stay 0)."""


WAITS_BY = {
    "lockworker": "pub/sub wake-up; own timer to the lease's end (PTTL)",
    "python-redis-lock": "BLPOP on a signal list, timeout = expire",
    "redis-py Lock": "polls, sleep 0.1 s (default)",
}

RENEWS = {
    "lockworker": "its heartbeat, every lease/3",
    "python-redis-lock": "auto_renewal, every 2/3 expire",
    "redis-py Lock": "a thread calling reacquire(), every lease/3",
}


class Pair:
    """Two long-lived child processes, ``a`` and ``b``, sharing one ``waiting`` event."""

    def __init__(self, port: int, namespace: str) -> None:
        ctx = processes()
        self.ctx = ctx
        self.port = port
        self.namespace = namespace
        self.waiting = ctx.Event()
        self.pipes: list[Connection] = []
        self.procs: list[BaseProcess] = []
        for _ in range(2):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=child_main, args=(port, namespace, theirs, self.waiting), daemon=True
            )
            proc.start()
            theirs.close()
            self.pipes.append(ours)
            self.procs.append(proc)

    @property
    def a(self) -> Connection:
        return self.pipes[0]

    @property
    def b(self) -> Connection:
        return self.pipes[1]

    def close(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send(None)
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()


def handover_trial(pair: Pair, result: Handover) -> None:
    """One handover from a failing (or releasing) holder ``a`` to a waiter ``b``."""
    kind = result.kind
    name = f"handover-{uuid.uuid4().hex[:10]}"
    pair.waiting.clear()
    pair.a.send(("hold", kind, name, HANDOVER_LEASE))
    if _recv(pair.a)[0] != "acquired":
        raise RuntimeError("the handover holder did not acquire")
    pair.b.send(("wait", kind, name, HANDOVER_LEASE))
    _, raised_at, *_ = _recv(pair.a)
    _, started_at, outcome, attempt, _token = _recv(pair.b)
    if kind == "lockworker" and (outcome != "done" or attempt != 2):
        raise RuntimeError(f"backup ended {outcome} at attempt {attempt}, expected done at 2")
    result.latencies.append(started_at - raised_at)


def takeover_trial(
    pair: Pair, client: redis.Redis, result: Takeover, lease: float, rng: random.Random
) -> None:
    """One takeover by waiter ``b`` after SIGKILL of a fresh holder process.

    The waiter arrives at a random point of the lease, and the kill comes at a random
    phase of the holder's renewals, as in the peers' baselines.
    """
    kind, namespace = result.kind, pair.namespace
    name = f"takeover-{uuid.uuid4().hex[:10]}"
    key = JobKeys.of(namespace, name).lock if kind == "lockworker" else _peer_key(kind, name)
    ours, theirs = pair.ctx.Pipe()
    holder = pair.ctx.Process(
        target=holder_main,
        args=(theirs,),
        kwargs={"port": pair.port, "namespace": namespace, "kind": kind, "name": name,
                "lease": lease},
        daemon=True,
    )
    holder.start()
    theirs.close()
    try:
        if _recv(ours)[0] != "acquired":
            raise RuntimeError("the takeover holder did not acquire")
        time.sleep(rng.uniform(0, lease))  # the waiter arrives at a random point
        pair.waiting.clear()
        pair.b.send(("wait", kind, name, lease))
        if not pair.waiting.wait(REPLY_TIMEOUT):
            raise RuntimeError("the takeover waiter never started waiting")
        time.sleep(rng.uniform(0, lease / 3))  # a random phase of the renewals
        pttl = client.pttl(key)
        killed_at = time.monotonic()
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)
        _, started_at, outcome, attempt, _token = _recv(pair.b, REPLY_TIMEOUT + 3 * lease)
    finally:
        if holder.is_alive():
            holder.kill()
        holder.join()
        ours.close()
    if kind == "lockworker" and (outcome != "done" or attempt != 2):
        raise RuntimeError(f"waiter ended {outcome} at attempt {attempt}, expected done at 2")
    if pttl < 0:
        raise RuntimeError(f"the holder's lease had no TTL before the kill ({pttl})")
    latency = started_at - killed_at
    if latency < 0:
        result.early += 1
    result.latencies.append(latency)
    result.beyond.append(latency - pttl / 1000.0)
