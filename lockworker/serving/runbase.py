"""What a job run is and decides on either side (a thread's
:class:`~lockworker.daemons.jobrun.JobRun`, a task's
:class:`~lockworker.aio.jobrun.AsyncJobRun`): its job, its contest settings, what a
snapshot of the job means, and the events of its attempts. No I/O here: the Redis
steps, hooks and waits are the sides' own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from lockworker import config
from lockworker.clock import Clock
from lockworker.errors import GiveUp, InvalidConfig, Retry
from lockworker.model import policy, presence, rates
from lockworker.model.codec import Holder, LockValue
from lockworker.model.history import ErrorText, error_text
from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant, JobStatus, Outcome, Role, Settle, Snapshot
from lockworker.protocol.decode import due_in
from lockworker.runtime import events
from lockworker.runtime.contenders import Contenders
from lockworker.runtime.lease import Flag, Lease, ended
from lockworker.runtime.rates import Rates
from lockworker.serving.contend import ContestantBase
from lockworker.serving.job import Job

T = TypeVar("T")


class RunnerBase(Protocol):
    """What a job run on either side reads of its worker (no I/O).

    Spelled out here, so that this module depends on the worker's interface and not on
    its module (no import cycle).
    """

    clock: Clock
    timing: policy.Timing
    role: Role
    owner: str
    run_id: str
    max_attempts: int
    lock_timeout: float
    _who: Holder
    _lease_ms: int
    _retention_ms: int
    _done_retention_ms: int
    """How long a DONE state is kept (the complete step's), apart from the others'."""
    _view: presence.View
    """What the worker knows of its namespace's primaries (its presence loop's)."""
    _contenders: Contenders
    """Its runs contending for each job id: only the run that took a lease re-enters it."""
    retry_schedule: config.RetrySchedule
    give_up_on: tuple[type[BaseException], ...]
    _rates: Rates
    """Its outcomes per minute, sent by its presence loop (:mod:`lockworker.model.rates`)."""

    @property
    def _stop(self) -> Flag: ...

    @property
    def stopping(self) -> bool: ...


class RunBase(ContestantBase):
    """What a job run is and decides, on either side: its job, its contest settings,
    what a snapshot of the job means, and the events of its attempts. The I/O (Redis
    steps, hooks, waits) is the subclass's: :class:`JobRun` in a thread,
    :class:`lockworker.aio.jobrun.AsyncJobRun` in a task."""

    base: RunnerBase

    def __init__(
        self, worker: RunnerBase, keys: JobKeys, payload: Any, log: events.EventLog
    ) -> None:
        self.base = worker
        self.keys = keys
        self.payload = payload
        self.log = log
        self.previous: Snapshot | None = None
        self.sightings = policy.Sightings()
        self.not_before = 0.0
        self.tokens: list[int] = []
        """The tokens of the attempts this run was granted: a DONE is this run's only
        if it carries one (another call of the same worker shares its run id)."""
        self.seen_token: int | None = None
        """The token of the last look at the job unresolved: whose grant came before
        this run's (a grant's token is the one before it plus one)."""
        self.contend()

    def contend(self) -> None:
        """Count this run among its worker's contenders for the job (before any acquire:
        see :mod:`lockworker.runtime.contenders`)."""
        self.base._contenders.enter(self.keys.job_id, self)

    def ended(self) -> None:
        """This run contends no more (its contest ended, or its job was settled)."""
        self.base._contenders.leave(self.keys.job_id, self)

    def answered(self, answer: T, *, unread: bool) -> T | None:
        """``answer`` to this run's acquire, or None if it is a lease this run's worker
        holds for another of its runs (a re-entry this run did not earn: it did not
        lose the reply of an acquire of its own, or another run contends too). The
        caller then treats the job as held by another process."""
        if isinstance(answer, Grant) and not self.base._contenders.owns(
            self.keys.job_id, self, answer, unread=unread
        ):
            self.log.debug(events.HELD_HERE, attempt=answer.attempt, token=answer.token)
            return None
        return answer

    def primary_until(self) -> float:
        return self.base._view.defer_until

    def heard(self, wake: Any) -> bool:
        """After a wake message: True if it was a failure's (``failed:<ms>``), whose
        next attempt this run then waits for without asking Redis (the job's schedule;
        asking now would only be answered "not yet")."""
        due = due_in(wake.take())
        if due is None:
            return False
        self.not_before = max(self.not_before, self.now() + due)
        return True

    def job(self, attempt: int, token: int, holder: str | None) -> Job:
        w = self.base
        return Job(
            self.keys.job_id, self.payload, attempt, token, w.max_attempts, holder,
            _clock=w.clock, _stopping=w._stop,
        )


    def judge(self, seen: Snapshot) -> tuple[Outcome | None, tuple[str, Job] | None]:
        """What ``seen``, a job this run does not hold, means: its outcome if resolved,
        and the hook to call (name, job), if any; the event is logged here."""
        w = self.base
        if seen.status is JobStatus.DONE:
            # This run's own completion, not merely its owner label's: a restarted
            # daemon with a stable owner did not run what its predecessor finished.
            # Nor another call of this worker: this run's own attempt's token.
            mine = (seen.owner, seen.run) == (w.owner, w.run_id) and seen.token in self.tokens
            report_done(self.log, seen, mine=mine)
            if mine:
                w._rates.add(rates.DONE)
            return (Outcome.DONE if mine else Outcome.DONE_ELSEWHERE), None
        if seen.status is JobStatus.GAVE_UP:
            self.log.warning(events.GAVE_UP, attempt=seen.attempt, token=seen.token)
            return Outcome.GAVE_UP, ("on_gave_up", self.job(seen.attempt, seen.token, None))
        self.seen_token = seen.token
        self.sightings.saw(seen, w.clock.monotonic())
        if seen.holder is not None and policy.is_news(self.previous, seen):
            self.previous = seen
            self.log.info(
                events.LOCKED, attempt=seen.attempt, token=seen.token, holder=seen.holder,
                lease_ms=seen.pttl_ms,
            )
            return None, ("on_locked", self.job(seen.attempt, seen.token, seen.holder))
        return None, None

    def begin(self, grant: Grant) -> tuple[LockValue, events.EventLog, Job]:
        """The value held, the log bound to the attempt, and the job for ``on_acquired``."""
        w = self.base
        held = w._who.value(grant.token, grant.attempt)
        self.tokens.append(grant.token)
        log = self.log.bind(attempt=grant.attempt, token=grant.token)
        return held, log, self.job(grant.attempt, grant.token, w.owner)

    def acquired(self, grant: Grant, sent_at: float, lease: Lease, job: Job,
                 log: events.EventLog) -> None:
        job._lease = lease
        if self.handed_over(grant):
            self.base._rates.add(rates.HANDED_OVER)
        log.info(events.ACQUIRED, reentered=grant.reentered, **self.sightings.granted(sent_at))

    def handed_over(self, grant: Grant) -> bool:
        """Whether ``grant`` (its token already among :attr:`tokens`) takes the job
        over from another process: the grant before it (token - 1) was not this run's,
        and there was one (an attempt spent before, or a holder or failure seen)."""
        before = grant.token - 1
        if grant.reentered or before in self.tokens:
            return False
        return grant.attempt > 1 or self.seen_token == before

    def done_here(self, log: events.EventLog) -> Outcome:
        """This run's complete step wrote DONE: the event, and the count."""
        self.ended()
        log.info(events.DONE)
        self.base._rates.add(rates.DONE)
        return Outcome.DONE

    def refused_lease(self, lease: Lease | None, log: events.EventLog, settled: Settle) -> None:
        """The server refused to settle: the lease was lost. Steps back, and reports the
        loss unless it was reported already (``on_lost`` runs once per attempt)."""
        if settled is Settle.STATE_LOST:
            log.error(events.STATE_LOST, step="settle")
        self.not_before = policy.compete_after_failure(self.now(), self.timing)
        if lease is not None:
            ended(lease, refused=settled.refused)

    def failed(self, log: events.EventLog, job: Job, exc: Exception) -> None:
        """Log ``job.failed`` with the exception, as ``logging`` logs one (``exc_info``:
        handlers and structlog renderers show its traceback): once the fail step has
        handed the lease back (or given up trying), so a backup waiting for the job
        does not also wait for the application's log handlers to render a warning and
        its traceback."""
        self.base._rates.add(rates.FAILED)
        log.warning(
            events.FAILED, error=events.describe(exc), last=job.is_last_attempt, exc_info=exc
        )

    def failure_plan(self, job: Job, exc: Exception) -> tuple[Exception, Failure]:
        """What the failure of ``job``'s attempt with ``exc`` asks of the fail step: the
        error to report (a bad ``Retry(after=...)`` reports its InvalidConfig), and
        the job's retry delay or give-up (:class:`Failure`)."""
        w = self.base
        if isinstance(exc, (GiveUp, *w.give_up_on)):
            reason = exc.reason if isinstance(exc, GiveUp) and exc.reason else repr(exc)
            return exc, Failure(0, reason, error_text(exc))
        if isinstance(exc, Retry):
            try:
                return exc, Failure(
                    round(config.retry_after(exc.after) * 1000), error=error_text(exc)
                )
            except InvalidConfig as bad:
                bad.__cause__ = exc
                exc = bad
        try:
            delay = config.scheduled_delay(w.retry_schedule, job.attempt)
        except InvalidConfig as bad:
            self.log.error(events.HOOK_ERROR, hook="retry_delay", error=str(bad))
            delay = config.scheduled_delay(config.retry_delay(None), job.attempt)
        return exc, Failure(round(delay * 1000), error=error_text(exc))

    def failure_settled(
        self, settled: Settle, log: events.EventLog, failure: Failure
    ) -> Outcome | bool | None:
        """After a failed attempt's settle: GAVE_UP, None (released: compete again
        when the job is due, or after the step back if it is due at once), or True if
        the server refused (see :meth:`refused_lease`)."""
        if settled is Settle.GAVE_UP:
            self.base._rates.add(rates.GAVE_UP)
            if failure.give_up is None:
                log.warning(events.GAVE_UP)
            else:
                log.warning(events.GAVE_UP, reason=failure.give_up)
            return Outcome.GAVE_UP
        if settled is Settle.RELEASED:
            log.info(events.RELEASED, reason="failed", retry_in_ms=failure.delay_ms)
            if failure.delay_ms:
                self.not_before = self.now() + failure.delay_ms / 1000.0
            else:
                self.not_before = policy.compete_after_failure(self.now(), self.timing)
            return None
        return True


@dataclass(frozen=True)
class Failure:
    """What a failed attempt's settle asks: the job's next attempt ``delay_ms`` from
    now (recorded on the server), or, with ``give_up`` (its reason), no next attempt."""

    delay_ms: int
    give_up: str | None = None
    error: ErrorText | None = None
    """The failure as the attempt's history record keeps it."""


def report_done(log: events.EventLog, seen: Snapshot, *, mine: bool) -> None:
    """The event of a job seen DONE: ``job.done`` by this run, ``job.done_elsewhere``
    by another (a contest's look, or a backup's look that settles it without one)."""
    log.info(
        events.DONE if mine else events.DONE_ELSEWHERE,
        attempt=seen.attempt, token=seen.token, by=seen.owner,
    )
