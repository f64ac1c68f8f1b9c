"""Uncontended ``compute_once`` cycles, sync and asyncio, for :mod:`benchmarks.cycle`.

One cycle is one call: of a key the warm-up cached (a **hit**: one GET, the value
decoded), or of a new key each time (a **miss**: look, subscribe to the key's wake
channel, lock, look again, compute, store and publish, release). ``fn`` computes a
small constant, so a miss measures lockworker's cost of filling the cache.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio

import lockworker
import lockworker.aio
from benchmarks.aio_cycle import AsyncCycle, AsyncFactory

HIT_TTL = 3600.0
MISS_TTL = 60.0
"""Seconds a value stays cached: the hit key's outlives the run; the misses' (one key
per cycle) expire soon after it."""

VALUE = {"rows": 3, "status": "ok"}
"""What ``fn`` computes: a small JSON value."""


def value() -> dict[str, Any]:
    return VALUE


async def avalue() -> dict[str, Any]:
    return VALUE


def _keys(hit: bool) -> Callable[[], str]:
    """The key of each cycle: always the same one (hit), or a new one (miss)."""
    prefix = f"bench-once-{uuid.uuid4().hex[:8]}"
    counter = itertools.count()
    return (lambda: prefix) if hit else (lambda: f"{prefix}-{next(counter)}")


def sync(hit: bool) -> Callable[[list[redis.Redis]], tuple[Callable[[], None], Callable[[], None]]]:
    """``lockworker.compute_once`` of a cached key (``hit``) or of a new key each cycle."""

    def make(clients: list[redis.Redis]) -> tuple[Callable[[], None], Callable[[], None]]:
        key, ttl = _keys(hit), HIT_TTL if hit else MISS_TTL

        def cycle() -> None:
            if lockworker.compute_once(clients[0], key(), value, ttl=ttl) != VALUE:
                raise RuntimeError("compute_once returned another value")

        return cycle, lambda: None

    return make


def _aio(hit: bool) -> AsyncFactory:
    """``await lockworker.aio.compute_once``, the same two cases."""

    def make(client: redis.asyncio.Redis) -> tuple[AsyncCycle, Callable[[], Awaitable[None]]]:
        key, ttl = _keys(hit), HIT_TTL if hit else MISS_TTL

        async def cycle() -> None:
            if await lockworker.aio.compute_once(client, key(), avalue, ttl=ttl) != VALUE:
                raise RuntimeError("aio.compute_once returned another value")

        async def close() -> None:
            pass

        return cycle, close

    return AsyncFactory(make)


AIO_HIT = _aio(hit=True)
AIO_MISS = _aio(hit=False)
