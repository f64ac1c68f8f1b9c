"""Uncontended cycles on ``redis.asyncio``: lockworker's ``aio.Lock`` beside redis-py's
asyncio ``Lock``, ``aio.Semaphore`` and ``aio.Worker``'s job cycle, measured in the same
rounds and table as their sync twins (``aio.compute_once``'s: :mod:`benchmarks.once_cycle`).

A lock's cycle is ``await lock.acquire(); await lock.release()`` of one lock object
(a semaphore's: of one permit), the worker's ``await worker.process(new_job_id)``, back
to back in one task. The whole timed
loop runs inside the event loop (one ``run_until_complete`` per round, not per cycle),
so the figure is the cost of an asyncio cycle, not of entering the loop. Round trips
are counted as for the sync contenders: :class:`CountingAsyncConnection` adds its socket
writes to the same counter.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio
from redis.asyncio.connection import Connection

import lockworker
import lockworker.aio
import lockworker.aio.lock
from benchmarks.common import CountingConnection
from lockworker.testing.server import RedisServer

LEASE = 10.0
"""Seconds: the lease every contender asks for (as in the sync cycles)."""

LIMIT = 2
"""The semaphore's limit (as the sync Semaphore's row)."""

AsyncCycle = Callable[[], Awaitable[None]]


class CountingAsyncConnection(Connection):
    """A redis.asyncio connection that counts its socket writes, one per round trip,
    in :attr:`CountingConnection.writes` (the cycle benchmark runs one contender at a
    time, so the count is the measured client's)."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.writes += 1
        await super().send_packed_command(command, check_health)


@dataclass(frozen=True)
class AsyncFactory:
    """An asyncio contender: ``make(client)`` gives its cycle and what closes it."""

    make: Callable[[redis.asyncio.Redis], tuple[AsyncCycle, Callable[[], Awaitable[None]]]]

    def session(self, server: RedisServer) -> Session:
        return Session(self, server)


class Session:
    """One contender's turn: a loop, a counting client, the lock; closed at the end."""

    def __init__(self, factory: AsyncFactory, server: RedisServer) -> None:
        self.loop = asyncio.new_event_loop()
        pool = redis.asyncio.ConnectionPool(
            host="127.0.0.1", port=server.port, socket_timeout=5.0,
            connection_class=CountingAsyncConnection,
        )
        self.client = redis.asyncio.Redis(connection_pool=pool)
        self.cycle, self._close = factory.make(self.client)

    def warm(self, cycles: int) -> None:
        """Connect, load scripts, warm caches."""

        async def warm() -> None:
            for _ in range(cycles):
                await self.cycle()

        self.loop.run_until_complete(warm())

    def spin(self, seconds: float) -> tuple[int, float]:
        """Cycles run in about ``seconds``, and the seconds they took."""

        async def spin() -> tuple[int, float]:
            count = 0
            start = time.perf_counter()
            deadline = start + seconds
            now = start
            while now < deadline:
                await self.cycle()
                count += 1
                now = time.perf_counter()
            return count, now - start

        return self.loop.run_until_complete(spin())

    def close(self) -> None:
        """Close the contender and the client, then end the tasks still running on the
        loop (a wake hub's reader lingers after its last waiter), as ``asyncio.run``."""

        async def close() -> None:
            await self._close()
            await self.client.aclose()
            await finish_tasks()

        try:
            self.loop.run_until_complete(close())
        finally:
            self.loop.close()


async def finish_tasks() -> None:
    """Cancel the running loop's other tasks and wait for them to end."""
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _aio_lock(client: redis.asyncio.Redis) -> tuple[AsyncCycle, Callable[[], Awaitable[None]]]:
    lock = lockworker.aio.lock.Lock(client, f"bench-aio-{uuid.uuid4().hex[:8]}", ttl=LEASE)

    async def cycle() -> None:
        await lock.acquire()
        await lock.release()

    async def close() -> None:
        lock.close()

    return cycle, close


def _redis_py_async(
    client: redis.asyncio.Redis,
) -> tuple[AsyncCycle, Callable[[], Awaitable[None]]]:
    lock = client.lock("bench:redis-py-asyncio", timeout=LEASE, thread_local=False)

    async def cycle() -> None:
        await lock.acquire()
        await lock.release()

    async def close() -> None:
        pass

    return cycle, close


def _aio_semaphore(
    client: redis.asyncio.Redis,
) -> tuple[AsyncCycle, Callable[[], Awaitable[None]]]:
    semaphore = lockworker.aio.Semaphore(
        client, f"bench-aio-sem-{uuid.uuid4().hex[:8]}", LIMIT, ttl=LEASE
    )

    async def cycle() -> None:
        await semaphore.acquire()
        await semaphore.release()

    async def close() -> None:
        semaphore.close()

    return cycle, close


async def _empty(_job: lockworker.Job) -> None:
    """The empty ``async def on_acquired``: the cycle measures lockworker, not the work."""


def _aio_worker(
    client: redis.asyncio.Redis,
) -> tuple[AsyncCycle, Callable[[], Awaitable[None]]]:
    """The sync job cycle awaited: ``aio.Worker.process(new_job_id)`` in one task, each
    job acquired, its empty hook awaited under a heartbeat task, and marked DONE."""
    worker = lockworker.aio.Worker(
        client, namespace=f"bench-aio-worker-{uuid.uuid4().hex[:8]}", lock_timeout=LEASE,
        retention=60.0, handle_signals=False, on_acquired=_empty,
    )
    counter = itertools.count()

    async def cycle() -> None:
        outcome = await worker.process(f"job-{next(counter)}")
        if outcome is not lockworker.Outcome.DONE:
            raise RuntimeError(f"uncontended job ended {outcome!r}, expected DONE")

    return cycle, worker.close


AIO_LOCK = AsyncFactory(_aio_lock)
AIO_SEMAPHORE = AsyncFactory(_aio_semaphore)
AIO_WORKER = AsyncFactory(_aio_worker)
REDIS_PY_ASYNC = AsyncFactory(_redis_py_async)
