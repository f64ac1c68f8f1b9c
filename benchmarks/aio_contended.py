"""The asyncio side of :mod:`benchmarks.contended`: tasks of one process on one lock.

A contending process of an asyncio kind runs ``tasks`` tasks on one event loop, each
with a lock object of its own on one ``redis.asyncio`` client, and each loops the same
section as a sync process (``acquire -> n = GET counter; SET counter n + 1 ->
release``) in the same window, started at the same instant. Each task reports its
sections as a holder of its own, so the lock passing between two tasks of one process
counts as a handover, as between two processes.
"""

from __future__ import annotations

import asyncio
import time
from multiprocessing.connection import Connection
from typing import Any

import redis.asyncio

import lockworker
import lockworker.aio

LEASE = 5.0
"""Seconds: the lease every contender asks for (as the sync contenders')."""

REDIS_PY = "redis-py asyncio Lock"
"""The asyncio peer: the kind names starting with it use redis-py's asyncio Lock."""


def _lock(name: str, client: redis.asyncio.Redis, key: str) -> Any:
    """One task's lock object for contender ``name``."""
    if name.startswith(REDIS_PY):
        return client.lock(key, timeout=LEASE, thread_local=False)
    return lockworker.aio.Lock(client, key, ttl=LEASE)


async def _sections(
    name: str, lock: Any, client: redis.asyncio.Redis, key: str, *, start_at: float,
    end: float,
) -> tuple[list[int], int]:
    """One task's sections until the window closes: (the n each read, release errors)."""
    counter = f"bench:{key}:counter"
    seen: list[int] = []
    errors = 0
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    while time.monotonic() < end:
        if not await lock.acquire():
            raise RuntimeError(f"{name}: acquire gave up")
        n = int(await client.get(counter) or 0)
        await client.set(counter, n + 1)
        seen.append(n)
        try:
            await lock.release()
        except lockworker.LockworkerError:
            errors += 1
    return seen, errors


async def _run(
    name: str, pipe: Connection, *, port: int, key: str, seconds: float, tasks: int,
    timeout: float,
) -> tuple[list[list[int]], int, int]:
    client = redis.asyncio.Redis(host="127.0.0.1", port=port, socket_timeout=timeout)
    locks = [_lock(name, client, key) for _ in range(tasks)]
    try:
        await client.ping()
        pipe.send(("ready",))
        start_at = float(pipe.recv())  # nothing else runs on the loop yet
        done = await asyncio.gather(
            *(
                _sections(name, lock, client, key, start_at=start_at, end=start_at + seconds)
                for lock in locks
            )
        )
    finally:
        for lock in locks:
            if isinstance(lock, lockworker.aio.Lock):
                lock.close()
        await client.aclose()
    return [seen for seen, _ in done], 0, sum(errors for _, errors in done)


def loop(
    name: str, pipe: Connection, *, port: int, key: str, seconds: float, tasks: int,
    timeout: float,
) -> tuple[list[list[int]], int, int]:
    """Run ``tasks`` contending tasks in a new event loop: (the n each task's sections
    read, one list per task; the peak inside, 0 for a lock; release errors)."""
    return asyncio.run(
        _run(name, pipe, port=port, key=key, seconds=seconds, tasks=tasks, timeout=timeout)
    )
