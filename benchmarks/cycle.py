"""Uncontended cycles: one client, one lock (or job) after another, no competition.

lockworker's job cycle is ``Worker.process(new_job_id)`` with an empty ``on_acquired``:
acquire the first attempt, run the hook, mark the job DONE. Its primitives' cycle, and
the peers', is acquire + release of one lock (or permit), compute_once's one call
(:mod:`benchmarks.once_cycle`); each asyncio contender (:mod:`benchmarks.aio_cycle`)
runs its sync twin's cycle awaited on a ``redis.asyncio`` client, in the row below it.
Every contender runs for the same time in each round, the rounds interleave the
contenders (in a rotating order) against the same servers, and each figure is the
median over the rounds. The Redlock contenders use three masters (the run's server and
two more); the others use one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

import lockworker
from benchmarks import aio_cycle, once_cycle
from benchmarks.common import (
    CountingConnection,
    command_calls,
    counting_client,
    installed,
    median,
    server_cpu,
)
from lockworker.model.codec import LockValue
from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant, Settle, Snapshot
from lockworker.testing.server import RedisServer

LEASE = 10.0
"""Seconds: the lease every contender asks for (as in the peers' baselines)."""

Cycle = Callable[[], None]
Factory = Callable[[list[redis.Redis]], tuple[Cycle, Callable[[], None]]]
Spin = Callable[[float], tuple[int, float]]
"""Run cycles for about the given seconds: how many ran, in how many seconds."""


@dataclass
class CycleResult:
    name: str
    what: str
    rates: list[float] = field(default_factory=list)
    cycles: int = 0
    writes: int = 0
    commands: int = 0
    client_cpu: float = 0.0
    server_cpu: float = 0.0

    @property
    def rate(self) -> float:
        return median(self.rates)

    @property
    def round_trips(self) -> float:
        return self.writes / self.cycles if self.cycles else float("nan")

    @property
    def server_commands(self) -> float:
        return self.commands / self.cycles if self.cycles else float("nan")

    @property
    def client_us(self) -> float:
        """CPU microseconds the benchmark process spent per job (all its threads)."""
        return self.client_cpu / self.cycles * 1e6 if self.cycles else float("nan")

    @property
    def server_us(self) -> float:
        """CPU microseconds the server spent per job."""
        return self.server_cpu / self.cycles * 1e6 if self.cycles else float("nan")


def _empty(_job: lockworker.Job) -> None:
    """The empty ``on_acquired``: the cycle measures lockworker, not the work."""


def lockworker_cycle(
    clients: list[redis.Redis], protocol: str
) -> tuple[Cycle, Callable[[], None]]:
    client = clients[0]
    worker = lockworker.Worker(
        client,
        namespace=f"bench-{protocol}-{uuid.uuid4().hex[:8]}",
        lock_timeout=LEASE,
        retention=60.0,
        protocol=protocol,
        handle_signals=False,
        on_acquired=_empty,
    )
    counter = iter(range(1 << 62))

    def cycle() -> None:
        outcome = worker.process(f"job-{next(counter)}")
        if outcome is not lockworker.Outcome.DONE:
            raise RuntimeError(f"uncontended job ended {outcome!r}, expected DONE")

    return cycle, worker.close


def lock_cycle(clients: list[redis.Redis]) -> tuple[Cycle, Callable[[], None]]:
    lock = lockworker.Lock(clients[0], f"bench-{uuid.uuid4().hex[:8]}", ttl=LEASE)

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle, lock.close


def semaphore_cycle(clients: list[redis.Redis]) -> tuple[Cycle, Callable[[], None]]:
    semaphore = lockworker.Semaphore(
        clients[0], f"bench-{uuid.uuid4().hex[:8]}", aio_cycle.LIMIT, ttl=LEASE
    )

    def cycle() -> None:
        semaphore.acquire()
        semaphore.release()

    return cycle, semaphore.close


def redlock_cycle(clients: list[redis.Redis]) -> tuple[Cycle, Callable[[], None]]:
    lock = lockworker.Redlock(clients, f"bench-{uuid.uuid4().hex[:8]}", ttl=LEASE)

    def cycle() -> None:
        if not lock.acquire():
            raise RuntimeError("an uncontended Redlock was refused")
        lock.release()

    return cycle, lock.close


def pottery3_cycle(clients: list[redis.Redis]) -> tuple[Cycle, Callable[[], None]]:
    from pottery import Redlock

    lock = Redlock(key="bench:pottery-3", masters=set(clients), auto_release_time=LEASE)

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle, lambda: None


def redis_py_cycle(clients: list[redis.Redis]) -> tuple[Cycle, Callable[[], None]]:
    client = clients[0]
    lock = client.lock("bench:redis-py", timeout=LEASE, thread_local=False)

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle, lambda: None


def python_redis_lock_cycle(clients: list[redis.Redis]) -> tuple[Cycle, Callable[[], None]]:
    import redis_lock

    lock = redis_lock.Lock(clients[0], "bench:python-redis-lock", expire=int(LEASE))

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle, lambda: None


def pottery_cycle(clients: list[redis.Redis]) -> tuple[Cycle, Callable[[], None]]:
    from pottery import Redlock

    lock = Redlock(key="bench:pottery", masters={clients[0]}, auto_release_time=LEASE)

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle, lambda: None


CONTENDERS: tuple[tuple[str, str, Factory | aio_cycle.AsyncFactory, str | None], ...] = (
    ("lockworker Lock", "acquire + release (one object, reused)", lock_cycle, None),
    (
        "lockworker aio.Lock",
        "await acquire + release on redis.asyncio (one object, reused)",
        aio_cycle.AIO_LOCK,
        None,
    ),
    (
        "lockworker Semaphore",
        "acquire + release of a permit, limit=2 (auto_renew, the default)",
        semaphore_cycle,
        None,
    ),
    (
        "lockworker aio.Semaphore",
        "await acquire + release of a permit on redis.asyncio, limit=2 (auto_renew)",
        aio_cycle.AIO_SEMAPHORE,
        None,
    ),
    (
        "lockworker compute_once (hit)",
        "compute_once of a cached key: one GET, the value decoded (JSON)",
        once_cycle.sync(hit=True),
        None,
    ),
    (
        "lockworker aio.compute_once (hit)",
        "await aio.compute_once of a cached key on redis.asyncio",
        once_cycle.AIO_HIT,
        None,
    ),
    (
        "lockworker compute_once (miss)",
        "compute_once of a new key: look, subscribe, lock, look, compute, store, release",
        once_cycle.sync(hit=False),
        None,
    ),
    (
        "lockworker aio.compute_once (miss)",
        "await aio.compute_once of a new key on redis.asyncio: the same steps",
        once_cycle.AIO_MISS,
        None,
    ),
    (
        "lockworker script",
        "Worker.process: acquire, empty on_acquired, DONE (Lua, default)",
        lambda c: lockworker_cycle(c, "script"),
        None,
    ),
    (
        "lockworker aio.Worker",
        "await aio.Worker.process: the script job cycle on redis.asyncio, async hook",
        aio_cycle.AIO_WORKER,
        None,
    ),
    (
        "lockworker txn",
        "Worker.process: the same job cycle over WATCH/MULTI/EXEC",
        lambda c: lockworker_cycle(c, "txn"),
        None,
    ),
    ("redis-py Lock", "acquire + release, thread_local=False", redis_py_cycle, None),
    (
        "redis-py asyncio Lock",
        "await acquire + release, redis.asyncio.lock.Lock, thread_local=False",
        aio_cycle.REDIS_PY_ASYNC,
        None,
    ),
    ("python-redis-lock", "acquire + release", python_redis_lock_cycle, "redis_lock"),
    ("pottery Redlock (1 master)", "acquire + release", pottery_cycle, "pottery"),
    ("lockworker Redlock (3 masters)", "acquire + release", redlock_cycle, None),
    ("pottery Redlock (3 masters)", "acquire + release", pottery3_cycle, "pottery"),
)
"""(name, what one cycle is, factory, the module it needs if it is an optional peer)."""

BASELINE = "redis-py Lock"
MULTI_MASTER = frozenset({"lockworker Redlock (3 masters)", "pottery Redlock (3 masters)"})


@dataclass(frozen=True)
class Sample:
    cycles: int
    elapsed: float
    writes: int
    commands: int
    client_cpu: float
    server_cpu: float


def _spin(cycle: Cycle) -> Spin:
    def spin(seconds: float) -> tuple[int, float]:
        count = 0
        start = time.perf_counter()
        deadline = start + seconds
        now = start
        while now < deadline:
            cycle()
            count += 1
            now = time.perf_counter()
        return count, now - start

    return spin


def _measure(spin: Spin, clients: list[redis.Redis], seconds: float) -> Sample:
    """Run cycles for about ``seconds`` and count what they cost (on every server)."""
    commands_before = sum(command_calls(client) for client in clients)
    server_before = sum(server_cpu(client) for client in clients)
    writes_before = CountingConnection.writes
    cpu_before = time.process_time()
    count, elapsed = spin(seconds)
    client_cpu = time.process_time() - cpu_before
    writes = CountingConnection.writes - writes_before
    server = sum(server_cpu(client) for client in clients) - server_before
    commands = sum(command_calls(client) for client in clients) - commands_before
    return Sample(count, elapsed, writes, commands, client_cpu, server)


def _sample(
    make: Factory | aio_cycle.AsyncFactory, servers: list[RedisServer],
    clients: list[redis.Redis], seconds: float, warmup: int,
) -> Sample:
    """One contender's turn; an asyncio one runs on a loop and client of its own, and
    ``clients`` (sync) only read the server's counters."""
    if isinstance(make, aio_cycle.AsyncFactory):
        session = make.session(servers[0])
        try:
            session.warm(warmup)
            return _measure(session.spin, clients, seconds)
        finally:
            session.close()
    cycle, close = make(clients)
    try:
        for _ in range(warmup):  # connect, load scripts, warm caches
            cycle()
        return _measure(_spin(cycle), clients, seconds)
    finally:
        close()


def run(
    servers: list[RedisServer], *, rounds: int, seconds: float, warmup: int
) -> list[CycleResult]:
    """Interleave the contenders for ``rounds`` rounds of ``seconds`` each.

    ``servers[0]`` is the run's server; a Redlock contender uses all of ``servers``.
    """
    contenders = [entry for entry in CONTENDERS if installed(entry[3])]
    results = [CycleResult(name, what) for name, what, _, _ in contenders]
    for round_no in range(rounds):
        order = list(range(len(contenders)))
        shift = round_no % len(order)
        order = order[shift:] + order[:shift]
        for index in order:
            name, _, make, _ = contenders[index]
            used = servers if name in MULTI_MASTER else servers[:1]
            clients = [counting_client(server) for server in used]
            try:
                sample = _sample(make, used, clients, seconds, warmup)
            finally:
                for client in clients:
                    client.close()
            result = results[index]
            result.rates.append(sample.cycles / sample.elapsed)
            result.cycles += sample.cycles
            result.writes += sample.writes
            result.commands += sample.commands
            result.client_cpu += sample.client_cpu
            result.server_cpu += sample.server_cpu
    return results


class _InstantProtocol:
    """A protocol that grants and completes every job at once, without any I/O.

    Running ``Worker.process`` over it measures what lockworker itself costs per job in
    Python (lease, job handle, heartbeat registration, logging calls), apart from Redis.
    """

    def acquire(
        self, keys: JobKeys, owner: str, lease_ms: int, max_attempts: int, retention_ms: int
    ) -> Grant | Snapshot:
        return Grant(1, 1)

    def complete(self, keys: JobKeys, held: LockValue, retention_ms: int) -> Settle:
        held.encode()
        return Settle.DONE


def python_overhead(client: redis.Redis, jobs: int) -> float:
    """Microseconds of lockworker's own Python per uncontended job (median of 3 runs)."""
    worker = lockworker.Worker(
        client, namespace="bench-overhead", lock_timeout=LEASE, retention=60.0,
        protocol=_InstantProtocol(),  # type: ignore[arg-type]
        handle_signals=False, on_acquired=_empty,
    )
    samples = []
    try:
        for run_no in range(3):
            start = time.perf_counter()
            for i in range(jobs):
                worker.process(f"job-{run_no}-{i}")
            samples.append((time.perf_counter() - start) / jobs * 1e6)
    finally:
        worker.close()
    return median(samples)
