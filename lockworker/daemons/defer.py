"""A backup's deliveries while a primary serves: looked at in batches, not one by one.

While a primary of its namespace serves, a backup under ``serve`` would otherwise start
a contest for every delivery at once: look, listen on the job's channel, look again,
wait for the primary's DONE, look a third time. Against a primary that finishes its
jobs within ``backup_delay``, all of that only learns that the job is done. So a backup
holds each delivery back for ``backup_delay`` (the time it would let a free job lie
anyway), then looks at every delivery that came due in one round trip
(:mod:`lockworker.protocol.batch`, one read-only script per job), and:

- settles a job done by another run there and then, reported as its contest would
  report it (:mod:`lockworker.daemons.looked`), unless the worker's ``process`` is
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
  contest per process per job, not one), and reads no more than :data:`AHEAD` such
  jobs ahead of it.

It hands everything over at once, looked at in one batch, when a holder hands a job
over (the settle of a failure due again at once, or a release on stop, publishes on
the namespace's handover channel, :func:`lockworker.model.presence.handover_channel`)
and when no primary serves any more (its presence wakes it): a failed job is taken
over at once, a crashed primary's jobs at the lease's end. A backup costs the server
one command per job per ``backup_delay`` behind a live, fast primary, in one round
trip per batch, and listens on one channel, not one per job.

With no primary, a backup holds back behind the backups ranked before it in the same
way (not for a shared group's entries). Deliveries held back are not resolved: after a
stop or a crash the stream serves them again. At most :data:`LIMIT` are held back at
once (:data:`AHEAD` not reached by the serving); the source waits for room.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lockworker.daemons.jobrun import JobRun
from lockworker.daemons.looked import done_elsewhere, watched
from lockworker.daemons.sources import Delivery
from lockworker.errors import LockworkerError
from lockworker.model import policy
from lockworker.model.keys import JobKeys
from lockworker.model.policy import FreeClock
from lockworker.model.presence import handover_channel
from lockworker.model.state import Role, Snapshot
from lockworker.protocol import batch
from lockworker.protocol.script import inspect_step

LIMIT = 4 * batch.MAX_BATCH
"""Deliveries a backup holds back at most; the source is read again once there is room."""

AHEAD = batch.MAX_BATCH // 4
"""Held-back jobs the serving has not reached yet (a primary behind on a backlog) that a
backup holds at most: each is looked at again at most every ``backup_delay``, so the
source is not read further ahead of the serving than this."""

IDLE_WAIT = 0.05
"""Seconds the thread waits at most between two checks of the held-back deliveries."""

@dataclass(frozen=True)
class Sighting:
    """What a backup's look at a held-back job saw, for the contest ``process`` runs:
    the snapshot (its first look, free) and, for a job that has lain free for
    ``backup_delay`` already, its free clock (the contest then competes at once)."""

    snapshot: Snapshot
    free: FreeClock | None = None


Seen = tuple[Delivery, "Sighting | None"]
"""A delivery and what a look saw of its job (None: the look met an error)."""

Looked = tuple[Delivery, JobKeys]
"""A held-back delivery and the keys of its job, about to be looked at."""

Dispatch = Callable[[Delivery, "Sighting | None"], object]
Settle = Callable[[Delivery], object]
"""How ``serve`` settles a delivery resolved without a contest (its resolution reported)."""


def resolve(delivery: Delivery) -> None:
    """The sync ``serve``'s :data:`Settle`: report the delivery resolved, in this thread."""
    delivery.resolved()


class Held:
    """Held-back deliveries, the first due first, and what to do after a look at them.

    No I/O and no locking: the sync side's thread holds its lock around it, the
    asyncio side's task needs none. One definition of the decisions for both."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self._heap: list[tuple[float, int, Delivery]] = []
        self._seq = itertools.count()
        self._told: dict[str, Snapshot] = {}
        """The holder each held-back job was last reported held by (``on_locked``)."""
        self._free: dict[str, FreeClock] = {}
        """Since when each held-back job seen free has lain free (its free clock)."""
        self._delivered: dict[str, tuple[float, int]] = {}
        """When each held-back job was first delivered to this process, and in which
        order: a job nobody ever took has lain free since then, once the serving has
        reached it (:meth:`_free_clock`)."""
        self._arrivals = itertools.count()
        self._passed = -1
        """The latest delivery (in order) a look saw taken: jobs delivered before it and
        never taken were passed over."""
        self._moved = -math.inf
        """When a look last saw a job resolved: the serving moves."""
        self._ahead: set[str] = set()
        """Held-back jobs the serving has not reached yet (:data:`AHEAD` at most)."""

    def __len__(self) -> int:
        return len(self._heap)

    def full(self) -> bool:
        """Whether the source waits before another delivery is held back: :data:`LIMIT`
        are, or :data:`AHEAD` the serving has not reached."""
        return len(self._heap) >= LIMIT or len(self._ahead) >= AHEAD

    def push(self, at: float, delivery: Delivery) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), delivery))

    def hold(self, now: float, delivery: Delivery) -> None:
        """Hold a new delivery back: its first look comes once ``delay`` has run out
        since ``now`` (not a moment early, as :meth:`take` allows: a job nobody took
        has then lain free long enough, and is handed over at that one look)."""
        if delivery.job_id not in self._delivered:
            self._delivered[delivery.job_id] = (now, next(self._arrivals))
        self.push(now + self.delay + IDLE_WAIT, delivery)

    def take(self, now: float, everything: bool) -> list[Delivery]:
        """The deliveries due at ``now`` (all with ``everything``), a batch at most.
        Those due within :data:`IDLE_WAIT` come along: a look a moment early costs
        nothing, a round trip of its own does."""
        taken: list[Delivery] = []
        horizon = now + IDLE_WAIT
        while self._heap and len(taken) < batch.MAX_BATCH and (
            everything or self._heap[0][0] <= horizon
        ):
            taken.append(heapq.heappop(self._heap)[2])
        return taken

    def wait_for(self, now: float) -> float:
        """How long to wait before the next delivery is due (at most :data:`IDLE_WAIT`)."""
        if not self._heap:
            return IDLE_WAIT
        return max(0.0, min(IDLE_WAIT, self._heap[0][0] - IDLE_WAIT - now))

    @staticmethod
    def keyed(namespace: str, due: list[Delivery]) -> tuple[list[Looked], list[Delivery]]:
        """The deliveries to look at, with their job's keys, and those whose job id names
        no job (for ``process``, which says why)."""
        looked: list[Looked] = []
        bad: list[Delivery] = []
        for delivery in due:
            try:
                looked.append((delivery, JobKeys.of(namespace, delivery.job_id)))
            except LockworkerError:
                bad.append(delivery)
        return looked, bad

    def after_look(
        self, looked: list[Looked], seen: list[Any], now: float,
        deferring: bool, hold_free: bool = True,
    ) -> tuple[list[Seen], list[Seen]]:
        """Hold back again what is still held by another (while a primary serves), and,
        with ``hold_free``, a free job until it has lain free for ``backup_delay``, and
        (while a primary serves) a job nobody took that the serving has not reached
        (:meth:`_free_clock`); the rest, with what was seen of it, goes to ``process``
        (the first list). ``seen``:
        per job, its snapshot or the error its look met (``process`` meets it again and
        says so). The second list: jobs held back again whose holder was not reported
        yet, for ``on_locked`` (a backup keeps watch, and says so once per holder)."""
        handed: list[Seen] = []
        news: list[Seen] = []
        self._progress(looked, seen, now)
        for (delivery, _), snapshot in zip(looked, seen, strict=True):
            job_id = delivery.job_id
            self._ahead.discard(job_id)
            if not isinstance(snapshot, Snapshot):
                handed.append((delivery, None))
                self._forget(job_id)
                continue
            again = policy.look_again_at(snapshot, now, self.delay)
            if again is not None and deferring:
                self.push(again, delivery)
                self._free.pop(job_id, None)
                if policy.is_news(self._told.get(job_id), snapshot):
                    self._told[job_id] = snapshot
                    news.append((delivery, Sighting(snapshot)))
                continue
            free: FreeClock | None = None
            if deferring and policy.lies_free(snapshot):
                free = self._free_clock(job_id, snapshot, now)
                if free is None:  # the serving has not reached it yet: look again
                    self._ahead.add(job_id)  # when it would have stalled, if it stops
                    self.push(self._moved + self.delay + IDLE_WAIT, delivery)
                    continue
                if hold_free and now < free[0] + self.delay:
                    # The primary normally takes it meanwhile: its DONE is seen at the
                    # next look, in a batch, instead of by a contest of its own. That
                    # look comes once the delay has run out, not a moment early as
                    # :meth:`take` allows (early, it would only hold the job again).
                    self._free[job_id] = free
                    self.push(free[0] + self.delay + IDLE_WAIT, delivery)
                    continue
            handed.append((delivery, Sighting(snapshot, free)))
            self._forget(job_id)
        return handed, news

    def _progress(self, looked: list[Looked], seen: list[Any], now: float) -> None:
        """Learn from a look how far the serving got: a job resolved means it moves; a
        job taken means every job delivered before it was reached."""
        for (delivery, _), snapshot in zip(looked, seen, strict=True):
            if not isinstance(snapshot, Snapshot):
                continue
            if snapshot.resolved:
                self._moved = now
            if snapshot.token:
                arrival = self._delivered.get(delivery.job_id)
                if arrival is not None and arrival[1] > self._passed:
                    self._passed = arrival[1]

    def _free_clock(self, job_id: str, snapshot: Snapshot, now: float) -> FreeClock | None:
        """The free clock of a free job, or None while the serving has not reached it.

        A job taken before lies free since the look that first saw it so
        (:func:`lockworker.model.policy.free_clock`). A job nobody ever took (no token)
        is left to the primary while it works toward it: until a look saw a job
        delivered after it taken (the serving passed it over: its clock starts now) or
        saw no job resolved for ``delay`` (the serving does not move: it has lain free
        since it came, or since the last job seen resolved). A handover (a failure due
        again at once, a release) does not change that: the job handed over has a token."""
        known = self._free.get(job_id)
        arrival = self._delivered.get(job_id)
        if snapshot.token or known is not None or arrival is None:
            return policy.free_clock(snapshot, known, now)
        if now - self._moved >= self.delay:
            return policy.free_clock(snapshot, None, now, max(arrival[0], self._moved))
        if arrival[1] < self._passed:
            return policy.free_clock(snapshot, None, now)
        return None

    def _forget(self, job_id: str) -> None:
        self._told.pop(job_id, None)
        self._free.pop(job_id, None)
        self._delivered.pop(job_id, None)
        self._ahead.discard(job_id)


def wanted(worker: Any) -> bool:
    """Whether ``worker``'s serving holds deliveries back: a backup with a delay, whose
    protocol batches its steps (the script protocol with a sender; a WATCH/MULTI/EXEC
    or replicated step is sent alone), as its heartbeat's renewals do."""
    return (
        worker.role is Role.BACKUP and worker.backup_delay > 0
        and getattr(worker.protocol, "sender", None) is not None
    )


def deferring(worker: Any, *, ranked: bool = True) -> bool:
    """True while a primary of ``worker``'s namespace serves or, if ``ranked``, while
    none does, a backup ranked before it (:func:`~lockworker.model.presence.acting_until`)."""
    until = worker._view.hold_until if ranked else worker._view.defer_until
    return policy.primary_serving(until, worker.clock.monotonic())



class Deferrals:
    """The held-back deliveries of one ``serve`` call of a backup, and their thread."""

    def __init__(
        self, worker: Any, dispatch: Dispatch, settle: Settle | None = None, *,
        ranked: bool = True,
    ) -> None:
        self.w = worker
        self.dispatch = dispatch
        self.settle = settle or resolve
        self.ranked = ranked
        self.held = Held(float(worker.backup_delay))
        self._cond = threading.Condition(threading.RLock())
        self._thread: threading.Thread | None = None
        self._done = False
        self._looking = 0
        """Deliveries taken from the heap and not yet handed over or held back again."""

    def deferring(self) -> bool:
        return deferring(self.w, ranked=self.ranked)

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
            while not self.w.stopping and not self._done:
                everything = news.is_set() or not self.deferring()
                news.clear()
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
        steps = [inspect_step(keys) for _, keys in looked]
        try:
            seen = self.w._call(
                lambda: batch.send(self.w.client, steps), "look at held-back jobs"
            ) if steps else []
        except LockworkerError:
            seen = [None] * len(steps)
        with self._cond:
            handed, news = self.held.after_look(
                looked, seen, self.w.clock.monotonic(), self.deferring(),
                hold_free=hold_free,
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

    def _locked(self, delivery: Delivery, seen: Sighting | None) -> None:
        """Report a job held by another as its contest would (``job.locked``, then
        ``on_locked``): a backup keeps watch on it, in batches."""
        assert seen is not None
        found = watched(self.w, delivery)
        if found is not None:
            JobRun(self.w, *found).observe(seen.snapshot)
