"""Uncontended job cycle: one client, one lock (or job) after another, no competition.

lockworker's cycle is ``Worker.process(new_job_id)`` with an empty ``on_acquired``:
acquire the first attempt, run the hook, mark the job DONE. The peers' cycle is
acquire + release of one lock. Every contender runs for the same time in each round,
the rounds interleave the contenders (in a rotating order) against the same server, and
each figure is the median over the rounds.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

import lockworker
from benchmarks.common import CountingConnection, command_calls, counting_client, median
from lockworker.testing.server import RedisServer

LEASE = 10.0
"""Seconds: the lease every contender asks for (as in the peers' baselines)."""

Cycle = Callable[[], None]


@dataclass
class CycleResult:
    name: str
    what: str
    rates: list[float] = field(default_factory=list)
    cycles: int = 0
    writes: int = 0
    commands: int = 0

    @property
    def rate(self) -> float:
        return median(self.rates)

    @property
    def round_trips(self) -> float:
        return self.writes / self.cycles if self.cycles else float("nan")

    @property
    def server_commands(self) -> float:
        return self.commands / self.cycles if self.cycles else float("nan")


def _empty(_job: lockworker.Job) -> None:
    """The empty ``on_acquired``: the cycle measures lockworker, not the work."""


def lockworker_cycle(client: redis.Redis, protocol: str) -> tuple[Cycle, Callable[[], None]]:
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


def redis_py_cycle(client: redis.Redis) -> tuple[Cycle, Callable[[], None]]:
    lock = client.lock("bench:redis-py", timeout=LEASE, thread_local=False)

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle, lambda: None


def python_redis_lock_cycle(client: redis.Redis) -> tuple[Cycle, Callable[[], None]]:
    import redis_lock

    lock = redis_lock.Lock(client, "bench:python-redis-lock", expire=int(LEASE))

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle, lambda: None


def pottery_cycle(client: redis.Redis) -> tuple[Cycle, Callable[[], None]]:
    from pottery import Redlock

    lock = Redlock(key="bench:pottery", masters={client}, auto_release_time=LEASE)

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle, lambda: None


CONTENDERS: tuple[tuple[str, str, Callable[[redis.Redis], tuple[Cycle, Callable[[], None]]]], ...] = (
    (
        "lockworker script",
        "Worker.process: acquire, empty on_acquired, DONE (Lua, default)",
        lambda c: lockworker_cycle(c, "script"),
    ),
    (
        "lockworker txn",
        "Worker.process: the same job cycle over WATCH/MULTI/EXEC",
        lambda c: lockworker_cycle(c, "txn"),
    ),
    ("redis-py Lock", "acquire + release, thread_local=False", redis_py_cycle),
    ("python-redis-lock", "acquire + release", python_redis_lock_cycle),
    ("pottery Redlock (1 master)", "acquire + release", pottery_cycle),
)

BASELINE = "redis-py Lock"


def _measure(cycle: Cycle, client: redis.Redis, seconds: float) -> tuple[int, float, int, int]:
    """Run ``cycle`` for about ``seconds``: (cycles, elapsed, round trips, commands)."""
    commands_before = command_calls(client)
    writes_before = CountingConnection.writes
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    now = start
    while now < deadline:
        cycle()
        count += 1
        now = time.perf_counter()
    writes = CountingConnection.writes - writes_before
    commands = command_calls(client) - commands_before
    return count, now - start, writes, commands


def run(server: RedisServer, *, rounds: int, seconds: float, warmup: int) -> list[CycleResult]:
    """Interleave the contenders for ``rounds`` rounds of ``seconds`` each."""
    results = [CycleResult(name, what) for name, what, _ in CONTENDERS]
    for round_no in range(rounds):
        order = list(range(len(CONTENDERS)))
        shift = round_no % len(order)
        order = order[shift:] + order[:shift]
        for index in order:
            _, _, make = CONTENDERS[index]
            client = counting_client(server)
            cycle, close = make(client)
            try:
                for _ in range(warmup):  # connect, load scripts, warm caches
                    cycle()
                count, elapsed, writes, commands = _measure(cycle, client, seconds)
            finally:
                close()
                client.close()
            result = results[index]
            result.rates.append(count / elapsed)
            result.cycles += count
            result.writes += writes
            result.commands += commands
    return results
