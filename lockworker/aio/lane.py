"""``aio`` serving's lane for jobs a contest would take at once: batched claims, and
completions group-committed by serving, not awaited by each job.

``serve`` hands each delivery to ``process``, whose contest acquires the job's lease in
a step of its own, runs ``on_acquired``, and awaits the complete step. For a worker
that serves through its own ``process`` (an override sees every job, so it gets every
job) and whose contest would compete at once (a primary, or a backup while no primary
serves), the lane takes the very same steps in bulk, by the sync lane's rules
(:mod:`lockworker.serving.rules`):

- one sending task sends the acquire steps of every delivery that waits for a claim
  (one script per job, each atomic, as ``process`` sends it) and the complete steps of
  every job whose hook returned, together, in one round trip; what comes meanwhile
  goes in the next, so no claim and no DONE waits more than the round trip in flight;
- each granted job runs its attempt in a task of its own: ``process``'s own
  (:meth:`lockworker.aio.jobrun.AsyncJobRun.attempt`: the lease renewed by the
  worker's heartbeat, ``on_lost``, the same events), which differs only in how its
  complete step is sent: once its hook returned, the attempt hands its slot back and
  queues the step (``finish``) instead of sending it alone, and the task ends; its
  slot then serves the next job while its DONE is on the way;
- the sending task is never cancelled: a complete step, once due, is sent, as
  ``process`` shields it. A serving cancelled meanwhile sends no claim any more, and
  hands back every grant of a claim in flight (the attempt refunded), as a cancelled
  acquire does.

Everything else is the job's contest, as ``process`` runs it, in a task of its own: a
job not granted (held by another, done, or an error: the contest looks again and
decides), a hook that raised (its failure, stop or cancellation settled by the
attempt, as in ``process``), a complete step refused or answered with an error (sent
again alone, :meth:`~lockworker.aio.jobrun.AsyncJobRun.send_done`, in a slot taken
again, ahead of new jobs)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Coroutine
from typing import Any, Protocol

from lockworker.aio.batcher import send
from lockworker.aio.jobrun import AsyncJobRun, Holding
from lockworker.aio.slots import Slots
from lockworker.model.state import Grant, Outcome
from lockworker.serving.delivery import Delivery
from lockworker.serving.looked import watched
from lockworker.serving.rules import (
    PENDING,
    SENDS,
    After,
    Result,
    Trips,
    after_done,
    competes_at_once,
    granted,
    owned,
    round_trip,
)

Claim = tuple[Delivery, AsyncJobRun]
"""A delivery waiting for its job's claim, and the run that will take its grant."""
Complete = tuple[Delivery, AsyncJobRun, Holding]
"""A delivery whose hook returned, waiting for its job's DONE."""


class Host(Protocol):
    """What the lane needs of the serving that owns it (:mod:`lockworker.aio.serve`)."""

    worker: Any

    @property
    def slots(self) -> Slots:
        """The serving's slots: lent to each run, and given back by a hook that
        returned (its DONE on the way)."""
        ...

    @property
    def ending(self) -> bool:
        """The serving stops: no job starts any more."""
        ...

    def spawn(self, delivery: Delivery, outcome: Awaitable[Result]) -> None:
        """Finish ``delivery`` in a task of its own, with ``outcome`` (as ``process``'s
        result: its errors handled as the serving handles those)."""
        ...

    def resume(self, delivery: Delivery, outcome: Awaitable[Result]) -> None:
        """As :meth:`spawn`, for a job whose hook returned: once it has a slot again
        (ahead of new jobs)."""
        ...

    async def settled(self, delivery: Delivery, outcome: Outcome) -> None:
        """``delivery``'s job, whose hook returned, ended with ``outcome``: report it,
        then its id's next delivery, if any, in a slot taken again."""
        ...

    def dropped(self, delivery: Delivery) -> None:
        """``delivery`` never ran (the serving stops): free its slot, unresolved."""
        ...


class Lane:
    """The batched claims and completions of one ``serve`` call (see the module)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.w = host.worker
        self._trips: Trips[Claim, Complete] = Trips()
        self._sending: asyncio.Task[None] | None = None
        self._cancelled = False

    def takes(self) -> bool:
        """Whether a new delivery goes in the lane (:func:`competes_at_once`)."""
        return competes_at_once(self.w)

    def add(self, delivery: Delivery) -> bool:
        """Claim ``delivery``'s job in the next batch (its slot taken); False if
        ``process`` would refuse its id or payload (the serving runs it there, to
        report why)."""
        found = watched(self.w, delivery)
        if found is None:
            return False
        keys, payload, log = found
        self._trips.claims.append(
            (delivery, AsyncJobRun(self.w, keys, payload, log, self.host.slots))
        )
        self._send_soon()
        return True

    def busy(self) -> list[asyncio.Task[None]]:
        """The lane's task, while at work (the serving waits for it at its end)."""
        sending = self._sending
        return [sending] if sending is not None and not sending.done() else []

    def cancel(self) -> None:
        """The serving is cancelled: no claim is sent any more, and the grants of one
        in flight are handed back; completions still go out."""
        self._cancelled = True

    def _send_soon(self) -> None:
        if self._sending is None or self._sending.done():
            self._sending = asyncio.ensure_future(self._send())

    async def _send(self) -> None:
        w = self.w
        while self._trips:
            dropped, claims, completes = self._trips.take(
                ending=self.host.ending or self._cancelled
            )
            for delivery, _ in dropped:
                self.host.dropped(delivery)
            steps = round_trip(w, [run for _, run in claims], [(run, h) for _, run, h in completes])
            if not steps:
                continue
            sent_at = w.clock.monotonic()
            tries = [0]

            def trip(s: list[Any] = steps, tries: list[int] = tries) -> Awaitable[list[Any]]:
                tries[0] += 1  # a retry's claims follow ones whose replies were lost
                return send(w.client, s)

            try:
                answers = await w._call(trip, SENDS[bool(claims), bool(completes)])
            except Exception as exc:
                for delivery, _ in claims:
                    self.host.spawn(delivery, _raise(exc))
                for delivery, _, _ in completes:
                    self.host.resume(delivery, _raise(exc))
                continue
            answers = owned(claims, answers, unread=tries[0] > 1)
            await self._granted(claims, answers[: len(claims)], sent_at)
            await self._settled(completes, answers[len(claims):])

    async def _granted(self, claims: list[Claim], answers: list[Any], sent_at: float) -> None:
        if claims and self._cancelled:  # cancelled in flight: hand every grant back
            await asyncio.gather(*(run.abandon() for _, run in claims))
            for delivery, _ in claims:
                self.host.dropped(delivery)
            return
        grants, rest = granted(claims, answers)
        for (delivery, run), grant in grants:
            self.host.spawn(delivery, self._attempt(delivery, run, grant, sent_at))
        for delivery, run in rest:  # held by another, resolved, or an error
            self.host.spawn(delivery, run.run())

    async def _attempt(
        self, delivery: Delivery, run: AsyncJobRun, grant: Grant, sent_at: float
    ) -> Result:
        """The granted job's attempt, as ``process`` makes it (:meth:`AsyncJobRun.attempt`),
        its DONE sent by the sending task (:meth:`_finish`); an attempt that did not end
        the job goes on to its contest."""
        outcome = await run.attempt(grant, sent_at, functools.partial(self._finish, delivery, run))
        return outcome if outcome is not None else await run.run()

    def _finish(self, delivery: Delivery, run: AsyncJobRun, h: Holding) -> Result:
        """How the lane sends the DONE of a hook that returned: its slot given back, the
        step queued for the next round trip (:data:`PENDING`); the task ends with its
        hook."""
        self.host.slots.give()
        self._trips.completes.append((delivery, run, h))
        self._send_soon()
        return PENDING

    async def _settled(self, completes: list[Complete], replies: list[Any]) -> None:
        for (delivery, run, h), reply in zip(completes, replies, strict=True):
            if after_done(reply, reports_pending=h.reports.pending) is After.COMPLETED:
                outcome = run.completed(h, reply)
                if outcome is not None:
                    await self.host.settled(delivery, outcome)
                    continue
                self.host.resume(delivery, run.run())  # the lease was lost: contest on
                continue
            self.host.resume(delivery, _after(run, h, reply))


async def _after(run: AsyncJobRun, h: Holding, reply: Any) -> Outcome:
    """A completion the batch did not settle plainly: a step answered with an error
    goes again alone, as ``process`` sends it (:meth:`AsyncJobRun.send_done`), and an
    ``on_lost`` report is awaited before the attempt is over."""
    if after_done(reply) is After.AGAIN:
        outcome = await run.reported(h, run.send_done(h))
    else:
        await h.reports.done()
        outcome = run.completed(h, reply)
    return outcome if outcome is not None else await run.run()


def _raise(exc: Exception) -> Coroutine[Any, Any, Outcome]:
    """``exc`` as the outcome of the job's step that met it (the serving handles it as
    an error of ``process``)."""

    async def raising() -> Outcome:
        raise exc

    return raising()
