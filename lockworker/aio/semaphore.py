"""``Semaphore`` on a ``redis.asyncio`` client: the sync semaphore, awaited.

The arguments and their checks, the keys, the scripts, the acquire loop and its
decisions, the events and the errors are those of
:class:`~lockworker.primitives.semaphore.SemaphoreCore`, so sync and asyncio holders
of one name share its ``limit`` and one queue. A waiting task waits on the wake
channel through its loop's hub (:mod:`lockworker.aio.wake`); a cancelled waiter leaves
the queue, and a permit granted to it unseen is given back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from functools import cached_property
from typing import Any

import redis

from lockworker.aio.primitive import AsyncClient, AsyncPrimitive, shielded
from lockworker.aio.wake import AsyncWaits, wait
from lockworker.errors import LockworkerError
from lockworker.primitives.semaphore import SemaphoreCore
from lockworker.steps import adrive

__all__ = ["Semaphore"]


class Semaphore(AsyncPrimitive, SemaphoreCore[AsyncClient]):
    """At most ``limit`` holders at once, sync or asyncio; waiters served in order.

    The arguments, properties (``held``, ``lost``), errors and events of
    :class:`lockworker.Semaphore`; the methods that call Redis are coroutines::

        async with Semaphore(client, "exports", 3) as permit:
            await export(batch)

    One object holds at most one permit: use one per task. The task holding it that
    acquires again gets :class:`~lockworker.AlreadyHeld`, another task acquiring while
    it acquires or holds :class:`~lockworker.ConcurrentUse`.
    """

    @cached_property
    def _hub(self) -> AsyncWaits:
        return AsyncWaits(self.client)

    async def holders(self) -> int:
        """How many permits are taken now (including any not yet purged after expiry)."""
        taken = await self._acall(lambda: self.client.zcard(self._zsets[0]), "read holders")
        return int(taken)

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take a permit; True if taken, False if not within ``timeout`` (None: the
        constructor's). ``blocking=False`` never jumps the queue."""
        member, deadline = self._begin(blocking, timeout)
        await self._turns.take(self.clock, blocking, deadline)  # refused if in use elsewhere
        granted = failed = False
        try:
            if not blocking:
                granted = await adrive(self._acquire_steps(member, None))
                return granted
            async with self._hub.listen(self.keys.wake) as event:
                granted = await adrive(self._acquire_steps(member, deadline, event))
                return granted
        except BaseException:
            failed = True
            raise
        finally:
            if not granted:
                if blocking or failed:
                    await shielded(self._leave(member))
                else:
                    self._turns.give()

    async def _leave(self, member: str) -> None:
        """Leave the queue (or give back a permit granted unseen); then the object is
        free for another task."""
        step = self._leave_step(member)
        try:
            with contextlib.suppress(LockworkerError, redis.RedisError):
                await self._acall(lambda: step.arun(self.client), "leave")
        finally:
            self._turns.give()

    async def _ask(self, member: str, queue: bool, deadline: float | None) -> float | None:
        step = self._acquire_step(member, queue=queue)
        return await self._acall(
            lambda: step.arun(self.client), "acquire a permit", deadline=deadline
        )

    async def _wait(self, event: Any, pause: float) -> bool:
        return await wait(event, pause)

    def _renewer(self, member: str) -> Callable[[float], Awaitable[bool]]:
        step, acall, client = self._renew_step(member), self._acall, self.client  # not self

        async def renew(deadline: float) -> bool:
            return await acall(lambda: step.arun(client), "renew a permit", deadline=deadline)

        return renew

    async def release(self) -> None:
        """Give the permit back and wake the queue (:class:`~lockworker.NotHeld`,
        :class:`~lockworker.LockLost` as on the sync side). The release completes even
        if the awaiting task is cancelled meanwhile."""
        member = self._take_held()
        await shielded(self._release(member))

    async def _release(self, member: str) -> None:
        step = self._leave_step(member)
        self._released(member, await self._acall(lambda: step.arun(self.client), "release"))

    def close(self) -> None:
        """Wake this object's waits (does not release; the loop's hub stays)."""
        self._hub.wake_all()

    async def __aenter__(self) -> Semaphore:
        if not await self.acquire(timeout=self.timeout):
            raise self._timed_out()
        return self
