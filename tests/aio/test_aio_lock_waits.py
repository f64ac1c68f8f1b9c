"""The asyncio Lock sends a waiter's look and wait in one round trip, as the sync one
(tests/integration/test_lock_waits.py): the same steps, awaited."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio

from lockworker.aio.lock import Lock
from lockworker.primitives import lockwait
from lockworker.testing import RedisServer

TTL = 30.0


def test_pipelined_waits_take_a_free_lock_at_once_and_a_dead_holders_at_its_end(
    redis_server: RedisServer, namespace: str
) -> None:
    async def main() -> tuple[float, float, list[bytes], bool]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port,
                                     socket_timeout=10.0)
        try:
            free = Lock(client, "free", namespace=namespace, ttl=TTL)
            assert await free.acquire()  # looked at alone: the script is on the server
            await free.release()
            lockwait.note(client, free.keys.lock, True)
            started = time.monotonic()
            assert await free.acquire(timeout=10.0)
            at_once = time.monotonic() - started
            await free.release()
            dead = Lock(client, "res", namespace=namespace, ttl=0.3)
            assert await dead.acquire()  # never released
            waiter = Lock(client, "res", namespace=namespace, ttl=TTL)
            lockwait.note(client, waiter.keys.lock, True)
            started = time.monotonic()
            assert await waiter.acquire(timeout=10.0)
            took = time.monotonic() - started
            await waiter.release()
            left = [key async for key in client.scan_iter(match=f"*{namespace}*grant:*")]
            return at_once, took, left, lockwait.likely_held(client, free.keys.lock)
        finally:
            await client.aclose()

    at_once, took, left, still_held = asyncio.run(main())
    assert at_once < 0.5, at_once  # not after a wait slice (1 s)
    assert took < 0.8, took  # the lease's end (0.3 s), not a slice later
    assert left == []
    assert not still_held
