"""Serving at concurrency 1 in the serving thread: the lane without a thread hop per job.

With one slot, ``serve``'s threads only pass each job along: the serving thread reads
it, the lane's thread claims it, a pool thread runs its hook, the lane's thread sends
its DONE. Every hand-off is a thread switch, and on CPython each costs about as much
CPU as a short job's own round trip. At ``concurrency=1`` (a worker that serves
through its own ``process``, whose contest would compete at once: the lane's rules,
:mod:`lockworker.daemons.lane`) the serving thread does the work itself:

- it claims the delivery it read together with those the source has read already (up
  to :data:`CLAIM_AHEAD`), and the DONE of every job whose hook returned since, in one
  round trip, with the lane's very steps;
- it runs the granted jobs' hooks one after another, each in the slot, as a pool
  thread would: the rest of each one's attempt, as the lane makes it
  (:meth:`lockworker.daemons.jobrun.JobRun.hooked`). Each granted job's lease is
  held, and renewed by the heartbeat, from its grant, so one that waits for the
  hooks before it is never stale. A job whose
  lease is no longer valid when its turn comes (the heartbeat could not renew it) does
  not run its hook: its contest decides, in a pool thread;
- a DONE waits for the next claim's round trip, but never longer than
  :data:`DONE_WAIT`: the lane's thread sends what waited that long, so a slow hook, an
  idle source or a full slot never holds the DONE of the jobs before it back.

Everything else is as with the lane, in pool threads: a job not granted (held by
another, resolved, an error), a hook that raised into its job's contest, a DONE
refused or answered with an error. On a stop, or once the serving fails, a granted job
whose hook has not started is released without spending its attempt, as a hook that
raises :class:`~lockworker.StopRequested` is.

What claiming ahead costs: a process killed with granted jobs waiting spends one
attempt of each (at most :data:`CLAIM_AHEAD`), as a crash spends the attempt of the job
it interrupts; their leases run out and other processes take them, as after any crash.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

from lockworker.daemons.jobrun import Holding, JobRun
from lockworker.daemons.lane import Claim, Complete, Host, Lane
from lockworker.errors import StopRequested
from lockworker.serving.delivery import Delivery
from lockworker.serving.looked import watched
from lockworker.serving.rules import PENDING, Result, Turn, granted, round_trip, turn

CLAIM_AHEAD = 16
"""Deliveries claimed in one round trip at most: those the source has read already."""
DONE_WAIT = 0.002
"""Seconds a DONE waits at most for a claim's round trip to share before the lane's
thread sends it alone."""


class InlineHost(Host, Protocol):
    """What serving in the serving thread needs beyond the lane's host."""

    def claim(self, delivery: Delivery) -> bool:
        """Mark the job running (True), or queue it behind the same id (False)."""
        ...

    def work(
        self, delivery: Delivery, seen: Any = None,
        outcome: Callable[[], Result] | None = None,
    ) -> None:
        """Run ``delivery`` to ``outcome()`` in the calling thread, in the slot taken
        for it: reported, and its id's next deliveries run, as a pool thread would."""
        ...


class Inline(Lane):
    """The lane of a ``serve`` call at concurrency 1 (see the module)."""

    def __init__(self, host: InlineHost) -> None:
        super().__init__(host)
        self.inline_host = host
        self._since: float | None = None
        """When the oldest DONE waiting for a round trip was queued."""

    def serve(
        self, first: Delivery, more: Callable[[], Delivery | None], ready: Callable[[], bool]
    ) -> None:
        """Claim ``first`` and the deliveries ``more()`` gives while ``ready()`` (read
        already, and still the lane's), then run the granted jobs' hooks here."""
        batch = [first]
        while len(batch) < CLAIM_AHEAD and ready():
            delivery = more()
            if delivery is None:
                break
            batch.append(delivery)
        claims: list[Claim] = []
        for delivery in batch:
            if not self.inline_host.claim(delivery):
                continue  # runs behind the delivery of its id that runs now
            found = watched(self.w, delivery)
            if found is None:  # ``process`` refuses it: it says why, in a pool thread
                self._unclaimed(delivery, None)
                continue
            keys, payload, log = found
            claims.append((delivery, JobRun(self.w, keys, payload, log, self.host.slots)))
        if not claims:
            return
        with self._cond:
            completes, self._since = self._trips.take_completes(), None
        w = self.w
        steps = round_trip(w, [run for _, run in claims], [(run, h) for _, run, h in completes])
        sent = self._trip(claims, completes, steps)
        if sent is None:
            return
        answers, sent_at = sent
        self._settled(completes, answers[len(claims):])
        grants, rest = granted(claims, answers[: len(claims)])
        started = [(delivery, run, run.start(grant, sent_at)) for (delivery, run), grant in grants]
        for delivery, run in rest:  # held by another, resolved, or an error
            self._unclaimed(delivery, run.run)
        for delivery, run, h in started:
            self.host.slots.take()
            self.inline_host.work(delivery, None, functools.partial(self._turn, delivery, run, h))

    def add(self, delivery: Delivery) -> bool:
        """Never: this lane's claims are sent by the serving thread (:meth:`serve`); a
        delivery dispatched to a slot (a role that changed since it was read) goes
        through ``process`` instead."""
        return False

    def _turn(self, delivery: Delivery, run: JobRun, h: Holding) -> Result:
        """A granted job's turn: its hook (:meth:`JobRun.hooked`, the rest of the
        attempt as the lane makes it), unless the serving stops (released, its attempt
        not spent) or its lease is no longer valid (its contest decides)."""
        now = turn(ending=self.host.ending, lease_valid=h.lease.is_valid(self.w.clock.monotonic()))
        outcome: Result | None
        if now is Turn.RELEASE:
            outcome = run.hook_raised(h, StopRequested())
        elif now is Turn.CONTEST:
            self.w._heartbeat.end(h.lease)  # reports the loss, unless the heartbeat did
            outcome = None
        else:
            outcome = run.hooked(h, functools.partial(self._finish, delivery, run))
        return outcome or self._contest(delivery, run)

    def _contest(self, delivery: Delivery, run: JobRun) -> Result:
        """The job's contest goes on in a pool thread, in the slot this turn took: the
        serving thread serves on meanwhile."""
        self.host.submit(delivery, run.run)
        return PENDING

    def _unclaimed(self, delivery: Delivery, outcome: Callable[[], Result] | None) -> None:
        """``outcome()`` for a delivery claimed here (``process`` if None) in a pool
        thread, in a slot taken for it now (a claim here holds none)."""
        self.host.slots.take()
        self.host.submit(delivery, outcome)

    def _queue(self, complete: Complete) -> None:
        """Queue a DONE for the next claim's round trip; the lane's thread is told only
        of the first one, and sends them if they wait :data:`DONE_WAIT`."""
        with self._cond:
            self._trips.completes.append(complete)
            if self._since is None:
                self._since = self.w.clock.monotonic()
                self._cond.notify()
            self._start()

    def hurry(self) -> None:
        """Send the DONEs that wait now (the serving ends: nothing will share them)."""
        with self._cond:
            if self._since is not None:
                self._since = float("-inf")
                self._cond.notify()

    def _take(self) -> tuple[list[Claim], list[Claim], list[Complete]]:
        """The DONEs that waited :data:`DONE_WAIT` (all of them once the lane closes),
        waiting for some; nothing once the lane is closed and nothing is left."""
        with self._cond:
            while True:
                since = self._since
                if self._trips.completes and (
                    self._closed or since is None or self.w.clock.monotonic() - since >= DONE_WAIT
                ):
                    completes, self._since = self._trips.take_completes(), None
                    return [], [], completes
                if self._closed:
                    return [], [], []
                if since is not None:
                    self._cond.wait(since + DONE_WAIT - self.w.clock.monotonic())
                else:
                    self._cond.wait()

