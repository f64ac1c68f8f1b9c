"""The asyncio heartbeat: one task keeps every held lease, renewing each every third.

The lease itself (:class:`~lockworker.runtime.lease.Lease`: when to renew, until when
to trust it, when it is lost) and the rules of one renewal are the sync side's
(:func:`~lockworker.runtime.lease.renewal_due`,
:func:`~lockworker.runtime.lease.renewal_answered`); here ``lease.renew`` is a
coroutine function. One keeper task per heartbeat wakes when the first lease is due
(or an earlier one is held) and starts that lease's renewal in a task of its own, so a
slow renewal holds up no other lease. Not a task per lease: most leases of a busy
stream are held for milliseconds and never renewed, and a task made and cancelled per
job was a tenth of an asyncio serving process's time.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable

from lockworker.clock import Clock
from lockworker.model.health import Pulse
from lockworker.runtime.lease import Lease, let_go, lose, renewal_answered, renewal_due


class AsyncHeartbeat:
    """Renews every held lease, each in its own renewal task, until it is dropped or
    lost (see the module)."""

    def __init__(self, clock: Clock, interval: float) -> None:
        self._clock = clock
        self._interval = interval
        self._held: dict[Lease, None] = {}
        """The leases kept (a dict: ordered, and safe to copy from another thread)."""
        self._beats: dict[Lease, asyncio.Task[None]] = {}
        """The renewals in flight, one task each."""
        self._renewing: dict[Lease, float] = {}
        """The leases whose renewal is in flight, and when each was sent."""
        self._keeper: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._next = math.inf
        """When the keeper wakes next (its earliest lease's renewal)."""

    def hold(self, lease: Lease) -> None:
        """Start renewing ``lease`` (its ``renew`` is a coroutine function)."""
        self._held[lease] = None
        if self._keeper is None or self._keeper.done():
            self._wake = asyncio.Event()
            self._keeper = asyncio.get_running_loop().create_task(
                self._keep(), name="lockworker-heartbeat"
            )
        elif lease.next_renewal < self._next:
            self._wake.set()

    def end(self, lease: Lease) -> bool:
        """The holder lets go of ``lease``: True if it was still held, else its loss is
        reported now unless this heartbeat did first (see
        :meth:`lockworker.runtime.lease.Heartbeat.end`). Then it is no longer renewed."""
        held = let_go(lease, self._clock.monotonic())
        self.drop(lease)
        return held

    def drop(self, lease: Lease) -> None:
        """Stop renewing ``lease``, saying nothing of whether it was still held. A
        renewal in flight is abandoned; its answer would not be applied to a released
        lease anyway."""
        lease.released = True  # enough by itself: the keeper forgets it when it wakes
        self._held.pop(lease, None)
        task = self._beats.pop(lease, None)
        if task is None:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # another thread (a collected Lock's finaliser, say)
            running = None
        if running is task.get_loop():
            if task is not asyncio.current_task():
                task.cancel()
        else:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nothing to stop
                task.get_loop().call_soon_threadsafe(task.cancel)

    def pulse(self) -> Pulse:
        """What the heartbeat shows now, for a liveness probe
        (:func:`lockworker.model.health.alive`); safe from any thread (the copies are
        made without a thread switch, so the loop cannot change them half-way)."""
        held = [lease for lease in tuple(self._held) if not (lease.released or lease.lost)]
        renewing = dict(self._renewing)
        waiting = [lease.next_renewal for lease in held if lease not in renewing]
        return Pulse(
            self._interval, renewing_since=min(renewing.values(), default=None),
            due=min(waiting, default=None), held=len(held),
        )

    async def _keep(self) -> None:
        """Start each lease's renewal when it is due; sleep until the next is."""
        while self._held:
            now = self._clock.monotonic()
            self._next = math.inf
            for lease in tuple(self._held):
                if lease.released or lease.lost:
                    self._held.pop(lease, None)
                elif lease in self._beats:
                    continue
                elif lease.next_renewal <= now:
                    self._beats[lease] = asyncio.ensure_future(self._beat(lease))
                else:
                    self._next = min(self._next, lease.next_renewal)
            if not self._held:
                return  # the next hold starts a keeper again
            self._wake.clear()
            # Woken by a renewal's end, or a lease held that is due sooner.
            wait = None if self._next == math.inf else max(0.0, self._next - now)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def _beat(self, lease: Lease) -> None:
        try:
            await self.beat(lease)
        finally:
            if self._beats.get(lease) is asyncio.current_task():
                del self._beats[lease]
            self._wake.set()  # its next renewal is the keeper's to schedule

    async def beat(self, lease: Lease) -> None:
        """Renew ``lease`` once now, or declare it lost."""
        sent_at = self._clock.monotonic()
        if not renewal_due(lease, sent_at):
            return
        self._renewing[lease] = sent_at
        try:
            held = await lease.renew(lease.valid_until)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            lose(lease, f"could not renew: {exc!r}")
            return
        finally:
            self._renewing.pop(lease, None)
        renewal_answered(lease, sent_at, bool(held), self._interval)

    async def close(self) -> None:
        """Stop the keeper and every renewal task and wait for them to end."""
        tasks = [*self._beats.values(), *([self._keeper] if self._keeper else [])]
        self._beats.clear()
        self._held.clear()
        self._keeper = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class Background:
    """The tasks an asyncio object starts beside its work (``on_lost`` hooks, called
    from a heartbeat task), kept until they end and cancelled by ``close``."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[None]] = set()

    def spawn(self, coro: Awaitable[None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Reports:
    """The ``on_lost`` calls of one held lease, each in a task of its own (the loss is
    noticed in a plain callback: a heartbeat task's, or the holder's ``end``). The
    holder awaits them before it goes on, so ``on_lost`` has run by the time the
    attempt or term is over, and ``close`` does not cancel one that never started; a
    cancelled holder does not wait (its ``on_lost`` runs on until ``close``)."""

    def __init__(self, background: Background) -> None:
        self._background = background
        self._tasks: list[asyncio.Future[None]] = []

    def spawn(self, coro: Awaitable[None]) -> None:
        self._tasks.append(self._background.spawn(coro))

    @property
    def pending(self) -> bool:
        """Whether a report was started (an ``on_lost`` the attempt must await)."""
        return bool(self._tasks)

    async def done(self) -> None:
        """Wait for the reports started so far (never raises; a second cancellation
        of the caller still interrupts the wait)."""
        if self._tasks:
            await asyncio.wait(self._tasks)
