"""What the asyncio primitives share: awaiting the sync side's loops, finishing what
must finish, and renewing by a task.

Each primitive's loops, steps and decisions are the sync side's
(:mod:`lockworker.primitives`): a loop is a generator yielding its calls to Redis, and
:func:`lockworker.steps.adrive` awaits each call, where :func:`lockworker.steps.drive`
makes it. What only asyncio has is cancellation. A release or a leave that was started
must reach the server even when the task awaiting it is cancelled meanwhile, or a lock
would stay held (or a place queued) by nobody until its TTL: :func:`shielded` runs such
a step to its end in a task of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, ClassVar, TypeAlias, TypeVar

import redis.asyncio

from lockworker.aio.lease import AsyncHeartbeat
from lockworker.aio.turns import AsyncTurns
from lockworker.errors import LockworkerError
from lockworker.primitives.common import Primitive
from lockworker.runtime.lease import Lease
from lockworker.runtime.retry import AsyncCaller

R = TypeVar("R")

AsyncClient: TypeAlias = redis.asyncio.Redis | redis.asyncio.RedisCluster
"""The clients of the asyncio primitives (a ``RedisCluster`` where the sync side takes
a cluster client too)."""

_finishing: set[asyncio.Task[Any]] = set()
"""Shielded steps still running after their caller was cancelled: referenced here so
that they are not collected before they end."""


async def shielded(step: Coroutine[Any, Any, R]) -> R:
    """Await ``step`` to its end even if the awaiting task is cancelled meanwhile.

    The caller still sees its cancellation at once; the step goes on in the background
    and its own outcome is reported by its events (a release logs ``lock.lost``).
    """
    task = asyncio.ensure_future(step)
    _finishing.add(task)
    task.add_done_callback(_finished)
    return await asyncio.shield(task)


def _finished(task: asyncio.Task[Any]) -> None:
    _finishing.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: asyncio would otherwise report it as lost


class AsyncPrimitive(Primitive):
    """The asyncio side of :class:`~lockworker.primitives.common.Primitive`: calls to
    Redis awaited through :class:`~lockworker.runtime.retry.AsyncCaller` (the sync
    caller's policy, logs and label), renewal by an
    :class:`~lockworker.aio.lease.AsyncHeartbeat` task, and ``async with``."""

    asyncio_client: ClassVar[bool] = True
    turns_kind = AsyncTurns
    _acall: AsyncCaller
    _renewals: AsyncHeartbeat | None = None

    def _settings(self, *args: Any, **kwargs: Any) -> None:
        super()._settings(*args, **kwargs)
        call = self._call
        self._acall = AsyncCaller(call.clock, call.policy, call.log, call.label)

    def _renew_in_background(self, lease: Lease, interval: float) -> None:
        self._renewals = AsyncHeartbeat(self.clock, interval)
        self._renewals.hold(lease)

    def _stop_background_renewal(self, lease: Lease | None, *, wait: bool = True) -> None:
        renewals, self._renewals = self._renewals, None
        if renewals is not None and lease is not None:
            renewals.drop(lease)

    async def release(self) -> None:
        raise NotImplementedError

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        """Release, also when the block was cancelled (the release then completes even
        if the task is cancelled again). A cancelled block stays cancelled: an error of
        the release (a lock found lost, logged as such) does not replace the
        cancellation, which the task's owner is waiting for."""
        try:
            await self.release()
        except LockworkerError:
            if exc_type is None or not issubclass(exc_type, asyncio.CancelledError):
                raise
