"""Serving's lane for jobs a contest would take at once, in threads: batched claims,
and completions group-committed by serving, not awaited by each job's thread.

The twin of :mod:`lockworker.aio.lane`, by the same rules. ``serve`` runs each
delivery's ``process`` in a pool thread, whose contest acquires the job's lease in a
step of its own, runs ``on_acquired``, and waits for the complete step. For a worker
that serves through its own ``process`` (an override sees every job) and whose contest
would compete at once (a primary, or a backup while no primary serves):

- a claiming thread sends the acquire steps of every delivery that waits for a claim
  in one round trip (one script per job, each atomic, as ``process`` sends it);
- each granted job runs its attempt in a pool thread, as in ``process``
  (:meth:`lockworker.daemons.jobrun.JobRun.start`), and the thread is free once the
  hook returned;
- a settling thread sends the complete steps of the jobs whose hook returned in one
  round trip, and reports them: no DONE waits more than the round trip in flight.

Everything else is the job's contest, as ``process`` runs it, in a pool thread: a job
not granted, a hook that raised (its failure or stop settled by
:meth:`~lockworker.daemons.jobrun.JobRun.hook_raised`), a complete step refused or
answered with an error. Each thread hop of a job costs a switch or two; the per-job
contest cost about two dozen (its round trips, the batcher's hand-offs).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any, Protocol

from lockworker.daemons.delivery import Delivery
from lockworker.daemons.jobrun import Gate, Holding, JobRun
from lockworker.daemons.looked import serves_through_its_own_process, watched
from lockworker.model import policy
from lockworker.model.state import Ending, Grant, Outcome, Role, Settle
from lockworker.protocol.batch import send
from lockworker.protocol.script import acquire_step, settle_step


class Pending:
    """An attempt's result while its complete step waits to be sent: the settling
    thread reports the job, not its attempt's thread."""


PENDING = Pending()

Result = Outcome | Pending
"""What a job's run in the lane ends with."""


class Host(Protocol):
    """What the lane needs of the serving that owns it (:mod:`lockworker.daemons.serve`)."""

    worker: Any

    @property
    def slots(self) -> Gate: ...

    @property
    def ending(self) -> bool:
        """The serving stops: no job starts any more."""
        ...

    def submit(self, delivery: Delivery, outcome: Callable[[], Result]) -> None:
        """Finish ``delivery`` in a pool thread with ``outcome()`` (as ``process``'s
        result: its errors handled as the serving handles those)."""
        ...

    def settled(self, delivery: Delivery, outcome: Outcome) -> None:
        """``delivery``'s job ended with ``outcome``: report it, free its slot."""
        ...

    def dropped(self, delivery: Delivery) -> None:
        """``delivery`` never ran (the serving stops): free its slot, unresolved."""
        ...

    def resolving(self) -> contextlib.AbstractContextManager[None]:
        """Reports made inside go together (a group's entries in one XACK)."""
        ...


def open_to(worker: Any) -> bool:
    """Whether ``worker``'s serving may use a lane (sync or asyncio): it serves through
    its own ``process``, and its protocol batches its steps (the script protocol with
    a sender; a WATCH/MULTI/EXEC or replicated step is sent alone)."""
    return serves_through_its_own_process(worker) and (
        getattr(worker.protocol, "sender", None) is not None
    )


def competes_at_once(worker: Any) -> bool:
    """Whether a new delivery's contest would compete at once, as the lane does: not a
    backup while a primary serves (it looks first; its serving holds deliveries back)."""
    return not (
        worker.role is Role.BACKUP
        and policy.primary_serving(worker._view.defer_until, worker.clock.monotonic())
    )


class Lane:
    """The batched claims and completions of one ``serve`` call, and their two threads."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.w = host.worker
        lock = threading.Lock()
        # One lock, a condition per thread: a claim wakes the claiming thread only,
        # a hook's end the settling thread only (a needless wake-up is a switch).
        self._conds = {
            "_claims": threading.Condition(lock), "_completes": threading.Condition(lock),
        }
        self._claims: list[tuple[Delivery, JobRun]] = []
        self._completes: list[tuple[Delivery, JobRun, Holding]] = []
        self._closed = False
        self._threads: list[threading.Thread] = []

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
        cond = self._conds["_claims"]
        with cond:
            self._claims.append((delivery, run))
            cond.notify()
            if not self._threads:
                self._threads = [
                    threading.Thread(target=self._claiming, name="lockworker-lane-claim",
                                     daemon=True),
                    threading.Thread(target=self._settling, name="lockworker-lane-settle",
                                     daemon=True),
                ]
                for thread in self._threads:
                    thread.start()
        return True

    def close(self) -> None:
        """End the threads, once no job of the serving runs any more."""
        for cond in self._conds.values():
            with cond:
                self._closed = True
                cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=10.0)

    def _take(self, which: str) -> list[Any] | None:
        """Everything queued in ``which`` (``_claims`` or ``_completes``), waiting for
        some; None once the lane is closed and nothing is left."""
        cond = self._conds[which]
        with cond:
            while not getattr(self, which) and not self._closed:
                cond.wait()
            taken: list[Any] = getattr(self, which)
            if not taken:
                return None
            setattr(self, which, [])
            return taken

    def _claiming(self) -> None:
        w = self.w
        while (taken := self._take("_claims")) is not None:
            if self.host.ending:
                for delivery, _ in taken:
                    self.host.dropped(delivery)
                continue
            steps = [
                acquire_step(run.keys, w._who, w._lease_ms, w.max_attempts, w._retention_ms)
                for _, run in taken
            ]
            sent_at = w.clock.monotonic()
            try:
                answers = w._call(lambda s=steps: send(w.client, s), "claim jobs")
            except Exception as exc:
                for delivery, _ in taken:
                    self.host.submit(delivery, functools.partial(_raise, exc))
                continue
            for (delivery, run), answer in zip(taken, answers, strict=True):
                if isinstance(answer, Grant):
                    self.host.submit(delivery, functools.partial(
                        self._attempt, delivery, run, answer, sent_at
                    ))
                else:  # held by another, resolved, or an error: the contest decides
                    self.host.submit(delivery, run.run)

    def _attempt(self, delivery: Delivery, run: JobRun, grant: Grant, sent_at: float) -> Result:
        """The granted job's attempt up to its hook's end; a hook that returned leaves
        the rest to the settling thread (:data:`PENDING`)."""
        h = run.start(grant, sent_at)
        try:
            self.w.on_acquired(h.job)
        except BaseException as exc:
            outcome = run.hook_raised(h, exc)
            return outcome if outcome is not None else run.run()
        self.w._heartbeat.end(h.lease)
        cond = self._conds["_completes"]
        with cond:
            self._completes.append((delivery, run, h))
            cond.notify()
        return PENDING

    def _settling(self) -> None:
        w = self.w
        while (taken := self._take("_completes")) is not None:
            steps = [
                settle_step(run.keys, h.held, Ending.COMPLETE, w._retention_ms)
                for _, run, h in taken
            ]
            try:
                replies = w._call(lambda s=steps: send(w.client, s), "mark jobs done")
            except Exception as exc:
                for delivery, _, _ in taken:
                    self.host.submit(delivery, functools.partial(_raise, exc))
                continue
            with self.host.resolving():  # one thread reports them all: together
                for (delivery, run, h), reply in zip(taken, replies, strict=True):
                    if not isinstance(reply, Settle):  # an error: the step again, alone
                        self.host.submit(delivery, functools.partial(_again, run, h))
                        continue
                    outcome = run.completed(h, reply)
                    if outcome is None:  # the lease was lost: the contest goes on
                        self.host.submit(delivery, run.run)
                    else:
                        self.host.settled(delivery, outcome)


def _again(run: JobRun, h: Holding) -> Outcome:
    """A complete step the batch answered with an error, sent again alone: the protocol
    recovers a step applied anyway, or raises."""
    w = run.w
    settled = run.call(
        lambda: w.protocol.complete(run.keys, h.held, w._retention_ms), "mark job done"
    )
    outcome = run.completed(h, settled)
    return outcome if outcome is not None else run.run()


def _raise(exc: Exception) -> Outcome:
    """``exc`` as the outcome of the job's step that met it (the serving handles it as
    an error of ``process``)."""
    raise exc
