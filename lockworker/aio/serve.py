"""``aio.Worker.serve``: jobs from a source, a bounded number at a time, until stopped.

The rules of :mod:`lockworker.daemons.serve` (decided by
:mod:`lockworker.serving.rules` for both), in tasks: every job is served as the
worker's public ``process`` serves it: through ``process`` itself when a subclass
overrides it (the override sees every job), else, for a job whose contest would compete
at once, through the lane (:mod:`lockworker.aio.lane`: the same steps, events and
hooks, claims in batches, completions group-committed); at most ``concurrency`` jobs
work at once; a job waiting on another holder's lease, or whose hook returned and whose
DONE is on the way, gives its slot back (a waiting task costs nothing else) and takes
one again, ahead of new deliveries, if it has more to do;
one job id runs at most once at a time; a delivery is reported resolved only when its
job was (DONE, DONE_ELSEWHERE, GAVE_UP); a job ``process`` refuses is logged as
``serve.job_error`` and skipped; any other error stops the serving and is raised once
the running jobs ended. Cancelling ``serve`` cancels its running jobs (as cancelling a
``process`` call would: a running hook's lease is released at once), sends the
completions due, then ends.

A source is an async iterable of ``(job_id, payload)`` pairs (or deliveries), or any
source :class:`lockworker.Worker` serves (an iterable, a
:class:`~lockworker.StreamSource`). A collection in memory (a list, a tuple) is read
on the loop; any other sync source (a generator, a stream) is read, and its deliveries
acknowledged, in a worker thread, so a blocking read never stalls the event loop. The
deliveries resolved while one such hop is in flight are reported in the next, together,
inside the source's ``resolving()`` if it has one (a group's entries in one XACK); a
hop waits :data:`REPORT_WAIT` before it starts, so that one job at a time (concurrency
1) does not pay a thread switch per job.
``stop()`` ends the serving also while an async source waits for its next item.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Collection,
    Coroutine,
)
from typing import Any, Protocol

from lockworker.aio import lane, redrive
from lockworker.aio.defer import AsyncDeferrals
from lockworker.aio.feed import deliveries
from lockworker.aio.jobrun import SERVING
from lockworker.aio.slots import Seen, Slots
from lockworker.aio.wake import wait
from lockworker.config import count
from lockworker.model.state import Outcome
from lockworker.runtime import events, pools
from lockworker.serving import rules
from lockworker.serving.delivery import Delivery, Together, together
from lockworker.serving.held import IDLE_WAIT, Sighting
from lockworker.serving.rules import (
    JOB_ERROR,
    REPORT_FAILED,
    STARTED,
    STOPPED,
    shares_out,
)

REPORT_WAIT = 0.002
"""Seconds a hop of reports to a worker thread waits before it starts, for the reports
of the next jobs to share it (a stream saves its position every 50 ms at most anyway)."""


class AsyncServable(Protocol):
    """What serving needs of the worker; :class:`lockworker.aio.Worker` is one."""

    client: Any
    namespace: str
    owner: str
    run_id: str
    _logger: Any
    _stop: threading.Event
    _retention_ms: int
    _source_stops: set[threading.Event]
    _stop_events: set[asyncio.Event]

    @property
    def stopping(self) -> bool: ...

    def _started(self) -> None: ...

    def _stop_event(self) -> asyncio.Event: ...

    def process(self, job_id: str, payload: Any = None) -> Awaitable[Outcome]: ...


async def serve(worker: AsyncServable, source: object, *, concurrency: int = 4) -> None:
    """Process every job of ``source`` with ``worker``; see the module docstring."""
    concurrency = count(concurrency, "concurrency")
    attach = getattr(source, "attach", None)
    if attach is not None:  # a stream's group takes the worker's lease and role
        attach(worker)
    worker._started()
    # A collection in memory is read on the loop; anything else that is not async (a
    # generator, a stream) may block, and is read in a worker thread.
    blocking = not hasattr(source, "__aiter__") and not isinstance(source, Collection)
    server = _Server(
        worker, concurrency, blocking, getattr(source, "resolving", None),
        ranked=not shares_out(source),
    )
    if server.deferrals is not None:  # a following backup trails its primary
        server.deferrals.trail(source)
    await server.run(deliveries(source, worker, blocking))


def _report_all(
    deliveries: list[Delivery], resolving: Together | None
) -> list[tuple[BaseException, dict[str, str]]]:
    """Report ``deliveries`` resolved, in a worker thread: inside the source's
    ``resolving()`` if it has one, so that it may batch their work (a group's XACK).
    What raised (each report is tried; ``resolving`` too), with the failed job's id."""
    failed: list[tuple[BaseException, dict[str, str]]] = []
    with together(resolving, lambda exc: failed.append((exc, {}))):
        for delivery in deliveries:
            try:
                delivery.resolved()
            except BaseException as exc:
                failed.append((exc, {"job_id": delivery.job_id}))
    return failed


class _Server:
    def __init__(
        self, worker: AsyncServable, concurrency: int, blocking: bool,
        source_resolving: Together | None = None, *, ranked: bool = True,
    ) -> None:
        self.worker = worker
        self.blocking = blocking
        self.source_resolving = source_resolving
        """The source's ``resolving()``, if any: reports made together go inside it."""
        self.concurrency = concurrency
        self.slots = Slots(concurrency)
        self.running = rules.Running()
        self.tasks: set[asyncio.Task[None]] = set()
        self.unreported: list[Delivery] = []
        """Resolved deliveries of a blocking source not yet reported to it."""
        self.reporting: asyncio.Future[None] | None = None
        self.error: BaseException | None = None
        self.deferrals = AsyncDeferrals(
            worker, self.dispatch, self.resolved, ranked=ranked
        ) if rules.wanted(worker) else None
        self.lane = lane.Lane(self) if rules.open_to(worker) else None  # claims, DONEs batched
        self.cancelled = False
        self.log = events.logger(
            events.SERVE, worker._logger,
            namespace=worker.namespace, owner=worker.owner, run=worker.run_id,
        )

    async def run(self, deliveries: AsyncGenerator[Delivery, None]) -> None:
        w = self.worker
        self.log.info(STARTED, concurrency=self.concurrency)
        pools.say_if_short(self.log, w.client, self.concurrency)
        try:
            async for delivery in deliveries:
                if rules.ends(w, self.error):
                    break
                if self.deferrals is not None and self.deferrals.deferring():
                    await self.deferrals.add(delivery)  # a backup while a primary serves
                elif not await self.dispatch(delivery, None) or w.stopping:
                    break
            if self.deferrals is not None:  # a source that ended: held back still counts
                stopped = w._stop_event()
                while len(self.deferrals) and not w.stopping and self.error is None:
                    await wait(stopped, IDLE_WAIT)
                w._stop_events.discard(stopped)
        except asyncio.CancelledError:
            # Wherever serving was cancelled (reading the source, waiting for a slot),
            # so are its jobs: a running hook's lease is released at once.
            self.cancel()
            raise
        finally:
            await deliveries.aclose()
            if self.deferrals is not None:
                await self.deferrals.close()
            await self.drain()
            if self.reporting is not None:  # the last resolutions reach the source
                await asyncio.gather(self.reporting, return_exceptions=True)
            self.log.info(STOPPED, stopping=w.stopping)
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        """Cancel the running jobs and the claims; completions due are still sent."""
        self.cancelled = True
        for task in self.tasks:
            task.cancel()
        if self.lane is not None:
            self.lane.cancel()

    async def drain(self) -> None:
        """Wait for the jobs and the lane's claims and completions. A cancellation
        meanwhile cancels the jobs and claims, and still waits: for the jobs to hand
        their leases back, and for the completions due to be sent; then it goes on."""
        cancelled: asyncio.CancelledError | None = None
        while True:
            running = [*self.tasks, *(self.lane.busy() if self.lane else [])]
            if not running:
                break
            try:
                await asyncio.shield(asyncio.gather(*running, return_exceptions=True))
            except asyncio.CancelledError as exc:
                cancelled = exc
                self.cancel()
        if cancelled is not None:
            raise cancelled

    async def dispatch(self, delivery: Delivery, seen: Sighting | None) -> bool:
        """Run ``delivery`` in a free slot (waits for one), with what a look of the job
        just saw, if any; False if the serving ends instead."""
        w = self.worker
        await self.slots.take()
        if rules.ends(w, self.error):
            self.slots.give()
            return False
        if not self.running.claim(delivery):  # runs behind the delivery of its id
            self.slots.give()
            return True
        if seen is None and self.lane is not None and self.lane.takes() and (
            self.lane.add(delivery)
        ):
            return True
        self._track(self.work(delivery, seen))
        return True

    def _track(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        if self.cancelled:  # started by the lane after the serving was cancelled
            task.cancel()

    async def work(
        self, delivery: Delivery, seen: Sighting | None = None,
        outcome: Awaitable[rules.Result] | None = None,
    ) -> None:
        """Run ``delivery`` (through ``process``, or to ``outcome`` for the lane), then
        the deliveries of its job that came meanwhile; the slot is given back at the
        end, unless its hook returned in the lane (it gave it back: DONE on the way)."""
        gave = False
        try:
            if not await self.run_one(delivery, seen, outcome):
                gave = True
                return
            current = self.following(delivery)
            while current is not None:
                await self.run_one(current)
                current = self.following(current)
        finally:
            if not gave:
                self.slots.give()

    def following(self, delivery: Delivery) -> Delivery | None:
        """The next delivery of ``delivery``'s job that came while it ran, if serving
        goes on; else the job is no longer running."""
        return self.running.following(delivery, going_on=not rules.ends(self.worker, self.error))

    async def run_one(
        self, delivery: Delivery, seen: Sighting | None = None,
        outcome: Awaitable[rules.Result] | None = None,
    ) -> bool:
        """Run ``delivery`` to its outcome and report it; False if the lane reports it
        instead (its hook returned, its complete step is still to be sent)."""
        gate = self.slots if seen is None else Seen(self.slots, seen)
        result: rules.Result
        try:
            if outcome is None:
                with SERVING.lend(
                    self.worker, gate, delivery.payload if delivery.decoded else None
                ):
                    result = await self.worker.process(delivery.job_id, delivery.payload)
            else:
                result = await outcome
        except Exception as exc:  # a cancellation is no error of the job's
            skip = rules.skipped(exc)
            self.log.error(
                JOB_ERROR, job_id=delivery.job_id, error=events.describe(exc), skipped=skip
            )
            if skip:
                delivery.not_done()
                await self.resolved(delivery)
            elif self.error is None:
                self.error = exc
            return True
        if isinstance(result, rules.Pending):
            return False
        await self.ended(delivery, result)
        return True

    async def ended(self, delivery: Delivery, outcome: Outcome) -> None:
        """What ``outcome`` asks (:func:`~lockworker.serving.rules.ended`): a given-up
        job's origin kept, the delivery reported resolved."""
        keep, resolve = rules.ended(outcome)
        if keep:
            delivery.not_done()
            await redrive.keep_async(self.worker, delivery, self.log)
        if resolve:
            await self.resolved(delivery)

    # -- the lane's host (lockworker.aio.lane.Host) -------------------------------------

    @property
    def ending(self) -> bool:
        return rules.ends(self.worker, self.error, self.cancelled)

    def spawn(self, delivery: Delivery, outcome: Awaitable[rules.Result]) -> None:
        self._track(self.work(delivery, None, outcome))

    def resume(self, delivery: Delivery, outcome: Awaitable[rules.Result]) -> None:
        self._track(self._in_slot_again(delivery, outcome))

    async def settled(self, delivery: Delivery, outcome: Outcome) -> None:
        await self.ended(delivery, outcome)
        current = self.following(delivery)
        if current is not None:  # the job's next delivery, in a slot taken again
            self._track(self._in_slot_again(current, None))

    async def _in_slot_again(self, delivery: Delivery, outcome: Awaitable[Any] | None) -> None:
        """Run ``delivery`` (to ``outcome``, if given) for a job whose hook returned,
        once it has a slot again."""
        try:
            await self.slots.take(first=True)
        except BaseException:
            if isinstance(outcome, Coroutine):
                outcome.close()  # never started: nothing of it to undo
            raise
        await self.work(delivery, None, outcome)

    def dropped(self, delivery: Delivery) -> None:
        self.running.drop(delivery)
        self.slots.give()

    async def resolved(self, delivery: Delivery) -> None:
        """Report ``delivery`` resolved. A blocking source's report may make a Redis
        call (a stream saves its position), so it runs in a worker thread; reports that
        come while one hop is in flight go together in the next (:meth:`_report`). The
        job's slot does not wait for it; the serving's end does."""
        if not self.blocking:
            try:
                delivery.resolved()
            except BaseException as exc:
                self.report_failed(exc, job_id=delivery.job_id)
            return
        self.unreported.append(delivery)
        if self.reporting is None or self.reporting.done():
            self.reporting = asyncio.ensure_future(self._report())

    async def _report(self) -> None:
        await asyncio.sleep(REPORT_WAIT)  # the next jobs' reports share the hop
        while self.unreported:
            taken, self.unreported = self.unreported, []
            for exc, fields in await asyncio.to_thread(_report_all, taken, self.source_resolving):
                self.report_failed(exc, **fields)

    def report_failed(self, exc: BaseException, **fields: Any) -> None:
        """A source's report raised (its own code): the serving stops, raising it at
        its end, and no task of the serving ends with it (its jobs would not end)."""
        self.log.error(REPORT_FAILED, error=events.describe(exc), **fields)
        if self.error is None:
            self.error = exc
