"""A backup's deliveries while a primary serves: looked at in batches, not one by one.

While a primary of its namespace serves, a backup under ``serve`` would otherwise start
a contest for every delivery at once: look, listen on the job's channel, look again,
wait for the primary's DONE, look a third time. Against a primary that finishes its
jobs within ``backup_delay``, all of that only learns that the job is done. So a backup
holds each delivery back for ``backup_delay`` (the time it would let a free job lie
anyway), then looks at every delivery that came due in one round trip
(:mod:`lockworker.protocol.batch`, one read-only script per job), and:

- settles a job done by another run there and then, reported as its contest would
  report it (:mod:`lockworker.serving.looked`), unless the worker's ``process`` is
  overridden (it sees every job);
- hands to ``process`` (with what it saw, so the contest's first look costs nothing)
  every other job that is resolved or waiting for its retry schedule: the contest then
  decides as it always does;
- holds back again a job whose lease is held, until ``backup_delay`` later or the
  lease's end, whichever comes first (a crashed holder's lease ends; a live one's
  DONE is seen at the next look);
- holds back again a free job until it has lain free for ``backup_delay`` (a new
  token meanwhile starts that clock again), then hands it over with its free clock, so
  its contest competes at once;
- leaves a job nobody ever took (the server knows no token for it) to the primary
  while the primary moves toward it: it is held back again, and looked at again
  ``backup_delay`` after the serving was last seen to move, until a look sees a job
  delivered after it taken (the serving passed it over: it lies free from then) or
  sees no job resolved for ``backup_delay`` (the serving does not move: it has lain
  free since it came, or since the last job seen resolved). A primary behind on a
  backlog is therefore left to work through it: the backup, which reads the same jobs
  in the same order, would otherwise contend for each one it has not reached (a
  contest per process per job, not one), and reads no more than
  :data:`~lockworker.serving.held.AHEAD` such jobs ahead of it. Once such a job has
  waited out ``backup_delay`` on a serving that did not move, the serving stalls
  (crashed, its registration still running, or every slot stuck): until a look sees it
  move again, each new delivery is looked at at once and handed over as lying free
  since the serving last moved (:meth:`~lockworker.serving.held.Held.stalled`).

It hands everything over at once, looked at in one batch, when a holder hands a job
over (the settle of a failure due again at once, or a release on stop, publishes on
the namespace's handover channel, :func:`lockworker.model.presence.handover_channel`)
and when no primary serves any more (its presence wakes it): a failed job is taken
over at once, a crashed primary's jobs at the lease's end. A backup costs the server
one command per job per ``backup_delay`` that its namespace's progress does not
settle, in one round trip per batch, and listens on one channel, not one per job.

Before each look, a backup reading a fan-out stream follows its namespace's progress
(:mod:`lockworker.serving.follow`): a delivery the progress shows DONE is settled
without a look; behind a live primary that keeps up, that is next to every one.

With no primary, a backup holds back behind the backups ranked before it in the same
way (not for a shared group's entries). Deliveries held back are not resolved: after a
stop or a crash the stream serves them again. At most
:data:`~lockworker.serving.held.LIMIT` are held back at once
(:data:`~lockworker.serving.held.AHEAD` not reached by the serving); the source waits
for room. The decisions are :class:`~lockworker.serving.held.Held`'s and
:mod:`lockworker.serving.rules`' (when to defer, one batched look); here the thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from lockworker.daemons.jobrun import JobRun
from lockworker.errors import LockworkerError
from lockworker.model.presence import handover_channel
from lockworker.protocol import batch
from lockworker.protocol.streams import FOLLOW
from lockworker.serving import follow
from lockworker.serving.deferring import DeferralsBase
from lockworker.serving.delivery import Delivery
from lockworker.serving.held import IDLE_WAIT, Held, Looked, Sighting
from lockworker.serving.looked import done_elsewhere, watched
from lockworker.serving.rules import Look, movers

Dispatch = Callable[[Delivery, "Sighting | None"], object]
Settle = Callable[[Delivery], object]
"""How ``serve`` settles a delivery resolved without a contest (its resolution reported)."""


def resolve(delivery: Delivery) -> None:
    """The sync ``serve``'s :data:`Settle`: report the delivery resolved, in this thread."""
    delivery.resolved()


class Deferrals(DeferralsBase):
    """The held-back deliveries of one ``serve`` call of a backup, and their thread."""

    def __init__(
        self, worker: Any, dispatch: Dispatch, settle: Settle | None = None, *,
        ranked: bool = True,
    ) -> None:
        super().__init__(worker, ranked=ranked)
        self.dispatch = dispatch
        self.settle = settle or resolve
        self._news: threading.Event | None = None
        self._cond = threading.Condition(threading.RLock())
        self._thread: threading.Thread | None = None

    def trail(self, source: object) -> None:
        """Have a fan-out ``source`` trail the primary (:meth:`DeferralsBase.trailing_of`);
        the thread starts at once, to listen for handovers before it holds anything."""
        if self.trailing_of(source) is not None:
            self.start()

    def __len__(self) -> int:
        """Deliveries held back, those being looked at included."""
        with self._cond:
            return len(self.held) + self._looking

    def add(self, delivery: Delivery) -> None:
        """Hold ``delivery`` back for ``backup_delay`` (waits while the held-back are full,
        :meth:`Held.full`)."""
        with self._cond:
            while self.held.full() and not self.w.stopping and not self._done:
                self._cond.wait(IDLE_WAIT)
            self.held.hold(self.w.clock.monotonic(), delivery)
            self.start()
        if delivery.urgent and self._news is not None:
            self._news.set()  # a handover's: looked at now, as the handover asked

    def start(self) -> None:
        """Start the thread, if not yet (the first :meth:`add` does)."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lockworker-deferrals", daemon=True
                )
                self._thread.start()

    def close(self) -> None:
        """Stop the thread; deliveries still held back are left unresolved."""
        with self._cond:
            self._done = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=10.0)

    def _run(self) -> None:
        with self.w._hub.listen(handover_channel(self.w.namespace)) as news:
            self._news = news
            while not self.w.stopping and not self._done:
                everything = self.woken(news)
                with self._cond:
                    due = self.held.take(self.w.clock.monotonic(), everything)
                    self._looking = len(due)
                    self._cond.notify_all()  # room for the source
                    wait = self.held.wait_for(self.w.clock.monotonic())
                if not due:
                    self.w.clock.wait(news, wait)
                    continue
                try:
                    self._look(due, hold_free=not everything)
                finally:
                    with self._cond:
                        self._looking = 0

    def _look(self, due: list[Delivery], *, hold_free: bool) -> None:
        """One round trip for ``due``: hand each over, or hold it back again. Every job
        of a batch Redis did not answer goes to ``process``, which meets the error.
        ``hold_free`` is False when everything is handed over at once (a handover, no
        primary serving): a free job then goes to its contest now."""
        looked, bad = Held.keyed(self.w.namespace, due)
        looked = self._follow(looked)
        with self._cond:
            look = Look(self.held, looked)
        try:
            seen = self.w._call(
                lambda: batch.send(self.w.client, look.steps), "look at held-back jobs"
            ) if look.steps else []
        except LockworkerError:
            seen = look.failed()
        with self._cond:
            handed, news = look.decide(
                seen, self.w.clock.monotonic(), deferring=self.deferring(),
                hold_free=hold_free, movers=movers(self.w, ranked=self.ranked),
            )
        for delivery, snapshot in news:
            self._locked(delivery, snapshot)
        for delivery in bad:
            self.dispatch(delivery, None)
        for delivery, snapshot in handed:
            if snapshot is not None and done_elsewhere(self.w, delivery, snapshot.snapshot):
                self.settle(delivery)  # reported as its contest would, without one
            else:
                self.dispatch(delivery, snapshot)

    def _follow(self, looked: list[Looked]) -> list[Looked]:
        """Settle what the namespace's progress shows done (:mod:`lockworker.daemons.
        follow`), reading it first (one call) if it may settle more than last read;
        the rest, to look at."""
        if not follow.follows(self.w):
            return looked
        for stream in self.following.unread(looked):
            try:
                reply = self.w._call(
                    lambda stream=stream: FOLLOW(
                        self.w.client, follow.keys_of(stream), [self.w.namespace]
                    ),
                    "read the progress of stream",
                )
            except LockworkerError:
                continue  # looked at instead
            self.following.learn(stream, reply)
        covered, rest = self.following.split(looked)
        if covered:
            with self._cond:
                self.held.followed(self.w.clock.monotonic(), covered)
            for delivery, _ in covered:
                follow.report(self.w, delivery)
                self.settle(delivery)
        return rest

    def _locked(self, delivery: Delivery, seen: Sighting | None) -> None:
        """Report a job held by another as its contest would (``job.locked``, then
        ``on_locked``): a backup keeps watch on it, in batches."""
        assert seen is not None
        found = watched(self.w, delivery)
        if found is not None:
            JobRun(self.w, *found).observe(seen.snapshot)
