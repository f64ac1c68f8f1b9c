"""One ``Worker.process`` call: the loop for one job in one thread.

Take the next attempt if it is free; if granted, run ``on_acquired`` under a renewed
lease and settle it (complete, fail, release); if not, wait for a wake message or the
end of the holder's lease, and look again. Decisions come from :mod:`lockworker.model.policy`,
Redis steps from the worker's protocol; this module only sequences them.

Under ``Worker.serve`` a run gets a :class:`Gate` (the server's slots): while it waits
for another holder's lease it parks, giving its slot back (see :mod:`lockworker.runtime.park`).
The jobs ``serve``'s lane claims (:mod:`lockworker.daemons.lane`) run the same attempt,
:meth:`JobRun.attempt`: only the complete step of a hook that returned goes out the
lane's way (its ``finish``), batched with other jobs' steps rather than sent alone.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import redis

from lockworker.errors import LockworkerError, StopRequested
from lockworker.model.codec import LockValue
from lockworker.model.keys import JobKeys
from lockworker.model.policy import FreeClock
from lockworker.model.state import Grant, Outcome, Settle, Snapshot
from lockworker.protocol.interface import LockProtocol
from lockworker.protocol.script import renew_step
from lockworker.runtime import events
from lockworker.runtime.lease import Heartbeat, Lease, ended
from lockworker.runtime.park import Lending
from lockworker.runtime.wake import Waits
from lockworker.serving import contend
from lockworker.serving.contend import Next
from lockworker.serving.job import Job
from lockworker.serving.runbase import RunBase, RunnerBase

T = TypeVar("T")
R = TypeVar("R")


class Runner(RunnerBase, Protocol):
    """What a job run in a thread needs of its worker; :class:`~lockworker.Worker` is one."""

    protocol: LockProtocol
    _heartbeat: Heartbeat
    _hub: Waits

    def on_acquired(self, job: Job) -> None: ...

    def _hook(self, log: events.EventLog, name: str, *args: Any) -> None: ...

    def _call(
        self, fn: Callable[[], T], what: str, deadline: float | None = None,
        log: events.EventLog | None = None,
    ) -> T: ...

class Gate(Protocol):
    """What ``serve`` lends a run: giving its slot back while it waits on another holder."""

    def park(self) -> bool:
        """Give the slot back; False if the run must keep it (and wait in it)."""
        ...

    def unpark(self) -> None:
        """Take a slot again (blocks until one is free)."""
        ...

    def first_look(self) -> Snapshot | None:
        """What a look of the job just saw, once (then None): the run's first look."""
        ...

    def lain_free(self) -> FreeClock | None:
        """Since when the job has been seen lying free, if a look before the run saw
        it so (:class:`lockworker.serving.held.Sighting`)."""
        ...


SERVING: Lending[Gate] = Lending("lockworker.serve.gate")
"""How ``serve`` lends its slots to the ``Worker.process`` call of each delivery."""


@dataclass(frozen=True, slots=True)
class Holding:
    """An attempt under way: the job handed to ``on_acquired``, the value held, the
    lease, and the log bound to the attempt."""

    job: Job
    held: LockValue
    lease: Lease
    log: events.EventLog


class JobRun(RunBase):
    """One ``process`` call: the loop for one job in one thread."""

    def __init__(
        self, worker: Runner, keys: JobKeys, payload: Any, log: events.EventLog,
        gate: Gate | None = None,
    ) -> None:
        super().__init__(worker, keys, payload, log)
        self.w = worker
        self.gate = gate
        self.wake: threading.Event | None = None
        self.stack = contextlib.ExitStack()

    # -- the contest (lockworker.serving.contend) ------------------------------------

    def run(self) -> Outcome:
        self.contend()
        try:
            with self.stack:
                return contend.run(self)
        finally:
            self.ended()

    def lain_free(self) -> FreeClock | None:
        return None if self.gate is None else self.gate.lain_free()

    def look(self) -> Snapshot:
        seen = None if self.gate is None else self.gate.first_look()
        if seen is not None:
            return seen
        return self.call(lambda: self.w.protocol.inspect(self.keys), "inspect job")

    def acquire(self) -> Grant | Snapshot:
        """Try to take the next attempt; a lease another call of this worker holds is
        answered by a look, as another process's would be (:meth:`answered`)."""
        w = self.w
        sends = 0

        def send() -> Grant | Snapshot:
            nonlocal sends
            sends += 1  # a retry's send follows one whose reply was lost
            return w.protocol.acquire(
                self.keys, w._who, w._lease_ms, w.max_attempts, w._retention_ms
            )

        answer = self.answered(self.call(send, "acquire job"), unread=sends > 1)
        return answer if answer is not None else self.look()

    def hold(self, grant: Grant, sent_at: float) -> Outcome | None:
        return self.attempt(grant, sent_at)

    def seen(self, snapshot: Snapshot) -> Outcome | Next:
        outcome = self.observe(snapshot)
        return Next.WAIT if outcome is None else outcome

    def wait(self, deadline: float, *, park: bool, observe: bool) -> Outcome | None:
        """Listen on the job's wake channel first: the first time, look again before
        waiting (a release between the look and the subscription is then seen)."""
        if self.subscribe():
            return None
        return self.wait_until(deadline, observe=observe, park=park)

    def stopped(self) -> Outcome:
        self.log.info(events.STOPPED)
        return Outcome.STOPPED

    def subscribe(self) -> bool:
        """Listen on the job's wake channel; True if this call started listening."""
        if self.wake is not None:
            return False
        self.wake = self.stack.enter_context(self.w._hub.listen(self.keys.wake))
        return True

    def wait_until(
        self, deadline: float, *, observe: bool = False, park: bool = False
    ) -> Outcome | None:
        """Block until ``deadline``, a wake message or a stop. With ``observe``, a wake
        message makes it read the job and return its outcome if it was resolved. With
        ``park`` (a wait on another holder's lease), the run's gate, if any, gets its
        slot back meanwhile."""
        self.subscribe()
        assert self.wake is not None
        while not self.w.stopping:
            remaining = deadline - self.w.clock.monotonic()
            if remaining <= 0:
                return None
            if park:
                woken = self.parked_wait(self.wake, remaining)
            else:
                woken = self.w.clock.wait(self.wake, remaining)
            if not woken:
                return None
            self.wake.clear()
            if self.heard(self.wake) or not observe:
                return None
            seen = self.call(lambda: self.w.protocol.inspect(self.keys), "inspect job")
            outcome = self.observe(seen)
            if outcome is not None:
                return outcome
        return None

    def call(self, fn: Callable[[], T], step: str, deadline: float | None = None) -> T:
        """One Redis step of this job, retried by the worker's policy; logs and errors
        name the step and the job."""
        return self.w._call(fn, f"{step} (job {self.keys.job_id!r})", deadline, log=self.log)

    def parked_wait(self, wake: threading.Event, remaining: float) -> bool:
        """Wait on ``wake`` for ``remaining`` seconds without holding a slot, if the
        gate lets this run park; True if woken. Takes a slot again before returning."""
        gate = self.gate
        if gate is None or not gate.park():
            return self.w.clock.wait(wake, remaining)
        self.log.debug(events.PARKED, seconds=round(remaining, 3))
        try:
            return self.w.clock.wait(wake, remaining)
        finally:
            gate.unpark()

    def observe(self, seen: Snapshot) -> Outcome | None:
        """React to a job this process does not hold: resolved, or held by another."""
        outcome, hook = self.judge(seen)
        if hook is not None:
            self.w._hook(self.log, *hook)
        return outcome

    def attempt(
        self, grant: Grant, sent_at: float, finish: Callable[[Holding], R] | None = None
    ) -> Outcome | R | None:
        """Hold the lease for ``grant`` while ``on_acquired`` runs, then settle it: the
        attempt of every job, in ``process`` and in ``serve``'s lane alike.

        Returns the outcome, or None to go round the loop again (this attempt failed
        or was lost and the job is still pending); with ``finish``, what it returns
        for a hook that returned (see :meth:`hooked`).
        """
        return self.hooked(self.start(grant, sent_at), finish)

    def hooked(
        self, h: Holding, finish: Callable[[Holding], R] | None = None
    ) -> Outcome | R | None:
        """Run the hook of the attempt ``h`` holds, and settle it. A hook that raised
        settles here (:meth:`hook_raised`); one that returned lets go of the lease and
        its complete step goes out: sent alone (:meth:`send_done`), or, with
        ``finish``, as ``finish(h)`` sends it (the lane: its slot given back, the step
        queued for a round trip shared with other jobs' steps)."""
        # Every way out lets go of the lease through ``end``: a lease that ran out
        # before the hook returned is reported lost there, if the heartbeat has not.
        try:
            self.w.on_acquired(h.job)
        except BaseException as exc:
            return self.hook_raised(h, exc)
        self.w._heartbeat.end(h.lease)
        return self.send_done(h) if finish is None else finish(h)

    def send_done(self, h: Holding) -> Outcome | None:
        """The attempt's complete step, sent alone, and what its answer decides
        (:meth:`completed`); the protocol recovers a step applied anyway, or raises."""
        w = self.w
        settled = self.call(
            lambda: w.protocol.complete(self.keys, h.held, w._done_retention_ms), "mark job done"
        )
        return self.completed(h, settled)

    def start(self, grant: Grant, sent_at: float) -> Holding:
        """Begin the attempt ``grant`` gives: its lease, renewed by the worker's
        heartbeat from now on, whose loss is reported (``on_lost``)."""
        w = self.w
        held, log, job = self.begin(grant)

        def renew(deadline: float) -> bool:
            renewal = self.call(
                lambda: w.protocol.renew(self.keys, held, w._lease_ms, w._retention_ms),
                "renew lease",
                deadline=deadline,
            )
            return events.renewed(renewal, log)

        def lost(_lease: Lease, reason: str) -> None:
            log.warning(events.LOST, reason=reason)
            w._hook(log, "on_lost", job)

        lease = Lease.granted(
            renew, w.lock_timeout, sent_at,
            on_lost=lost, on_renewed=lambda _lease: log.debug(events.RENEWED),
        )
        lease.step = renew_step(self.keys, held, w._lease_ms, w._retention_ms)
        lease.answer = lambda renewal: events.renewed(renewal, log)  # as ``renew`` does
        self.acquired(grant, sent_at, lease, job, log)
        w._heartbeat.hold(lease)
        return Holding(job, held, lease, log)

    def hook_raised(self, h: Holding, exc: BaseException) -> Outcome | None:
        """Let go of the lease after ``on_acquired`` raised ``exc``, and settle: a stop
        releases the attempt, a failure fails it (its retry schedule, ``on_failed``);
        anything else is raised again once the lease is released."""
        w = self.w
        w._heartbeat.end(h.lease)
        if isinstance(exc, StopRequested):
            return self.settle_stop(h.job, h.held, h.log)
        if isinstance(exc, Exception):
            return self.settle_failure(h.job, h.held, exc, h.log)
        with contextlib.suppress(LockworkerError, redis.RedisError):
            w.protocol.release(self.keys, h.held, w._retention_ms)
        raise exc

    def completed(self, h: Holding, settled: Settle) -> Outcome | None:
        """After the complete step: DONE, or None if the server refused it (the lease
        was lost; see :meth:`refused_lease`)."""
        if settled is Settle.DONE:
            return self.done_here(h.log)
        self.refused_lease(h.lease, h.log, settled)
        return None

    def settle_failure(
        self, job: Job, held: LockValue, exc: Exception, log: events.EventLog
    ) -> Outcome | None:
        w = self.w
        exc, failure = self.failure_plan(job, exc)
        w._hook(log, "on_failed", job, exc)
        try:
            settled = self.call(
                lambda: w.protocol.fail(
                    self.keys, held, w.max_attempts, w._retention_ms,
                    delay_ms=failure.delay_ms, give_up=failure.give_up is not None,
                    error=failure.error,
                ),
                "release failed attempt",
            )
        finally:
            self.failed(log, job, exc)
        verdict = self.failure_settled(settled, log, failure)
        if verdict is Outcome.GAVE_UP:
            w._hook(log, "on_gave_up", job)
        if verdict is True:
            self.refused_lease(job._lease, log, settled)
            return None
        return verdict  # type: ignore[return-value]

    def settle_stop(self, job: Job, held: LockValue, log: events.EventLog) -> Outcome:
        w = self.w
        settled = self.call(
            lambda: w.protocol.release(self.keys, held, w._retention_ms, stopped=True),
            "release on stop",
        )
        log.info(events.RELEASED, reason="stopping", settled=settled.value)
        if job._lease is not None:
            ended(job._lease, refused=settled.refused)
        log.info(events.STOPPED)
        return Outcome.STOPPED
