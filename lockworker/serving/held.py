"""A backup's held-back deliveries and what to do after a look at them: the decisions
of :mod:`lockworker.daemons.defer` (and its asyncio twin), pure: no I/O, no locking,
no clock of their own."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from lockworker.errors import LockworkerError
from lockworker.model import policy
from lockworker.model.keys import JobKeys
from lockworker.model.policy import FreeClock
from lockworker.model.state import Snapshot
from lockworker.protocol import batch
from lockworker.serving.delivery import Delivery

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
        self._stalled: float | None = None
        """The :attr:`_moved` mark at which a look found a job nobody took lying free for
        ``delay`` while the serving did not move: it stalls (it crashed and its
        registration runs on, or every slot is stuck) until a look sees it move again.
        Meanwhile the jobs nobody took are not left to it (:meth:`stalled`)."""
        self._ahead: set[str] = set()
        """Held-back jobs the serving has not reached yet (:data:`AHEAD` at most)."""
        self._witness: tuple[Looked, float] | None = None
        """The newest delivery settled by the progress without a look, and when: the
        next look that goes out anyway looks at its job too, to learn whether the
        serving deferred to did it (:meth:`followed`)."""

    def __len__(self) -> int:
        return len(self._heap)

    def full(self) -> bool:
        """Whether the source waits before another delivery is held back: :data:`LIMIT`
        are, or :data:`AHEAD` the serving has not reached."""
        return len(self._heap) >= LIMIT or len(self._ahead) >= AHEAD

    def stalled(self) -> bool:
        """Whether the serving stalls: nothing it did was seen since a job nobody took
        waited ``delay`` for it. A new delivery is then looked at at once, and a job
        nobody took counts as lying free since the serving last moved, so its contest
        competes at once: a crashed primary's stream is served at full pace while its
        registration still runs, not one ``delay`` per read-ahead."""
        return self._stalled is not None and self._stalled == self._moved

    def push(self, at: float, delivery: Delivery) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), delivery))

    def hold(self, now: float, delivery: Delivery) -> None:
        """Hold a new delivery back: its first look comes once ``delay`` has run out
        since ``now`` (not a moment early, as :meth:`take` allows: a job nobody took
        has then lain free long enough, and is handed over at that one look); at once
        for one a handover asked for (``delivery.urgent``, :mod:`.trail`)."""
        if delivery.job_id not in self._delivered:
            self._delivered[delivery.job_id] = (now, next(self._arrivals))
        at_once = self.stalled() or delivery.urgent
        self.push(now if at_once else now + self.delay + IDLE_WAIT, delivery)

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
        deferring: bool, hold_free: bool = True, *, movers: Collection[str] | None = None,
    ) -> tuple[list[Seen], list[Seen]]:
        """Hold back again what is still held by another (while a primary serves), and,
        with ``hold_free``, a free job until it has lain free for ``backup_delay``, and
        (while a primary serves) a job nobody took that the serving has not reached
        (:meth:`_free_clock`); the rest, with what was seen of it, goes to ``process``
        (the first list). ``seen``:
        per job, its snapshot or the error its look met (``process`` meets it again and
        says so). The second list: jobs held back again whose holder was not reported
        yet, for ``on_locked`` (a backup keeps watch, and says so once per holder).
        ``movers``: the runs whose progress counts as the serving's (None: anyone's)."""
        handed: list[Seen] = []
        news: list[Seen] = []
        self._progress(looked, seen, now, movers)
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

    def followed(self, now: float, covered: list[Looked]) -> None:
        """``covered`` were settled at ``now`` by the namespace's progress, without a
        look: forgotten. A look saw the serving move when it found a job resolved by a
        run deferred to; a job settled so was not looked at, so the newest of them is
        kept as a witness, looked at with the next batch that goes out anyway
        (:meth:`witness`), and counts as a move seen at ``now`` if that run did it."""
        for delivery, _ in covered:
            self._forget(delivery.job_id)
        if covered:
            self._witness = (covered[-1], now)

    def witness(self) -> tuple[Looked, float] | None:
        """The witness to look at with the next batch (once), if any."""
        witness, self._witness = self._witness, None
        return witness

    def witnessed(
        self, seen: Any, at: float, movers: Collection[str] | None = None
    ) -> None:
        """What the look at a witness settled at ``at`` saw: the serving moved then,
        if a run of ``movers`` (None: anyone's) resolved it."""
        if isinstance(seen, Snapshot) and seen.resolved and (
            movers is None or seen.run in movers
        ):
            self._moved = max(self._moved, at)

    def _progress(
        self, looked: list[Looked], seen: list[Any], now: float,
        movers: Collection[str] | None,
    ) -> None:
        """Learn from a look how far the serving got: a job resolved means it moves; a
        job taken means every job delivered before it was reached. Only the progress of
        ``movers`` counts (the runs deferred to): a crashed primary's registration still
        runs, and what the backups meanwhile take over is not its moving."""
        for (delivery, _), snapshot in zip(looked, seen, strict=True):
            if not isinstance(snapshot, Snapshot):
                continue
            if movers is not None and snapshot.run not in movers:
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
        since it came, or since the last job seen resolved; once one has waited out the
        delay so, every such job counts from that last move, :meth:`stalled`). A
        handover (a failure due again at once, a release) does not change that: the
        job handed over has a token."""
        known = self._free.get(job_id)
        arrival = self._delivered.get(job_id)
        if snapshot.token or known is not None or arrival is None:
            return policy.free_clock(snapshot, known, now)
        if now - self._moved >= self.delay:
            since = max(arrival[0], self._moved)
            if self.stalled():
                since = self._moved  # nothing moved since the stall was seen
            elif now - since >= self.delay:
                self._stalled = self._moved  # it waited out the delay: a stall
            return policy.free_clock(snapshot, None, now, since)
        if arrival[1] < self._passed:
            return policy.free_clock(snapshot, None, now)
        return None

    def _forget(self, job_id: str) -> None:
        self._told.pop(job_id, None)
        self._free.pop(job_id, None)
        self._delivered.pop(job_id, None)
        self._ahead.discard(job_id)
