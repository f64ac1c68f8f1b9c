"""Serving's lane for jobs a contest would take at once, in threads: batched claims,
and completions group-committed by serving, not awaited by each job's thread.

The twin of :mod:`lockworker.aio.lane`, by the same rules
(:mod:`lockworker.serving.rules`: the steps, what their answers decide). ``serve`` runs each
delivery's ``process`` in a pool thread, whose contest acquires the job's lease in a
step of its own, runs ``on_acquired``, and waits for the complete step. For a worker
that serves through its own ``process`` (an override sees every job) and whose contest
would compete at once (a primary, or a backup while no primary serves):

- the lane's thread sends the acquire steps of every delivery that waits for a claim
  (one script per job, each atomic, as ``process`` sends it) and the complete steps of
  every job whose hook returned, together, in one round trip; what comes meanwhile
  goes in the next, so no claim and no DONE waits more than the round trip in flight;
- each granted job runs its attempt in a pool thread: ``process``'s own
  (:meth:`lockworker.daemons.jobrun.JobRun.attempt`), which differs only in how its
  complete step is sent: once its hook returned, the attempt hands its slot back and
  queues the step (``finish``) instead of sending it alone, so its thread and its
  slot serve the next job while its DONE is on the way (``serve``'s concurrency
  bounds the hooks running at once, not the DONE records in flight);
- the lane's thread reports the jobs its complete steps settled.

Everything else is the job's contest, as ``process`` runs it, in a pool thread: a job
not granted, a hook that raised (its failure or stop settled by the attempt, as in
``process``), a complete step refused or answered with an error (sent again alone,
:meth:`~lockworker.daemons.jobrun.JobRun.send_done`, in a slot taken again, ahead of
new jobs). Each thread hop of
a job costs a switch or two; the per-job contest cost about two dozen (its round
trips, the batcher's hand-offs)."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any, Protocol

from lockworker.daemons.jobrun import Holding, JobRun
from lockworker.model.state import Grant, Outcome
from lockworker.protocol.batch import send
from lockworker.runtime.park import Slots
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

Claim = tuple[Delivery, JobRun]
"""A delivery waiting for its job's claim, and the run that will take its grant."""
Complete = tuple[Delivery, JobRun, Holding]
"""A delivery whose hook returned, waiting for its job's DONE."""


class Host(Protocol):
    """What the lane needs of the serving that owns it (:mod:`lockworker.daemons.serve`)."""

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

    def submit(self, delivery: Delivery, outcome: Callable[[], Result] | None) -> None:
        """Finish ``delivery`` in a pool thread with ``outcome()`` (as ``process``'s
        result: its errors handled as the serving handles those; None: ``process``
        itself), in its slot."""
        ...

    def resume(self, delivery: Delivery, outcome: Callable[[], Result]) -> None:
        """As :meth:`submit`, for a job whose hook returned: once it has a slot again
        (ahead of new jobs)."""
        ...

    def settled(self, delivery: Delivery, outcome: Outcome) -> None:
        """``delivery``'s job, whose hook returned, ended with ``outcome``: report it,
        then its id's next delivery, if any, in a slot taken again."""
        ...

    def dropped(self, delivery: Delivery) -> None:
        """``delivery`` never ran (the serving stops): free its slot, unresolved."""
        ...

    def resolving(self) -> contextlib.AbstractContextManager[None]:
        """Reports made inside go together (a group's entries in one XACK)."""
        ...


class Lane:
    """The batched claims and completions of one ``serve`` call, and their thread."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.w = host.worker
        self._cond = threading.Condition()
        self._trips: Trips[Claim, Complete] = Trips()
        self._closed = False
        self._thread: threading.Thread | None = None

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
        run = JobRun(self.w, keys, payload, log, self.host.slots)
        with self._cond:
            self._trips.claims.append((delivery, run))
            self._cond.notify()
            self._start()
        return True

    def _start(self) -> None:
        """Start the lane's thread, if not yet (called holding ``_cond``)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._sending, name="lockworker-lane", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        """End the thread, once no job of the serving runs any more."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10.0)

    def _take(self) -> tuple[list[Claim], list[Claim], list[Complete]]:
        """The claims dropped, the claims and the completions to send (:meth:`Trips.take`),
        waiting for some; nothing once the lane is closed and nothing is left."""
        with self._cond:
            while not (self._trips or self._closed):
                self._cond.wait()
            return self._trips.take(ending=self.host.ending)

    def _sending(self) -> None:
        """Send what is queued, claims and completions in one round trip, until the
        lane closes: no claim and no DONE waits more than the round trip in flight."""
        w = self.w
        while True:
            dropped, claims, completes = self._take()
            if not (dropped or claims or completes):
                return
            for delivery, _ in dropped:
                self.host.dropped(delivery)
            steps = round_trip(w, [run for _, run in claims], [(run, h) for _, run, h in completes])
            if not steps:
                continue
            sent = self._trip(claims, completes, steps)
            if sent is not None:
                answers, sent_at = sent
                self._granted(claims, answers[: len(claims)], sent_at)
                self._settled(completes, answers[len(claims):])

    def _trip(
        self, claims: list[Claim], completes: list[Complete], steps: list[Any]
    ) -> tuple[list[Any], float] | None:
        """Send one round trip's ``steps``: their answers and when they were sent; None
        if the round trip failed (every job of it then meets the error in a pool
        thread, as its step alone would)."""
        w = self.w
        sent_at = w.clock.monotonic()
        tries = 0

        def trip() -> list[Any]:
            nonlocal tries
            tries += 1  # a retry's claims follow ones whose replies were lost
            return send(w.client, steps)

        try:
            answers = w._call(trip, SENDS[bool(claims), bool(completes)])
        except Exception as exc:
            for delivery, _ in claims:
                self._unclaimed(delivery, functools.partial(_raise, exc))
            for delivery, _, _ in completes:
                self.host.resume(delivery, functools.partial(_raise, exc))
            return None
        return owned(claims, answers, unread=tries > 1), sent_at

    def _granted(self, claims: list[Claim], answers: list[Any], sent_at: float) -> None:
        grants, rest = granted(claims, answers)
        for (delivery, run), grant in grants:
            self.host.submit(delivery, functools.partial(
                self._attempt, delivery, run, grant, sent_at
            ))
        for delivery, run in rest:  # held by another, resolved, or an error
            self._unclaimed(delivery, run.run)

    def _unclaimed(self, delivery: Delivery, outcome: Callable[[], Result] | None) -> None:
        """A delivery whose claim was not granted: ``outcome()`` in a pool thread, in
        the slot the delivery took."""
        self.host.submit(delivery, outcome)

    def _attempt(self, delivery: Delivery, run: JobRun, grant: Grant, sent_at: float) -> Result:
        """The granted job's attempt, as ``process`` makes it (:meth:`JobRun.attempt`),
        its DONE sent by the lane's thread (:meth:`_finish`); an attempt that did not end
        the job goes on to its contest."""
        finish = functools.partial(self._finish, delivery, run)
        return run.attempt(grant, sent_at, finish) or self._contest(delivery, run)

    def _finish(self, delivery: Delivery, run: JobRun, h: Holding) -> Result:
        """How the lane sends the DONE of a hook that returned: its slot given back, the
        step queued for the lane's next round trip (:data:`PENDING`)."""
        self.host.slots.give()
        self._queue((delivery, run, h))
        return PENDING

    def _contest(self, delivery: Delivery, run: JobRun) -> Result:
        """The job's contest after its attempt, in the calling (pool) thread."""
        return run.run()

    def _queue(self, complete: Complete) -> None:
        """A DONE for the lane's thread to send in its next round trip."""
        with self._cond:
            self._trips.completes.append(complete)
            self._cond.notify()

    def _settled(self, completes: list[Complete], replies: list[Any]) -> None:
        if not completes:
            return
        with self.host.resolving():  # one thread reports them all: together
            for (delivery, run, h), reply in zip(completes, replies, strict=True):
                if after_done(reply) is After.AGAIN:  # an error: the step again, alone
                    self.host.resume(delivery, functools.partial(_again, run, h))
                    continue
                outcome = run.completed(h, reply)
                if outcome is None:  # the lease was lost: the contest goes on
                    self.host.resume(delivery, run.run)
                else:
                    self.host.settled(delivery, outcome)


def _again(run: JobRun, h: Holding) -> Outcome:
    """A DONE the round trip answered with an error: sent again alone, as ``process``
    sends it (:meth:`JobRun.send_done`); the contest goes on if it did not end the job."""
    return run.send_done(h) or run.run()


def _raise(exc: Exception) -> Outcome:
    """``exc`` as the outcome of the job's step that met it (the serving handles it as
    an error of ``process``)."""
    raise exc
