"""``compute_once`` for asyncio: the sync one's call, awaited.

The arguments and their checks, the keys, the wait loop and its decisions, the codec,
the events and the store step are :class:`~lockworker.primitives.once.OnceCore`'s; the
computing task holds an asyncio :class:`~lockworker.aio.lock.Lock` in compute_once's
own key space. Sync and asyncio callers of one key thus share one computation.

``fn`` may be a coroutine function (or return any awaitable), or a plain function. A
plain one runs on the event loop, as in the sync call; the lock's renewal is a task of
the same loop, so a plain ``fn`` that blocks longer than ``lock_timeout`` lets another
process take over. Give a slow blocking function a thread
(``lambda: asyncio.to_thread(build)``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Any

from lockworker.aio.lock import Lock
from lockworker.aio.primitive import AsyncClient
from lockworker.aio.wake import AsyncWaits, wait
from lockworker.clock import Clock
from lockworker.errors import LockLost
from lockworker.primitives.once import JSON, NAMESPACE, Codec, OnceCore, OnceLockSpace
from lockworker.runtime.retry import AsyncCaller, RetryPolicy
from lockworker.steps import adrive

__all__ = ["compute_once"]


class _OnceLock(OnceLockSpace, Lock):
    """The computing task's lock, in compute_once's own key space."""


class _AsyncOnce(OnceCore):
    asyncio_client = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        call = self.call
        self.acall = AsyncCaller(call.clock, call.policy, call.log, call.label)

    async def _cached(self) -> tuple[bool, Any]:
        raw = await self.acall(lambda: self.client.get(self.value_key), "read the cached value")
        return self._hit(raw)

    async def _compute(self, lock: Lock) -> Any:
        try:
            hit, value = await self._cached()  # stored between our first look and our lock
            if hit:
                return value
            try:
                result = self.fn()
                if inspect.isawaitable(result):
                    result = await result
                raw = self.codec.encode(result)
            except BaseException as exc:
                self._failed(exc)
                raise
            await self._store_step(raw, lock).arun(self.client)
            return self._stored(raw, lock.token)
        finally:
            # As on the sync side: a lost lock only means someone may have computed it too.
            with contextlib.suppress(LockLost):
                await lock.release()

    async def _lock_pttl(self, lock: Lock) -> int:
        pttl = await self.acall(lambda: self.client.pttl(lock.keys.lock), "read the lock")
        return int(pttl)

    async def _wait(self, event: Any, pause: float) -> bool:
        return await wait(event, pause)


async def compute_once(
    client: AsyncClient,
    key: str,
    fn: Callable[[], Any],
    *,
    ttl: float,
    lock_timeout: float = 10.0,
    timeout: float | None = None,
    codec: Codec = JSON,
    namespace: str = NAMESPACE,
    clock: Clock | None = None,
    logger: Any = None,
    redis_retry: RetryPolicy | None = None,
) -> Any:
    """The cached value of ``key``, computed by ``fn()`` (awaited if it returns an
    awaitable) in one process or task if missing; the arguments, errors and events of
    :func:`lockworker.compute_once`.

    A cancelled caller that was computing releases its lock (a waiter then computes);
    nothing is cached.
    """
    once = _AsyncOnce(
        client, key, fn, ttl=ttl, lock_timeout=lock_timeout, timeout=timeout, codec=codec,
        namespace=namespace, clock=clock, logger=logger, redis_retry=redis_retry,
    )
    hit, value = await once._cached()
    if hit:
        return value
    lock = _OnceLock(client, once.name, **once.lock_settings())
    start = once.clock.monotonic()
    try:
        async with AsyncWaits(client).listen(once.keys.wake) as event:
            return await adrive(once._steps(lock, event, start))
    finally:
        lock.close()
