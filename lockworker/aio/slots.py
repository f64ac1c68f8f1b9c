"""``aio.Worker.serve``'s slots: the twin of :class:`lockworker.runtime.park.Slots`.

A slot is the right to work on a job. ``serve`` takes one per delivery, and gives it
back when the job ends, when it parks (it waits on another holder's lease), or when
its hook returned in the lane (its DONE is on the way). A job taking one again goes
ahead of new deliveries: a waiter queue before theirs. One event loop uses them, so
nothing here locks.
"""

from __future__ import annotations

import asyncio
import collections

from lockworker.serving.held import Sighting
from lockworker.serving.rules import FirstLook


class Slots:
    """``concurrency`` slots; a job that gave its slot back comes first when it takes
    one again (``take(first=True)``: a waiter queue ahead of new deliveries)."""

    def __init__(self, concurrency: int) -> None:
        self.free = concurrency
        self.returning: collections.deque[asyncio.Future[None]] = collections.deque()
        self.arriving: collections.deque[asyncio.Future[None]] = collections.deque()

    async def take(self, *, first: bool = False) -> None:
        if self.free > 0 and not self.returning and (first or not self.arriving):
            self.free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        (self.returning if first else self.arriving).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot as it was cancelled: pass it on
            raise

    def give(self) -> None:
        for queue in (self.returning, self.arriving):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self.free += 1

    def park(self) -> bool:
        self.give()
        return True

    async def unpark(self) -> None:
        await self.take(first=True)

    def first_look(self) -> None:  # nothing seen beforehand (see :class:`Seen`)
        return None

    def lain_free(self) -> None:  # no free clock beforehand (see :class:`Seen`)
        return None


class Seen(FirstLook):
    """The slots lent to one delivery's run, with what a look just saw of its job (a
    backup's held-back delivery, :mod:`lockworker.aio.defer`): its first look is free."""

    def __init__(self, slots: Slots, seen: Sighting) -> None:
        super().__init__(seen)
        self.slots = slots

    def park(self) -> bool:
        return self.slots.park()

    async def unpark(self) -> None:
        await self.slots.unpark()
