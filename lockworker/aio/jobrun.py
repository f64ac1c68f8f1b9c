"""One ``aio.Worker.process`` call: the loop for one job in one task.

The same contest as a thread's (:mod:`lockworker.daemons.jobrun`): the loop is
:func:`lockworker.serving.contend.contest_steps`, the verdicts and events are
:class:`~lockworker.serving.runbase.RunBase`'s, the steps are the script protocol's.
What differs is only how it waits: Redis steps, hooks and wake-ups are awaited.
The jobs serving's lane claims (:mod:`lockworker.aio.lane`) run the same attempt,
:meth:`AsyncJobRun.attempt`, whose ``finish`` queues the complete step of a hook that
returned for the lane's round trip instead of sending it alone.

Cancelling the task that runs ``on_acquired`` is a stop: the lease is released at once
(the attempt refunded, waiters woken), shielded from a second cancellation, and the
``CancelledError`` goes on. Cancelling a waiting task leaves its subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import redis

from lockworker.aio import contend
from lockworker.aio.lease import AsyncHeartbeat, Background, Reports
from lockworker.aio.protocol import AsyncScriptProtocol
from lockworker.aio.wake import AsyncWaits, wait
from lockworker.errors import LockworkerError, StopRequested
from lockworker.model.codec import LockValue
from lockworker.model.keys import JobKeys
from lockworker.model.policy import FreeClock
from lockworker.model.state import Grant, Outcome, Settle, Snapshot
from lockworker.runtime import events
from lockworker.runtime.lease import Lease, ended, revoke
from lockworker.runtime.park import Lending
from lockworker.serving.contend import Next
from lockworker.serving.hooks import Hooks
from lockworker.serving.job import Job
from lockworker.serving.runbase import Failure, RunBase, RunnerBase

T = TypeVar("T")
R = TypeVar("R")


class AsyncRunner(RunnerBase, Protocol):
    """What a job run in a task needs of its worker; :class:`lockworker.aio.Worker` is one."""

    protocol: AsyncScriptProtocol
    _heartbeat: AsyncHeartbeat
    _hub: AsyncWaits
    _background: Background

    _hooks: Hooks

    async def _hook(self, log: events.EventLog, name: str, *args: Any) -> None: ...


    async def _call(
        self, fn: Callable[[], Awaitable[T]], what: str, deadline: float | None = None,
        log: events.EventLog | None = None,
    ) -> T: ...


class AsyncGate(Protocol):
    """What ``aio`` serving lends a run: its slot, given back while it waits on another
    holder (a waiting task costs nothing but its slot)."""

    def park(self) -> bool: ...

    async def unpark(self) -> None: ...

    def first_look(self) -> Snapshot | None:
        """What a look of the job just saw, once (then None): the run's first look."""
        ...

    def lain_free(self) -> FreeClock | None:
        """Since when the job has been seen lying free, if a look before the run saw
        it so (:class:`lockworker.serving.held.Sighting`)."""
        ...


@dataclass(frozen=True, slots=True)
class Holding:
    """An attempt under way: the job handed to ``on_acquired``, the value held, the
    lease, the log bound to the attempt, and its ``on_lost`` reports."""

    job: Job
    held: LockValue
    lease: Lease
    log: events.EventLog
    reports: Reports


SERVING: Lending[AsyncGate] = Lending("lockworker.aio.serve.gate")
"""How serving lends its slots to the ``aio.Worker.process`` call of each delivery."""


class AsyncJobRun(RunBase):
    """One ``process`` call: the loop for one job in one task."""

    def __init__(
        self, worker: AsyncRunner, keys: JobKeys, payload: Any, log: events.EventLog,
        gate: AsyncGate | None = None,
    ) -> None:
        super().__init__(worker, keys, payload, log)
        self.w = worker
        self.gate = gate
        self.wake: asyncio.Event | None = None
        self.stack = contextlib.AsyncExitStack()

    async def run(self) -> Outcome:
        self.contend()
        try:
            async with self.stack:
                return await contend.run(self)  # type: ignore[no-any-return]
        finally:
            self.ended()

    # -- the contest's I/O (the loop is lockworker.serving.contend's) ----------------

    def lain_free(self) -> FreeClock | None:
        return None if self.gate is None else self.gate.lain_free()

    async def look(self) -> Snapshot:
        seen = None if self.gate is None else self.gate.first_look()
        if seen is not None:
            return seen
        return await self.call(lambda: self.w.protocol.inspect(self.keys), "inspect job")

    async def acquire(self) -> Grant | Snapshot:
        """Try to take the next attempt; a lease another call of this worker holds is
        answered by a look, as another process's would be (:meth:`answered`)."""
        w = self.w
        sends = 0

        def send() -> Awaitable[Grant | Snapshot]:
            nonlocal sends
            sends += 1  # a retry's send follows one whose reply was lost
            return w.protocol.acquire(
                self.keys, w._who, w._lease_ms, w.max_attempts, w._retention_ms
            )

        try:
            answer = self.answered(await self.call(send, "acquire job"), unread=sends > 1)
        except asyncio.CancelledError:
            await asyncio.shield(self.abandon())
            raise
        return answer if answer is not None else await self.look()

    async def abandon(self) -> None:
        """After a cancelled acquire, whose grant may have landed unread: ask again (the
        same run re-enters its own lease) and hand a grant back at once, the attempt
        refunded, so no lease is left to run out. Best effort: Redis down, the lease
        runs out as a dead holder's would."""
        w = self.w
        with contextlib.suppress(LockworkerError, redis.RedisError):
            answer = self.answered(await w.protocol.acquire(
                self.keys, w._who, w._lease_ms, w.max_attempts, w._retention_ms
            ), unread=True)  # never another call's lease: that one runs on
            if isinstance(answer, Grant):
                held = w._who.value(answer.token, answer.attempt)
                await w.protocol.release(self.keys, held, w._retention_ms)
                self.log.info(events.RELEASED, reason="cancelled", attempt=answer.attempt)

    async def hold(self, grant: Grant, sent_at: float) -> Outcome | None:
        return await self.attempt(grant, sent_at)

    async def seen(self, snapshot: Snapshot) -> Outcome | Next:
        outcome = await self.observe(snapshot)
        return Next.WAIT if outcome is None else outcome

    async def wait(self, deadline: float, *, park: bool, observe: bool) -> Outcome | None:
        if await self.subscribe():
            return None  # listening now: look again first, then wait
        return await self.wait_until(deadline, observe=observe, park=park)

    async def stopped(self) -> Outcome:
        self.log.info(events.STOPPED)
        return Outcome.STOPPED

    # -- waiting ---------------------------------------------------------------------

    async def subscribe(self) -> bool:
        if self.wake is not None:
            return False
        self.wake = await self.stack.enter_async_context(self.w._hub.listen(self.keys.wake))
        return True

    async def wait_until(
        self, deadline: float, *, observe: bool = False, park: bool = False
    ) -> Outcome | None:
        await self.subscribe()
        assert self.wake is not None
        while not self.w.stopping:
            remaining = deadline - self.w.clock.monotonic()
            if remaining <= 0:
                return None
            if park and self.gate is not None and self.gate.park():
                self.log.debug(events.PARKED, seconds=round(remaining, 3))
                try:
                    woken = await wait(self.wake, remaining)
                finally:
                    await self.gate.unpark()
            else:
                woken = await wait(self.wake, remaining)
            if not woken:
                return None
            self.wake.clear()
            if self.heard(self.wake) or not observe:
                return None
            outcome = await self.observe(await self.look())
            if outcome is not None:
                return outcome
        return None

    async def call(
        self, fn: Callable[[], Awaitable[T]], step: str, deadline: float | None = None
    ) -> T:
        return await self.w._call(
            fn, f"{step} (job {self.keys.job_id!r})", deadline, log=self.log
        )

    # -- holding and settling ----------------------------------------------------------

    async def observe(self, seen: Snapshot) -> Outcome | None:
        outcome, hook = self.judge(seen)
        if hook is not None:
            await self.w._hook(self.log, *hook)
        return outcome

    async def attempt(
        self, grant: Grant, sent_at: float, finish: Callable[[Holding], R] | None = None
    ) -> Outcome | R | None:
        """Hold the lease while ``on_acquired`` runs, then settle it: the attempt of
        every job, in ``process`` and in ``serve``'s lane alike (see
        :meth:`lockworker.daemons.jobrun.JobRun.attempt`)."""
        return await self.hooked(self.start(grant, sent_at), finish)

    def start(self, grant: Grant, sent_at: float) -> Holding:
        """Begin the attempt ``grant`` gives: its lease, renewed by the worker's
        heartbeat from now on, whose loss is reported (``on_lost``) in a task."""
        w = self.w
        held, log, job = self.begin(grant)

        async def renew(deadline: float) -> bool:
            renewal = await self.call(
                lambda: w.protocol.renew(self.keys, held, w._lease_ms, w._retention_ms),
                "renew lease", deadline=deadline,
            )
            return events.renewed(renewal, log)

        reports = Reports(w._background)

        def lost(_lease: Lease, reason: str) -> None:
            log.warning(events.LOST, reason=reason)
            reports.spawn(w._hook(log, "on_lost", job))

        lease = Lease.granted(
            renew, w.lock_timeout, sent_at,
            on_lost=lost, on_renewed=lambda _lease: log.debug(events.RENEWED),
        )
        self.acquired(grant, sent_at, lease, job, log)
        w._heartbeat.hold(lease)
        return Holding(job, held, lease, log, reports)

    async def hooked(
        self, h: Holding, finish: Callable[[Holding], R] | None = None
    ) -> Outcome | R | None:
        """Run ``on_acquired`` under the lease ``h`` holds, and settle it. A hook that
        raised settles here (:meth:`hook_raised`); one that returned lets go of the
        lease through the heartbeat's ``end`` (which reports a lease that ran out
        meanwhile) and its complete step goes out: sent alone (:meth:`send_done`),
        or, with ``finish``, as ``finish(h)`` sends it (the lane: its slot given back,
        the step queued for a round trip shared with other jobs' steps, whose sender
        awaits the attempt's ``on_lost`` reports)."""
        w = self.w
        try:
            await w._hooks.call_async("on_acquired", h.job)  # a plain one in a thread
        except BaseException as exc:
            return await self.reported(h, self.hook_raised(h, exc))
        w._heartbeat.end(h.lease)
        if finish is not None:
            return finish(h)
        return await self.reported(h, self.send_done(h))

    async def send_done(self, h: Holding) -> Outcome | None:
        """The attempt's complete step, sent alone, and what its answer decides
        (:meth:`completed`); the protocol recovers a step applied anyway, or raises."""
        w = self.w
        # Shielded, as every settle step: a cancellation now must not leave the lease
        # to run out; the step completes and the cancellation goes on after it.
        settled = await asyncio.shield(self.call(
            lambda: w.protocol.complete(self.keys, h.held, w._done_retention_ms), "mark job done"
        ))
        return self.completed(h, settled)

    async def reported(self, h: Holding, settling: Awaitable[T]) -> T:
        """``settling``'s result once the attempt's ``on_lost`` reports have run (the
        attempt is not over before them); a cancelled attempt does not wait for them:
        they run on in their tasks."""
        try:
            result = await settling
        except asyncio.CancelledError:
            raise
        except BaseException:
            await h.reports.done()
            raise
        await h.reports.done()
        return result

    async def hook_raised(self, h: Holding, exc: BaseException) -> Outcome | None:
        """Let go of the lease after ``on_acquired`` raised ``exc``, and settle: a stop
        or a cancellation releases the attempt, a failure fails it (its retry schedule,
        ``on_failed``); anything else is raised again once the lease is released."""
        w, job, held, log = self.w, h.job, h.held, h.log
        w._heartbeat.end(h.lease)
        if isinstance(exc, StopRequested):
            return await self.settle_stop(job, held, log, "stopping")
        if isinstance(exc, Exception):
            return await self.settle_failure(job, held, exc, log)
        if isinstance(exc, asyncio.CancelledError):
            revoke(h.lease)  # a plain hook may run on in its thread: job.lost is true
            await asyncio.shield(self.settle_stop(job, held, log, "cancelled"))
            raise exc
        with contextlib.suppress(LockworkerError, redis.RedisError):
            await asyncio.shield(w.protocol.release(self.keys, held, w._retention_ms))
        raise exc

    def completed(self, h: Holding, settled: Settle) -> Outcome | None:
        """After the complete step: DONE, or None if the server refused it (the lease
        was lost; see :meth:`refused_lease`)."""
        if settled is Settle.DONE:
            return self.done_here(h.log)
        self.refused_lease(h.lease, h.log, settled)
        return None

    async def settle_failure(
        self, job: Job, held: LockValue, exc: Exception, log: events.EventLog
    ) -> Outcome | None:
        w = self.w
        exc, failure = self.failure_plan(job, exc)
        try:
            try:
                await w._hook(log, "on_failed", job, exc)
            except asyncio.CancelledError:
                await asyncio.shield(self.fail_step(held, failure))
                raise
            settled = await asyncio.shield(self.fail_step(held, failure))
        finally:
            self.failed(log, job, exc)
        verdict = self.failure_settled(settled, log, failure)
        if verdict is Outcome.GAVE_UP:
            await w._hook(log, "on_gave_up", job)
        if verdict is True:
            self.refused_lease(job._lease, log, settled)
            return None
        return verdict  # type: ignore[return-value]

    async def fail_step(self, held: LockValue, failure: Failure) -> Settle:
        w = self.w
        return await self.call(
            lambda: w.protocol.fail(
                self.keys, held, w.max_attempts, w._retention_ms,
                delay_ms=failure.delay_ms, give_up=failure.give_up is not None,
                error=failure.error,
            ),
            "release failed attempt",
        )

    async def settle_stop(
        self, job: Job, held: LockValue, log: events.EventLog, reason: str
    ) -> Outcome:
        w = self.w
        settled = await asyncio.shield(self.call(
            lambda: w.protocol.release(self.keys, held, w._retention_ms, stopped=True),
            "release on stop",
        ))
        log.info(events.RELEASED, reason=reason, settled=settled.value)
        if job._lease is not None:
            ended(job._lease, refused=settled.refused)
        log.info(events.STOPPED)
        return Outcome.STOPPED
