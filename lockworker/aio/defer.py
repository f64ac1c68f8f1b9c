"""A backup's held-back deliveries under ``aio.Worker.serve``: the sync side's rules
(:mod:`lockworker.daemons.defer`), with a task instead of a thread.

The heap and every decision after a look are :class:`lockworker.serving.held.Held`'s
(one batched look, :class:`lockworker.serving.rules.Look`); the batch of looks is
:func:`lockworker.aio.batcher.send` (the sync side's batch, awaited).
This module only schedules them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from lockworker.aio.batcher import send
from lockworker.aio.jobrun import AsyncJobRun
from lockworker.aio.wake import wait
from lockworker.errors import LockworkerError
from lockworker.model.presence import handover_channel
from lockworker.protocol.streams import FOLLOW
from lockworker.serving import follow
from lockworker.serving.deferring import DeferralsBase
from lockworker.serving.delivery import Delivery
from lockworker.serving.held import IDLE_WAIT, Held, Looked, Sighting
from lockworker.serving.looked import done_elsewhere, watched
from lockworker.serving.rules import Look, movers

AsyncDispatch = Callable[[Delivery, "Sighting | None"], Awaitable[object]]
AsyncSettle = Callable[[Delivery], Awaitable[object]]


class AsyncDeferrals(DeferralsBase):
    """The held-back deliveries of one asyncio ``serve`` call of a backup, and their task."""

    def __init__(
        self, worker: Any, dispatch: AsyncDispatch, settle: AsyncSettle, *, ranked: bool
    ) -> None:
        super().__init__(worker, ranked=ranked)
        self.dispatch = dispatch
        self.settle = settle
        self._news: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._room = asyncio.Event()

    def trail(self, source: object) -> None:
        """See :meth:`lockworker.daemons.defer.Deferrals.trail`."""
        if self.trailing_of(source) is not None and self._task is None:
            self._task = asyncio.ensure_future(self._run())  # hear handovers now

    def __len__(self) -> int:
        """Deliveries held back, those being looked at included."""
        return len(self.held) + self._looking

    async def add(self, delivery: Delivery) -> None:
        """Hold ``delivery`` back for ``backup_delay`` (waits while the held-back are full,
        :meth:`Held.full`)."""
        while self.held.full() and not self.w.stopping and not self._done:
            self._room.clear()
            await wait(self._room, IDLE_WAIT)
        self.held.hold(self.w.clock.monotonic(), delivery)
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        if delivery.urgent and self._news is not None:
            self._news.set()  # a handover's: looked at now, as the handover asked

    async def close(self) -> None:
        """Stop the task; deliveries still held back are left unresolved."""
        self._done = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        async with self.w._hub.listen(handover_channel(self.w.namespace)) as news:
            self._news = news
            while not self.w.stopping and not self._done:
                everything = self.woken(news)
                due = self.held.take(self.w.clock.monotonic(), everything)
                self._looking = len(due)
                self._room.set()
                if not due:
                    await wait(news, self.held.wait_for(self.w.clock.monotonic()))
                    continue
                try:
                    await self._look(due, hold_free=not everything)
                finally:
                    self._looking = 0

    async def _look(self, due: list[Delivery], *, hold_free: bool) -> None:
        """One round trip for ``due`` (see :meth:`lockworker.daemons.defer.Deferrals._look`)."""
        looked, bad = Held.keyed(self.w.namespace, due)
        look = Look(self.held, await self._follow(looked))
        try:
            seen = await self.w._call(
                lambda: send(self.w.client, look.steps), "look at held-back jobs"
            ) if look.steps else []
        except LockworkerError:
            seen = look.failed()
        handed, news = look.decide(
            seen, self.w.clock.monotonic(), deferring=self.deferring(),
            hold_free=hold_free, movers=movers(self.w, ranked=self.ranked),
        )
        for delivery, snapshot in news:
            await self._locked(delivery, snapshot)
        for delivery in bad:
            await self.dispatch(delivery, None)
        for delivery, snapshot in handed:
            if snapshot is not None and done_elsewhere(self.w, delivery, snapshot.snapshot):
                await self.settle(delivery)  # reported as its contest would, without one
            else:
                await self.dispatch(delivery, snapshot)

    async def _follow(self, looked: list[Looked]) -> list[Looked]:
        """Settle what the namespace's progress shows done (see
        :meth:`lockworker.daemons.defer.Deferrals._follow`); the rest, to look at."""
        if not follow.follows(self.w):
            return looked
        for stream in self.following.unread(looked):
            try:
                reply = await self.w._call(
                    lambda stream=stream: FOLLOW.acall(
                        self.w.client, follow.keys_of(stream), [self.w.namespace]
                    ),
                    "read the progress of stream",
                )
            except LockworkerError:
                continue  # looked at instead
            self.following.learn(stream, reply)
        covered, rest = self.following.split(looked)
        if covered:
            self.held.followed(self.w.clock.monotonic(), covered)
            for delivery, _ in covered:
                follow.report(self.w, delivery)
                await self.settle(delivery)
        return rest

    async def _locked(self, delivery: Delivery, seen: Sighting | None) -> None:
        """Report a job held by another as its contest would (``job.locked``, then
        ``on_locked``): a backup keeps watch on it, in batches."""
        assert seen is not None
        found = watched(self.w, delivery)
        if found is not None:
            await AsyncJobRun(self.w, *found).observe(seen.snapshot)
