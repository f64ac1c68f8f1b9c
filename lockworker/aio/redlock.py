"""``Redlock`` on ``redis.asyncio`` clients: the sync :class:`~lockworker.Redlock`, awaited.

Everything but the I/O is the sync Redlock's
(:class:`~lockworker.primitives.redlockcore.RedlockCore`): the arguments and their
checks, the keys and values, the steps and their scripts, the attempts, the quorum and
validity decisions, the fencing tokens, the events and the errors. A sync ``Redlock``
and this one over the same masters therefore exclude each other, wake each other's
waiters and hand out one sequence of tokens.

Each round asks every master at once, a task per master, and waits for the replies
only as long as the step can use them, with the sync side's budget, grace and
bookkeeping (:class:`~lockworker.primitives.masters.Step`): a master that does not
answer in time counts as failed, and one whose call is still running keeps out of
later rounds until it returns. A waiter listens on each master's wake channel through
its loop's hub of that master's pool (:mod:`lockworker.aio.wake`).

Cancellation leaks nothing: a task cancelled during an attempt gives back what the
attempt took on every master (after the calls under way returned, or ``ttl``), and a
task cancelled inside ``async with`` releases; both run to their end even if the task
is cancelled again (:func:`~lockworker.aio.primitive.shielded`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection
from functools import cached_property
from typing import Any

import redis

from lockworker.aio.primitive import AsyncClient, AsyncPrimitive, shielded
from lockworker.aio.wake import AsyncWakeHub, hub_for, wait
from lockworker.errors import LockworkerError
from lockworker.primitives import common, masters
from lockworker.primitives.redlockcore import Listening, RedlockCore
from lockworker.protocol.decode import foreign_on_wrongtype
from lockworker.steps import adrive

__all__ = ["Redlock"]


class Redlock(AsyncPrimitive, RedlockCore[AsyncClient]):
    """A lock held on a majority of independent masters, for asyncio.

    The arguments, properties (``token``, ``held``, ``lost``, ``validity``,
    ``unreachable``, ``quorum``), errors and events of :class:`lockworker.Redlock`;
    the methods that call Redis are coroutines::

        masters = [redis.asyncio.Redis(host=h) for h in ("redis-a", "redis-b", "redis-c")]
        async with Redlock(masters, "ledger", ttl=10.0) as lock:
            await ledger.append(entry, fencing_token=lock.token)

    :param clients: one ``redis.asyncio.Redis`` client per master.
    :param auto_renew: renew on a majority every ``ttl / 3`` in a task of the running
        loop while it is held.

    One object is one holder, not re-entrant; tasks sharing one object take turns,
    as with :class:`lockworker.aio.Lock` (:mod:`lockworker.aio.turns`).
    """

    @cached_property
    def _inflight(self) -> set[asyncio.Future[None]]:
        """This object's calls to masters still under way (a cancelled round's too)."""
        return set()

    async def locked(self) -> bool:
        """True if a majority of the reachable masters show the lock held (anyone's)."""
        return await adrive(self._locked_steps())

    async def owned(self) -> bool:
        """True if this object holds the lock on a majority of masters now."""
        return await adrive(self._owned_steps())

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take the lock on a majority of masters, as :meth:`lockworker.Redlock.acquire`:
        True, False if held elsewhere, :class:`~lockworker.QuorumNotReached` if fewer
        than a majority answered the last attempt."""
        deadline = self._begin(blocking, timeout)
        if not await self._turns.take(self.clock, blocking, deadline):
            return False  # another task of this object kept it until the deadline
        listening = Listening(asyncio.Event()) if blocking else None
        held = False
        try:
            held = await adrive(self._acquire_steps(blocking, deadline, listening))
            return held
        finally:
            self._stop_listening(listening)
            owner, self._trying = self._trying, None
            if owner is not None:  # an attempt cut short (a cancellation, an error)
                await shielded(self._give_back(owner))
            elif not held:
                self._turns.give()

    async def _give_back(self, owner: str) -> None:
        """Release what a cut-short attempt took; then another task's turn."""
        try:
            under_way = set(self._inflight)
            if under_way:  # a grant arriving after the release would stay for ttl
                await asyncio.wait(under_way, timeout=self.ttl)
            with contextlib.suppress(LockworkerError, redis.RedisError):
                await adrive(self._release_all_steps(owner, publish=False))
        finally:
            self._turns.give()

    # -- the I/O of RedlockCore's loops ------------------------------------------------

    async def _round(
        self, fn: Callable[[int], Awaitable[Any]], budget: float, *,
        only: Collection[int] | None = None, ok: Callable[[Any], bool] = masters.answered,
    ) -> masters.Round:
        step = self._masters.start(fn, budget, only=only, ok=ok)
        tasks = [asyncio.ensure_future(call.arun()) for call in step.calls.values()]
        for task in tasks:
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        while (left := step.left()) is not None:
            pending = [t for t in tasks if not t.done()]
            if not pending:
                break
            await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        return step.collect()

    async def _send(self, i: int, step: common.ScriptStep[Any]) -> Any:
        try:
            return await step.arun(self.clients[i])
        except redis.ResponseError as exc:
            raise foreign_on_wrongtype(self.keys, exc) from exc

    def _join(self, i: int, event: Any) -> tuple[AsyncWakeHub, asyncio.Event]:
        hub = hub_for(self.clients[i])
        return hub, hub.join(self.keys.wake, event)

    async def _confirm(self, confirmations: list[asyncio.Event], budget: float) -> None:
        waits = [asyncio.ensure_future(c.wait()) for c in confirmations if not c.is_set()]
        if not waits:
            return
        try:
            await asyncio.wait(waits, timeout=budget)
        finally:
            for w in waits:
                w.cancel()

    async def _wait(self, event: asyncio.Event, pause: float) -> None:
        await wait(event, pause)

    def _renewer(self, owner: str) -> Callable[[float], Awaitable[bool]]:
        async def renew(_deadline: float) -> bool:
            return await adrive(self._renew_steps(owner))

        return renew

    # -- extend, release -------------------------------------------------------------

    async def extend(self, ttl: float | None = None) -> None:
        """Reset the remaining time to ``ttl`` on a majority; else :class:`LockLost`."""
        await adrive(self._extend_steps(ttl))

    async def release(self) -> None:
        """Release on every master, waking the waiters (sync or asyncio).

        :class:`~lockworker.NotHeld` if not held by this object,
        :class:`~lockworker.LockLost` if the validity had run out or fewer than a
        majority still held it. Completes even if the awaiting task is cancelled.
        """
        held, was_lost = self._take_held()
        await shielded(adrive(self._release_steps(held, was_lost)))

    def close(self) -> None:
        """Stop renewing (does not release)."""
        self._unhold()

    async def __aenter__(self) -> Redlock:
        if not await self.acquire(timeout=self.timeout):
            raise self._timed_out()
        return self
