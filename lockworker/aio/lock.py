"""``Lock`` on a ``redis.asyncio`` client: :class:`lockworker.primitives.lock.Lock`, awaited.

Everything but the I/O is the sync lock's (:class:`~lockworker.primitives.lockcore.LockCore`):
the arguments and their checks, the keys and values, the steps and their scripts, the
acquire loop, the fencing tokens, the local judgement of a hold, the events and the
errors. A sync ``Lock`` and this one on the same name therefore exclude each other and
hand the lock over to each other in order of arrival. A waiting task blocks (BLPOP) on
its own grant list on a connection of its own from the client's pool, for at most one
slice, which stays below the client's ``socket_timeout`` (redis.asyncio applies it to a
blocking read too).

Cancellation leaks nothing. A task cancelled in :meth:`Lock.acquire` leaves the queue,
and a grant that reached it meanwhile (its reply lost with the cancelled read) is
passed on to the next waiter, or frees the lock. A task cancelled inside
``async with lock:`` releases the lock on the way out. Both steps run to their end even
if the task is cancelled again (:func:`~lockworker.aio.primitive.shielded`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from functools import cached_property

import redis

from lockworker.aio.primitive import AsyncClient, AsyncPrimitive, shielded
from lockworker.aio.protocol import AsyncScriptProtocol
from lockworker.errors import LockworkerError
from lockworker.model.codec import Holder, LockValue
from lockworker.model.state import Grant, Snapshot
from lockworker.primitives import lockwait
from lockworker.primitives.lockcore import LockCore
from lockworker.primitives.lockqueue import MIN_WAIT, pushed_grant
from lockworker.runtime import nudge
from lockworker.steps import adrive

__all__ = ["Lock"]


class Lock(AsyncPrimitive, LockCore[AsyncClient]):
    """A distributed mutual-exclusion lock with a fencing token, for asyncio.

    The arguments, properties (``token``, ``held``, ``lost``), errors and events of
    :class:`lockworker.Lock`; the methods that call Redis are coroutines::

        async with Lock(client, "report", ttl=5.0) as lock:
            await store.write(rows, fencing_token=lock.token)

    :param client: a ``redis.asyncio.Redis`` client (``decode_responses`` either way).
    :param auto_renew: renew the lock every ``ttl / 3`` in a task of the running loop
        while it is held.

    One object is one holder and not re-entrant (:class:`~lockworker.AlreadyHeld` for
    the task holding it). Tasks sharing one object take turns, as with an
    ``asyncio.Lock``: another task's acquire waits (within its timeout) for the hold
    to end, then acquires with a run and token of its own.
    """

    @cached_property
    def protocol(self) -> AsyncScriptProtocol:
        return AsyncScriptProtocol(self.client)

    async def locked(self) -> bool:
        """True if anyone holds the lock now (one Redis call)."""
        found = await self._acall(lambda: self.client.exists(self.keys.lock), "read the lock")
        return bool(found)

    async def owned(self) -> bool:
        """True if this object holds the lock now, as Redis sees it (one Redis call)."""
        if self._held is None:
            return False
        raw = await self._acall(lambda: self.client.get(self.keys.lock), "read the lock")
        return self._holds_value(raw)

    # -- acquire ---------------------------------------------------------------------

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take the lock; True if taken, False if not within ``timeout`` (None: the
        constructor's). ``blocking=False``: one try, no place in the queue."""
        who, _, deadline = self._begin(blocking, timeout)
        if not await self._turns.take(self.clock, blocking, deadline):
            return False  # another task of this object kept it until the deadline
        granted = failed = False
        try:
            start = self.clock.monotonic()
            granted = await adrive(self._acquire_steps(who, blocking, start, deadline))
            return granted
        except BaseException:
            failed = True
            raise
        finally:
            # A waiter leaves its place; a cancelled or failed try, blocking or not,
            # also passes on a grant whose reply it never read. The next task's turn
            # comes once that is done.
            if not granted:
                if blocking or failed:
                    await shielded(self._leave(who, give_turn=True))
                else:
                    self._turns.give()

    async def _look(
        self, who: Holder, deadline: float | None, *, queue: bool
    ) -> Grant | Snapshot | float:
        step = self._look_step(who, queue=queue)
        return await self._acall(
            lambda: self._steps.arun(step), "acquire the lock", deadline=deadline
        )

    async def _look_wait(
        self, who: Holder, pause: float, deadline: float | None
    ) -> lockwait.Looked:
        step = self._look_step(who, queue=True, pause=pause)
        key = self._steps.grant_key(who)
        timeout, nudging = self._nudging(key, pause, deadline)
        try:
            return await self._acall(
                lambda: lockwait.alook_and_pop(self._steps, step, key, timeout),
                "acquire the lock", deadline=deadline,
            )
        finally:
            if nudging is not None:
                nudging.cancel()

    async def _await_grant(
        self, who: Holder, pause: float, deadline: float | None
    ) -> tuple[int, int] | None:
        key = self._steps.grant_key(who)
        timeout, nudging = self._nudging(key, pause, deadline)
        try:
            reply = await self._acall(
                lambda: self.client.blpop([key], timeout=timeout), "wait for the lock",
                deadline=deadline,
            )
        finally:
            if nudging is not None:
                nudging.cancel()
        return pushed_grant(key, reply)

    def _nudging(
        self, key: str, pause: float, deadline: float | None
    ) -> tuple[float, asyncio.Future[None] | None]:
        """A pop of ``pause`` as its server timeout, and the task nudging it at
        ``deadline`` (None if it ends before)."""
        timeout, at = nudge.pop(pause, self.clock.monotonic(), deadline, MIN_WAIT)
        return timeout, None if at is None else asyncio.ensure_future(self._nudge(key, at))

    async def _nudge(self, key: str, at: float) -> None:
        """The sync side's :class:`~lockworker.runtime.nudge.Nudger`, as a task."""
        for when in nudge.schedule(at):
            await asyncio.sleep(max(0.0, when - self.clock.monotonic()))
            with contextlib.suppress(Exception):
                await self.client.exists(key)

    async def _leave(self, who: Holder, *, give_turn: bool = False) -> None:
        step = self._steps.leave_step(who, self._retention_ms)
        try:
            with contextlib.suppress(LockworkerError, redis.RedisError):
                await self._acall(lambda: self._steps.arun(step), "leave the queue")
        finally:
            if give_turn:
                self._turns.give()

    def _renewer(self, held: LockValue) -> Callable[[float], Awaitable[bool]]:
        # Not over self: the heartbeat task must not keep a dropped Lock alive.
        acall, protocol, keys = self._acall, self.protocol, self.keys
        ttl_ms, retention_ms = self._ttl_ms, self._retention_ms

        async def renew(deadline: float) -> bool:
            renewed = await acall(
                lambda: protocol.renew(keys, held, ttl_ms, retention_ms),
                "renew the lock",
                deadline=deadline,
            )
            return bool(renewed)

        return renew

    # -- release and extend ----------------------------------------------------------

    async def release(self) -> None:
        """Release the lock, granting it at once to the first waiter (sync or asyncio).

        :class:`~lockworker.NotHeld` if this object does not hold it,
        :class:`~lockworker.LockLost` if it had expired before the release. The release
        completes even if the awaiting task is cancelled meanwhile.
        """
        held = self._take_held()
        await shielded(self._release(held))

    async def _release(self, held: LockValue) -> None:
        step = self._steps.release_step(held, self._retention_ms)
        self._released(
            held, await self._acall(lambda: self._steps.arun(step), "release the lock")
        )

    async def extend(self, ttl: float | None = None) -> None:
        """Reset the lock's remaining time to ``ttl`` seconds (default: its ttl);
        :class:`~lockworker.LockLost` if it had already expired."""
        held, seconds, ms = self._extension(ttl)
        sent = self.clock.monotonic()
        ok = await self._acall(
            lambda: self.protocol.renew(self.keys, held, ms, self._retention_ms),
            "extend the lock",
        )
        self._extended(held, bool(ok), sent, seconds)

    async def __aenter__(self) -> Lock:
        if not await self.acquire(blocking=True, timeout=self.timeout):
            raise self._timed_out()
        return self
