"""An ``aio.Worker``'s presence in its namespace, kept by a task of its own.

The same registration, steps, view and schedule as a thread's
(:mod:`lockworker.runtime.presence`, whose docstring says what it does): the scripts
are :mod:`lockworker.protocol.presence`'s, awaited; the decisions are the shared
:class:`~lockworker.runtime.presence.PresenceBase`'s and
:class:`~lockworker.model.presence.View`'s. A backup's task listens on the presence
channel through its loop's wake hub.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from lockworker.aio.wake import hub_for, wait
from lockworker.model import presence
from lockworker.model import registry as names
from lockworker.model.presence import Member, View
from lockworker.protocol import presence as steps
from lockworker.protocol import rates as counting
from lockworker.protocol import registry
from lockworker.runtime import events, reindex
from lockworker.runtime.presence import FAILURES, PresenceBase
from lockworker.runtime.rates import Rates


class AsyncPresence(PresenceBase):
    """One ``aio.Worker``'s registration, refreshed by a task (see the module)."""

    def __init__(
        self, client: object, namespace: str, member: Member, *, view: View,
        log: events.EventLog, on_gone: Callable[[], None], rates: Rates | None = None,
    ) -> None:
        super().__init__(namespace, member, view=view, log=log, on_gone=on_gone, rates=rates)
        self.client: object = client
        self._starting: asyncio.Lock | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._indexing: asyncio.Task[None] | None = None
        """The first worker's pass over its namespace's older jobs (kept: a task
        nobody references may be collected before it ends)."""

    async def start(self) -> None:
        """Register (the first call only) and start the task; no-op once stopped."""
        if self.started or self.stopped:
            return
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self.started or self.stopped:
                return
            unmarked = False
            with contextlib.suppress(*FAILURES):  # the views' list; a later start adds it
                await registry.aregister(self.client, names.namespace(self.keys.job_id))
                unmarked = not await registry.ais_indexed(self.client, self.keys.job_id)
            await self.refresh(presence.JOINED)
            if unmarked and self.alone:
                self._indexing = asyncio.get_running_loop().create_task(
                    self._index(), name="lockworker-index"
                )
            elif unmarked:
                self.not_indexed()
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(
                self._run(self._wake), name="lockworker-presence"
            )
            self.started = True

    async def _index(self) -> None:
        """The sync worker's ``_index``, on this client (:mod:`lockworker.runtime.
        reindex`)."""
        try:
            jobs = await reindex.aindex_namespace(
                self.client, self.keys.job_id, reindex.RETENTION_MS
            )
        except FAILURES as exc:
            self.not_indexed(repr(exc))
            return
        self.indexed(jobs)

    def stop(self) -> None:
        """Leave: the task removes the registration and ends. Call it in the loop."""
        self.stopped = True
        if self._wake is not None:
            self._wake.set()

    async def close(self) -> None:
        """:meth:`stop`, wait until the registration was removed, and send the counts
        left (the jobs that ended after the task's last flush), for at most 5 s."""
        self.stop()
        task = self._task
        if task is not None and task is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(task), 5.0)
            if not task.done():
                return  # stuck on an unresponsive server: the send would wait too
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.flush(), 5.0)

    async def flush(self) -> None:
        """Send the worker's counts, if any (one script); kept for the next on failure
        (a cancelled flush too: it may have been applied, see
        :mod:`lockworker.model.rates`)."""
        taken = self.rates.take()
        if not taken:
            self.flushed(None)
            return
        try:
            await counting.arecord(self.client, self.namespace, taken)
        except FAILURES as exc:
            self.rates.restore(taken)
            self.flushed(exc)
            return
        except BaseException:
            self.rates.restore(taken)
            raise
        self.flushed(None)

    async def refresh(self, message: str = "") -> None:
        sent_at = self.clock.monotonic()
        try:
            reply = await steps.TOUCH.acall(
                self.client,
                *steps.touch_call(self.keys, self.member, message),
            )
        except FAILURES as exc:
            self.refresh_failed(exc, sent_at)
            return
        self.refreshed(steps.decode(reply), sent_at)
        change = self.acting_change()
        if change is not None:  # tried again at the next reading if it fails
            with contextlib.suppress(*FAILURES):
                await steps.ACT.acall(
                    self.client, *steps.act_call(self.keys, self.member, change)
                )
                self.acting = change

    async def _run(self, stop: asyncio.Event) -> None:
        async with self._listening(stop) as message:
            while not self.stopped:
                now = self.clock.monotonic()
                left = self.wait_left(now)
                if not message.is_set() and left > 0:
                    await wait(message, left)
                    continue  # a stop, a message, or the time: decide again
                if message.is_set() or self.view.next_read() <= now:
                    message.clear()
                    if not self.stopped:
                        await self.refresh()
                await self.flush()
        await self.flush()
        with contextlib.suppress(*FAILURES):
            await steps.LEAVE.acall(
                self.client,
                *steps.leave_call(
                    self.keys, self.member, presence.LEFT
                ),
            )

    @contextlib.asynccontextmanager
    async def _listening(self, stop: asyncio.Event) -> AsyncIterator[asyncio.Event]:
        """The event the task waits on: set by :meth:`stop`, and for a backup by a
        message on the presence channel."""
        if not self.view.watch:
            yield stop
            return
        async with hub_for(self.client).listen(self.keys.wake) as message:
            self._wake = message
            message.set()  # read once listening: a primary may have joined meanwhile
            yield message
