"""The asyncio Lock and Semaphore at the edges redis-py's and python-redis-lock's suites
probe: contradictory arguments, a timeout's precision, a held lock that is dropped."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis.asyncio
from helpers import TIMEOUTS, on_time, until

from lockworker import InvalidConfig
from lockworker.aio.lock import Lock
from lockworker.aio.semaphore import Semaphore
from lockworker.testing import RedisServer, capture_events

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


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_dropped_held_lock_stops_its_heartbeat_task_warns_and_lapses(
    redis_server: RedisServer, namespace: str, kind: str
) -> None:
    ttl = 0.6
    sync = redis_server.client(decode_responses=True)

    def heartbeats() -> set[asyncio.Task[Any]]:
        return {t for t in asyncio.all_tasks() if t.get_name() == "lockworker-heartbeat"}

    async def scenario(client: redis.asyncio.Redis) -> None:
        before = heartbeats()
        obj: Any = (Lock(client, "res", namespace=namespace, ttl=ttl, auto_renew=True)
                    if kind == "lock" else
                    Semaphore(client, "res", 1, namespace=namespace, ttl=ttl))
        assert await obj.acquire()
        (renewer,) = heartbeats() - before
        key, member = obj.keys.lock, obj._held
        holders = obj._zsets[0] if kind == "semaphore" else ""
        ref = weakref.ref(obj)
        with pytest.warns(ResourceWarning, match=rf"{kind} 'res' .* dropped while held"), \
                capture_events() as logged:
            del obj
            gc.collect()
        dropped = time.monotonic()
        assert ref() is None, "the heartbeat task kept the dropped object alive"
        assert [e["event"] for e in logged] == [f"{kind}.dropped"]
        await until(renewer.done, timeout=5)

        def left() -> int:
            if kind == "lock":
                return int(sync.pttl(key))
            expiry = sync.zscore(holders, member)
            seconds, micros = sync.time()
            return -2 if expiry is None else int(expiry - (seconds * 1000 + micros // 1000))

        seen = [left()]
        while seen[-1] > 0:
            await asyncio.sleep(0.005)
            seen.append(left())
            assert seen[-1] <= seen[-2], f"renewed after it was dropped: {seen}"
            assert time.monotonic() - dropped < ttl + 2.0, f"never lapsed: {seen[-5:]}"
        assert time.monotonic() - dropped < ttl + 1.0

    try:
        play(redis_server, scenario)
    finally:
        sync.close()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_acquire_with_a_timeout_returns_within_a_few_ms_of_it(
    redis_server: RedisServer, namespace: str, kind: str
) -> None:
    def make(client: redis.asyncio.Redis) -> Any:
        return (Lock(client, "res", namespace=namespace, ttl=30.0) if kind == "lock"
                else Semaphore(client, "res", 1, namespace=namespace, ttl=30.0))

    async def scenario(client: redis.asyncio.Redis) -> tuple[list[float], list[float]]:
        holder = make(client)
        assert await holder.acquire()
        baseline, overshoots = [], []
        for timeout in TIMEOUTS:
            began = time.monotonic()
            await asyncio.sleep(timeout)  # how late the loop itself comes back
            baseline.append(time.monotonic() - began - timeout)
            waiter = make(client)
            started = time.monotonic()
            assert not await waiter.acquire(timeout=timeout)
            overshoots.append(time.monotonic() - started - timeout)
        await holder.release()
        return overshoots, baseline

    on_time(lambda: play(redis_server, scenario))
