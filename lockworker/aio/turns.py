"""One primitive object, many tasks: :mod:`lockworker.primitives.turns` for asyncio.

The same rules with a task as the unit of use: a ``Lock`` or ``Redlock`` object's
tasks take turns (an ``async with lock`` in several tasks of one object excludes them
from each other), a ``Semaphore`` object refuses a second task, and the task that
holds one acquiring it again is refused. A task cancelled while it waits for its turn
leaves the queue, and a turn that reached it meanwhile passes on.
"""

from __future__ import annotations

import asyncio

from lockworker.aio.wake import wait
from lockworker.clock import Clock
from lockworker.primitives.turns import TurnsCore

__all__ = ["AsyncTurns"]


class AsyncTurns(TurnsCore[asyncio.Event]):
    """The turns of an object's tasks (on one loop)."""

    def __init__(self, what: str, *, share: bool) -> None:
        super().__init__(what, share=share, by="task")

    def _waiter(self) -> asyncio.Event:
        return asyncio.Event()

    def _wake(self, waiter: asyncio.Event) -> None:
        waiter.set()

    async def take(self, clock: Clock, blocking: bool, deadline: float | None) -> bool:
        me = asyncio.current_task()
        got = self._enter(me, blocking)
        if isinstance(got, bool):
            return got
        try:
            if deadline is None:
                await got.wait()
            else:
                await wait(got, deadline - clock.monotonic())
        except BaseException:  # cancelled: a turn that came meanwhile passes on
            if self._settle(me, got):
                self.give()
            raise
        return self._settle(me, got)
