"""The rules of ``serve``, sync and asyncio: claim, follow, defer, report. No I/O.

Both servings (:mod:`lockworker.daemons.serve` with :mod:`lockworker.daemons.lane` in
threads, :mod:`lockworker.aio.serve` with :mod:`lockworker.aio.lane` in tasks) call
these and keep only their I/O: reading the source, sending the steps built here,
running hooks, waiting for slots.

- **claim**: whether a serving may batch its claims (:func:`open_to`), whether a new
  delivery goes to the lane (:func:`competes_at_once`), the steps of one of the lane's
  round trips (:func:`round_trip`) and what their answers grant (:func:`owned`);
- **follow**: one job id runs at most once at a time in one serving; a delivery of an
  id already running waits behind it and follows it in its slot;
- **defer**: whether a backup holds its deliveries back (:func:`wanted`), while when
  (:func:`deferring`), and whose progress counts (:func:`movers`); the held-back
  deliveries' own decisions are :class:`lockworker.serving.held.Held`'s, and those of
  a backup that follows its namespace's progress :mod:`lockworker.serving.follow`'s;
- **report**: which outcomes resolve a delivery (:data:`RESOLVED`), and the serving's
  events.
"""

from __future__ import annotations

from typing import Any

from lockworker.model import policy
from lockworker.model.policy import FreeClock
from lockworker.model.presence import View
from lockworker.model.state import Ending, Outcome, Role, Snapshot
from lockworker.protocol.script import acquire_step, settle_step
from lockworker.serving.held import Sighting
from lockworker.serving.looked import serves_through_its_own_process

# -- claim ----------------------------------------------------------------------------


class Pending:
    """An attempt's result while its complete step waits to be sent: the lane's
    sender reports the job, not its attempt's thread or task."""


PENDING = Pending()

Result = Outcome | Pending
"""What a job's run in the lane ends with."""


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


def round_trip(w: Any, claims: list[Any], completes: list[tuple[Any, Any]]) -> list[Any]:
    """The steps of one of the lane's round trips (either side's): the acquire step of
    each run waiting for a claim, then the complete step of each hook that returned."""
    steps: list[Any] = [
        acquire_step(run.keys, w._who, w._lease_ms, w.max_attempts, w._retention_ms)
        for run in claims
    ]
    return steps + [
        settle_step(run.keys, h.held, Ending.COMPLETE, w._done_retention_ms) for run, h in completes
    ]


def owned(claims: list[Any], answers: list[Any], *, unread: bool) -> list[Any]:
    """``answers`` to a round trip that claimed ``claims`` (either side's), where a
    lease another run of the worker holds is not a grant (None: the job's contest
    then looks, as for another process's lease; :mod:`lockworker.runtime.contenders`)."""
    for i, (_, run) in enumerate(claims):
        answers[i] = run.answered(answers[i], unread=unread)
    return answers


SENDS = {
    (True, False): "claim jobs", (False, True): "mark jobs done",
    (True, True): "claim jobs and mark jobs done",
}
"""What a round trip of the lane does, by (claims, completions), for its events."""


# -- defer ----------------------------------------------------------------------------


def wanted(worker: Any) -> bool:
    """Whether ``worker``'s serving holds deliveries back: a backup with a delay, whose
    protocol batches its steps (the script protocol with a sender; a WATCH/MULTI/EXEC
    or replicated step is sent alone), as its heartbeat's renewals do."""
    return (
        worker.role is Role.BACKUP and worker.backup_delay > 0
        and getattr(worker.protocol, "sender", None) is not None
    )


def movers(worker: Any, *, ranked: bool = True) -> frozenset[str]:
    """The runs whose progress on its jobs a held-back serving counts (see
    :func:`deferring`: those it defers to)."""
    view: View = worker._view
    return view.acting_runs if ranked else view.primary_runs


def deferring(worker: Any, *, ranked: bool = True) -> bool:
    """True while a primary of ``worker``'s namespace serves or, if ``ranked``, while
    none does, a backup ranked before it (:func:`~lockworker.model.presence.acting_until`)."""
    until = worker._view.hold_until if ranked else worker._view.defer_until
    return policy.primary_serving(until, worker.clock.monotonic())


def shares_out(source: object) -> bool:
    """Whether ``source`` gives each job to one reader (a stream read through a
    consumer group), rather than every job to every process: then a backup sees jobs
    nobody else does, and holds back only behind a primary, never a backup ranked
    before it (:func:`deferring`)."""
    return getattr(source, "group", None) is not None


class FirstLook:
    """What a look just saw of a delivery's job, given to its run's first look once (a
    backup's held-back delivery, :mod:`lockworker.daemons.defer`): that look is free;
    and, for a job seen lying free already, its free clock, so the contest does not
    let it lie for ``backup_delay`` a second time. The gate lent to the run, sync
    and asyncio alike."""

    def __init__(self, seen: Sighting) -> None:
        self.seen: Snapshot | None = seen.snapshot
        self.free = seen.free

    def first_look(self) -> Snapshot | None:
        seen, self.seen = self.seen, None
        return seen

    def lain_free(self) -> FreeClock | None:
        return self.free


# -- report ---------------------------------------------------------------------------

JOB_ERROR = "serve.job_error"
REPORT_FAILED = "serve.report_failed"
STARTED = "serve.started"
STOPPED = "serve.stopped"

RESOLVED = frozenset({Outcome.DONE, Outcome.DONE_ELSEWHERE, Outcome.GAVE_UP})
"""The outcomes that resolve a delivery (its source may save its position past it); a
job left pending by a stop is seen again after a restart."""
