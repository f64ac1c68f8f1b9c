"""A backup's deliveries while a primary serves: looked at in batches, not one by one.

While a primary of its namespace serves, a backup under ``serve`` would otherwise start
a contest for every delivery at once: look, listen on the job's channel, look again,
wait for the primary's DONE, look a third time. Against a primary that finishes its
jobs within ``backup_delay``, all of that only learns that the job is done. So a backup
holds each delivery back for ``backup_delay`` (the time it would let a free job lie
anyway), then looks at every delivery that came due in one round trip
(:mod:`lockworker.protocol.batch`, one read-only script per job), and:

- hands to ``process`` (with what it saw, so the contest's first look costs nothing)
  every job that is resolved (DONE, GAVE_UP), free, or waiting for its retry schedule:
  the contest then decides as it always does (a free job is taken once it has lain
  free for ``backup_delay``);
- holds back again a job whose lease is held, until ``backup_delay`` later or the
  lease's end, whichever comes first (a crashed holder's lease ends; a live one's
  DONE is seen at the next look).

It hands everything over at once, looked at in one batch, when a holder hands a job
over (the settle of a failure due again at once, or a release on stop, publishes on
the namespace's handover channel, :func:`lockworker.model.presence.handover_channel`)
and when no primary serves any more (the worker's presence wakes it), so a backup
still takes over a failed job at once and a crashed primary's jobs at the lease's end.
A backup therefore costs the server one command per job per ``backup_delay`` while
the primary is alive and fast, in one round trip per batch, and listens on one
channel, not one per job.

Deliveries held back are not resolved: after a stop or a crash the stream serves
them again. At most :data:`LIMIT` are held back at once; the source waits for room.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from typing import Any

from lockworker.daemons.sources import Delivery
from lockworker.errors import LockworkerError
from lockworker.model import policy
from lockworker.model.keys import JobKeys
from lockworker.model.presence import handover_channel
from lockworker.model.state import Role, Snapshot
from lockworker.protocol import batch
from lockworker.protocol.script import ScriptProtocol, inspect_step

LIMIT = 4 * batch.MAX_BATCH
"""Deliveries a backup holds back at most; the source is read again once there is room."""

IDLE_WAIT = 0.05
"""Seconds the thread waits at most between two checks of the held-back deliveries."""

Dispatch = Callable[[Delivery, "Snapshot | None"], object]


class Deferrals:
    """The held-back deliveries of one ``serve`` call of a backup, and their thread."""

    def __init__(self, worker: Any, dispatch: Dispatch) -> None:
        self.w = worker
        self.dispatch = dispatch
        self.delay = float(worker.backup_delay)
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Delivery]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._done = False

    @staticmethod
    def wanted(worker: Any) -> bool:
        """Whether ``worker``'s serving holds deliveries back: a backup with a delay,
        on the script protocol (the batch is a pipeline of scripts)."""
        return (
            worker.role is Role.BACKUP and worker.backup_delay > 0
            and isinstance(worker.protocol, ScriptProtocol)
        )

    def deferring(self) -> bool:
        """True while a primary serves: a new delivery is held back."""
        return policy.primary_serving(self.w._view.defer_until, self.w.clock.monotonic())

    def __len__(self) -> int:
        with self._cond:
            return len(self._heap)

    def add(self, delivery: Delivery) -> None:
        """Hold ``delivery`` back for ``backup_delay`` (waits while :data:`LIMIT` are)."""
        with self._cond:
            while len(self._heap) >= LIMIT and not self.w.stopping and not self._done:
                self._cond.wait(IDLE_WAIT)
            self._push(self.w.clock.monotonic() + self.delay, delivery)
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

    def _push(self, at: float, delivery: Delivery) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), delivery))

    def _take(self, everything: bool) -> list[Delivery]:
        """The deliveries due now (all with ``everything``), a batch at most."""
        now = self.w.clock.monotonic()
        with self._cond:
            taken: list[Delivery] = []
            while self._heap and len(taken) < batch.MAX_BATCH and (
                everything or self._heap[0][0] <= now
            ):
                taken.append(heapq.heappop(self._heap)[2])
            self._cond.notify_all()  # room for the source
            return taken

    def _wait_for(self) -> float:
        with self._cond:
            if not self._heap:
                return IDLE_WAIT
            left = self._heap[0][0] - float(self.w.clock.monotonic())
            return max(0.0, min(IDLE_WAIT, left))

    def _run(self) -> None:
        channel = handover_channel(self.w.namespace)
        with self.w._hub.listen(channel) as news:
            while not self.w.stopping and not self._done:
                everything = news.is_set() or not self.deferring()
                news.clear()
                due = self._take(everything)
                if not due:
                    self.w.clock.wait(news, self._wait_for())
                    continue
                self._look(due)

    def _look(self, due: list[Delivery]) -> None:
        """One round trip for ``due``: hand each over, or hold it back again. A job id
        that names no job, and every job of a batch Redis did not answer, go to
        ``process`` as they are: it raises what serve reports."""
        looked = []
        for delivery in due:
            try:
                looked.append((delivery, JobKeys.of(self.w.namespace, delivery.job_id)))
            except LockworkerError:
                self.dispatch(delivery, None)
        steps = [inspect_step(keys) for _, keys in looked]
        try:
            seen = self.w._call(
                lambda: batch.send(self.w.client, steps), "look at held-back jobs"
            ) if steps else []
        except LockworkerError:
            seen = [None] * len(steps)
        now = self.w.clock.monotonic()
        for (delivery, _), snapshot in zip(looked, seen, strict=True):
            if isinstance(snapshot, Snapshot):
                again = policy.look_again_at(snapshot, now, self.delay)
                if again is not None and self.deferring():
                    with self._cond:
                        self._push(again, delivery)
                    continue
                self.dispatch(delivery, snapshot)
            else:  # a foreign value or a bad id: process() says which, and serve skips it
                self.dispatch(delivery, None)
