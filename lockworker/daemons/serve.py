"""``Worker.serve``: jobs from a source, a bounded number at a time, until stopped.

The serving thread takes the next delivery from the source, then a free slot, and hands
it to a pool thread that runs it through the worker's public
:meth:`lockworker.Worker.process` (a subclass's override included: it sees every served
job, and what it returns is the job's outcome here; without one, a backup settles a
job its batched look saw done elsewhere without it, :mod:`lockworker.serving.looked`,
and takes a job its contest would compete for at once through the lane,
:mod:`lockworker.daemons.lane`: the same steps, events and hooks, claims in batches,
completions group-committed). At most ``concurrency`` jobs work at once, so one slow
job holds up only its own slot.

Rules kept here (decided by :mod:`lockworker.serving.rules`, which the asyncio
``serve`` follows too; this module keeps the threads, slots and the source's I/O):

- A job that waits for another holder's lease (a live one, or a dead one whose lease
  has not run out) parks: it gives its slot back, so the slot serves the next job, and
  takes one again, ahead of new deliveries, when a wake message or the lease's end on
  this process's clock says to look again (:mod:`lockworker.runtime.park`). Parked jobs still
  count as running: nothing is lost, and a later delivery of the same id waits behind.
- The source is read without holding a slot, so a source that blocks (an idle stream)
  never keeps a parked job from its slot; at most one delivery waits for a slot.
- One job id runs at most once at a time in one worker: a delivery whose id is already
  running waits behind it and runs in the same slot when that one ends.
- A delivery is reported resolved (so a stream may save its position past it) only
  when ``process`` resolved it: DONE, DONE_ELSEWHERE or GAVE_UP. A job left pending by
  a stop is not, so it is seen again after a restart.
- On ``stop()`` (or SIGTERM/SIGINT when the worker handles signals) no new delivery is
  taken; running jobs see ``job.stopping`` (a hook that raises StopRequested hands its
  job over at once without spending an attempt; others finish); waiting and parked ones
  return STOPPED once they have a slot. ``serve`` returns when the last of them ended.
- A job ``process`` refuses (an invalid id or payload, a key holding a foreign value,
  an override of ``process`` raising :class:`~lockworker.InvalidConfig`) is logged as
  ``serve.job_error`` and skipped. Any other error (Redis unreachable past the retry
  budget) stops the serving; it is re-raised once the running jobs ended.
- A stream's job that ends GAVE_UP here keeps its stream and payload, so that a reset
  re-drives it (:func:`lockworker.daemons.redrive.keep`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from lockworker.config import count
from lockworker.daemons import inline, lane, redrive
from lockworker.daemons.defer import Deferrals
from lockworker.daemons.jobrun import SERVING
from lockworker.model.state import Outcome
from lockworker.runtime import events, pools
from lockworker.runtime.park import Slots
from lockworker.serving import rules
from lockworker.serving.delivery import Delivery, Together, as_source, together
from lockworker.serving.held import Sighting
from lockworker.serving.rules import (
    JOB_ERROR,
    REPORT_FAILED,
    STARTED,
    STOPPED,
    FirstLook,
    shares_out,
)


class Servable(Protocol):
    """What ``serve`` needs of the worker it serves with; :class:`~lockworker.Worker` is
    one. Spelled out here, so this module depends on an interface, not on the worker's
    module (no import cycle)."""

    client: Any
    namespace: str
    owner: str
    run_id: str
    _logger: Any
    _stop: threading.Event
    _retention_ms: int

    @property
    def stopping(self) -> bool: ...

    def _install_signal_handlers(self) -> None: ...

    def process(self, job_id: str, payload: Any = None) -> Outcome: ...

class Seen(FirstLook):
    """The slots lent to one delivery's run, with what a look just saw of its job."""

    def __init__(self, slots: Slots, seen: Sighting) -> None:
        super().__init__(seen)
        self.slots = slots

    def park(self) -> bool:
        return self.slots.park()

    def unpark(self) -> None:
        self.slots.unpark()


def serve(worker: Servable, source: object, *, concurrency: int = 4) -> None:
    """Process every job of ``source`` with ``worker``; see the module docstring."""
    concurrency = count(concurrency, "concurrency")
    chosen = as_source(source)
    attach = getattr(chosen, "attach", None)
    if attach is not None:  # a stream's group takes the worker's lease and role
        attach(worker)
    deliveries = chosen.deliveries(worker._stop)
    worker._install_signal_handlers()
    server = _Server(
        worker, concurrency, ranked=not shares_out(chosen),
        source_resolving=getattr(chosen, "resolving", None),
        buffered=lambda: bool(getattr(chosen, "buffered", 0)),
    )
    if server.deferrals is not None:  # a following backup trails its primary
        server.deferrals.trail(chosen)
    server.run(deliveries)


class _Server:
    """One ``serve`` call: the slots, the running job ids, the first fatal error."""

    def __init__(
        self, worker: Servable, concurrency: int, *, ranked: bool = True,
        source_resolving: Together | None = None,
        buffered: Callable[[], bool] = lambda: False,
    ) -> None:
        self.worker = worker
        self.buffered = buffered
        """Whether the source has deliveries read already (the next comes at once)."""
        self.source_resolving = source_resolving
        """The source's ``resolving()``, if any: reports made together go inside it."""
        self.concurrency = concurrency
        self.slots = Slots(concurrency)
        self.mutex = threading.Lock()
        self.idle = threading.Condition(self.mutex)
        self.running = rules.Running()
        self.error: BaseException | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.deferrals = (
            Deferrals(worker, self.dispatch, self.report, ranked=ranked)
            if rules.wanted(worker) else None
        )
        self.lane: lane.Lane | None = None
        """Claims and completions in batches for the jobs a contest would take at once."""
        self.inline: inline.Inline | None = None
        """At concurrency 1, that lane in the serving thread (:mod:`.inline`)."""
        if rules.open_to(worker):
            if concurrency == 1:
                self.lane = self.inline = inline.Inline(self)
            else:
                self.lane = lane.Lane(self)
        self.log = events.logger(
            events.SERVE, worker._logger,
            namespace=worker.namespace, owner=worker.owner, run=worker.run_id,
        )

    def run(self, deliveries: Any) -> None:
        w = self.worker
        self.log.info(STARTED, concurrency=self.concurrency)
        pools.say_if_short(self.log, w.client, self.concurrency)
        # A thread per working job, per parked one (asleep without a slot), and per job
        # of the lane that gave its slot back with its hook and waits for one again (a
        # lost lease, a DONE sent again alone: at most the DONEs of two round trips, so
        # 2 x concurrency), so that a thread waiting for a slot never keeps the job
        # that holds it from running. Threads start only when needed.
        self.pool = ThreadPoolExecutor(
            3 * self.concurrency + self.slots.park_limit, thread_name_prefix="lockworker-serve"
        )
        try:
            while not self.ending:
                delivery = next(deliveries, None)
                if delivery is None:
                    break
                if self.deferrals is not None and self.deferrals.deferring():
                    self.deferrals.add(delivery)  # a backup while a primary serves
                elif self.inline is not None and self.inline.takes():
                    self.inline.serve(
                        delivery, functools.partial(next, deliveries, None), self.inline_ready
                    )
                elif not self.dispatch(delivery, None):
                    break
        finally:
            close = getattr(deliveries, "close", None)
            if close is not None:
                close()
            if self.deferrals is not None:
                with self.idle:  # a source that ended: what is held back still counts
                    while len(self.deferrals) and not w.stopping and self.error is None:
                        self.idle.wait(0.05)
                self.deferrals.close()
            if self.inline is not None:
                self.inline.hurry()
            with self.idle:
                while self.running:
                    self.idle.wait()
            if self.lane is not None:
                self.lane.close()
            self.pool.shutdown(wait=True)
            self.log.info(STOPPED, stopping=w.stopping)
        if self.error is not None:
            raise self.error

    def inline_ready(self) -> bool:
        """Whether the next delivery is read already and goes in the same claims as
        those before it (:mod:`.inline`)."""
        return (
            self.buffered() and not self.ending and self.inline is not None
            and self.inline.takes()
            and not (self.deferrals is not None and self.deferrals.deferring())
        )

    def dispatch(self, delivery: Delivery, seen: Sighting | None) -> bool:
        """Run ``delivery`` in a free slot (waits for one), with what a look of the
        job just saw, if any; False if the serving ends instead."""
        self.slots.take()  # running jobs end on stop, so this returns then too
        if self.ending:
            self.slots.give()
            return False
        assert self.pool is not None
        if not self.claim(delivery):
            self.slots.give()
        elif not (seen is None and self.lane is not None and self.lane.takes()
                  and self.lane.add(delivery)):
            self.pool.submit(self.work, delivery, seen)
        return True

    def claim(self, delivery: Delivery) -> bool:
        """Mark the job running (True), or queue it behind the same id (False)."""
        with self.mutex:
            return self.running.claim(delivery)

    def work(
        self, delivery: Delivery, seen: Sighting | None = None,
        outcome: Callable[[], rules.Result] | None = None,
    ) -> None:
        """Run ``delivery`` (through ``process``, or to ``outcome()`` for the lane),
        then any delivery of the same id queued behind it; the slot is given back at
        the end, unless its hook returned in the lane (it gave it back: DONE on the way)."""
        if not self.run_one(delivery, seen, outcome):
            return
        self.go_on(self.following(delivery))

    def go_on(self, current: Delivery | None) -> None:
        """Run ``current``, if any, then the deliveries of its job queued behind it;
        then give the slot back."""
        while current is not None:
            self.run_one(current)
            current = self.following(current)
        self.slots.give()

    def following(self, delivery: Delivery) -> Delivery | None:
        """The next delivery of ``delivery``'s job that came while it ran, if serving
        goes on; else the job is no longer running."""
        with self.mutex:
            current = self.running.following(delivery, going_on=not self.ending)
            if not self.running:  # what ``run`` waits for at its end
                self.idle.notify_all()
            return current

    def run_one(
        self, delivery: Delivery, seen: Sighting | None = None,
        outcome: Callable[[], rules.Result] | None = None,
    ) -> bool:
        """Run ``delivery`` to its outcome and report it; False if the lane's
        thread reports it instead (its complete step is still to be sent)."""
        gate = self.slots if seen is None else Seen(self.slots, seen)
        result: rules.Result
        try:
            if outcome is None:
                with SERVING.lend(
                    self.worker, gate, delivery.payload if delivery.decoded else None
                ):
                    result = self.worker.process(delivery.job_id, delivery.payload)
            else:
                result = outcome()
        except BaseException as exc:
            skip = rules.skipped(exc)
            self.log.error(
                JOB_ERROR, job_id=delivery.job_id, error=events.describe(exc), skipped=skip
            )
            if skip:
                delivery.not_done()
                self.report(delivery)
            else:
                self.fail(exc)
            return True
        if isinstance(result, rules.Pending):
            return False
        self.ended(delivery, result)
        return True

    def ended(self, delivery: Delivery, outcome: Outcome) -> None:
        """What ``outcome`` asks (:func:`~lockworker.serving.rules.ended`): a given-up
        job's origin kept, the delivery reported resolved."""
        keep, resolve = rules.ended(outcome)
        if keep:
            delivery.not_done()
            redrive.keep(self.worker, delivery, self.log)
        if resolve:
            self.report(delivery)

    def report(self, delivery: Delivery) -> None:
        """Report ``delivery`` resolved to its source. The report is the source's code:
        an error it raises stops the serving, raised at its end, and never ends a
        thread of the serving (whose jobs would then never end)."""
        try:
            delivery.resolved()
        except BaseException as exc:
            self.report_failed(exc, job_id=delivery.job_id)

    def report_failed(self, exc: BaseException, **fields: Any) -> None:
        """A report to the source raised (its ``resolved``, or its ``resolving()``
        around many): logged, and the serving stops with it."""
        self.log.error(REPORT_FAILED, error=events.describe(exc), **fields)
        self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        """Stop the serving with ``exc``, unless an error stops it already."""
        with self.mutex:
            if self.error is None:
                self.error = exc

    # -- the lane's host (lockworker.daemons.lane.Host) ---------------------------------

    @property
    def ending(self) -> bool:
        return rules.ends(self.worker, self.error)

    def submit(self, delivery: Delivery, outcome: Callable[[], rules.Result] | None) -> None:
        assert self.pool is not None
        self.pool.submit(self.work, delivery, None, outcome)

    def resume(self, delivery: Delivery, outcome: Callable[[], rules.Result]) -> None:
        assert self.pool is not None
        self.pool.submit(self._in_slot_again, self.work, delivery, None, outcome)

    def settled(self, delivery: Delivery, outcome: Outcome) -> None:
        self.ended(delivery, outcome)
        assert self.pool is not None
        current = self.following(delivery)
        if current is not None:  # the job's next delivery, in a slot taken again
            self.pool.submit(self._in_slot_again, self.go_on, current)

    def _in_slot_again(self, then: Callable[..., None], *args: Any) -> None:
        """``then(*args)`` for a job whose hook returned, once it has a slot again."""
        self.slots.retake()
        then(*args)

    def resolving(self) -> contextlib.AbstractContextManager[None]:
        return together(self.source_resolving, self.report_failed)

    def dropped(self, delivery: Delivery) -> None:
        with self.mutex:
            self.running.drop(delivery)
            if not self.running:
                self.idle.notify_all()
        self.slots.give()
