"""The asyncio Lock and Semaphore at the edges redis-py's and python-redis-lock's suites
probe: contradictory arguments, a timeout's precision, a held lock that is dropped."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis.asyncio

from lockworker import InvalidConfig
from lockworker.aio.lock import Lock
from lockworker.aio.semaphore import Semaphore
from lockworker.testing import RedisServer

T = TypeVar("T")


def play(server: RedisServer, scenario: Callable[[redis.asyncio.Redis], Awaitable[T]]) -> T:
    async def main() -> T:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port, socket_timeout=5.0)
        try:
            return await scenario(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_timeout_without_blocking_is_refused(
    redis_server: RedisServer, namespace: str, kind: str
) -> None:
    async def scenario(client: redis.asyncio.Redis) -> None:
        obj: Any = (Lock(client, "x", namespace=namespace, timeout=5.0) if kind == "lock"
                    else Semaphore(client, "x", 1, namespace=namespace, timeout=5.0))
        with pytest.raises(InvalidConfig, match=r"timeout must be None when blocking=False"):
            await obj.acquire(blocking=False, timeout=1)
        assert not obj.held
        assert await obj.acquire(blocking=False)
        await obj.release()

    play(redis_server, scenario)
