"""The rules of ``serve``, sync and asyncio: claim, follow, defer, report. No I/O.

Both servings (:mod:`lockworker.daemons.serve` with :mod:`lockworker.daemons.lane` in
threads, :mod:`lockworker.aio.serve` with :mod:`lockworker.aio.lane` in tasks) call
these and keep only their I/O: reading the source, sending the steps built here,
running hooks, waiting for slots.

- **claim**: whether a serving may batch its claims (:func:`open_to`), whether a new
  delivery goes to the lane (:func:`competes_at_once`), what waits for the lane's next
  round trip (:class:`Trips`), its steps (:func:`round_trip`), what their answers
  grant (:func:`owned`, :func:`granted`) and what follows a DONE's reply
  (:func:`after_done`); whether a job claimed ahead runs its hook (:func:`turn`);
- **follow**: one job id runs at most once at a time in one serving; a delivery of an
  id already running waits behind it and follows it in its slot (:class:`Running`);
- **defer**: whether a backup holds its deliveries back (:func:`wanted`), while when
  (:func:`deferring`), whose progress counts (:func:`movers`), and one batched look at
  what came due (:class:`Look`); the held-back deliveries' own decisions are
  :class:`lockworker.serving.held.Held`'s, and those of a backup that follows its
  namespace's progress :mod:`lockworker.serving.follow`'s;
- **report**: whether the serving ends (:func:`ends`), which errors of ``process`` skip
  a delivery rather than stop the serving (:func:`skipped`), what an outcome asks of
  the serving (:func:`ended`: resolve the delivery, keep a given-up job's origin), and
  the serving's events.
"""

from __future__ import annotations

import collections
import enum
from typing import Any, Generic, TypeVar

from lockworker.errors import ForeignValueError, InvalidConfig
from lockworker.model import policy
from lockworker.model.policy import FreeClock
from lockworker.model.presence import View
from lockworker.model.state import Ending, Grant, Outcome, Role, Settle, Snapshot
from lockworker.protocol.script import acquire_step, inspect_step, settle_step
from lockworker.serving.delivery import Delivery
from lockworker.serving.held import Held, Looked, Sighting
from lockworker.serving.looked import serves_through_its_own_process

C = TypeVar("C")
"""A claim waiting for the lane: (delivery, run), the run the side's own."""
D = TypeVar("D")
"""A completion waiting for the lane: (delivery, run, holding)."""

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


def granted(claims: list[C], answers: list[Any]) -> tuple[list[tuple[C, Grant]], list[C]]:
    """The claims whose answer is a grant (each with it: its attempt starts), and the
    rest (held by another, resolved, or an error: the job's contest decides)."""
    grants: list[tuple[C, Grant]] = []
    rest: list[C] = []
    for claim, answer in zip(claims, answers, strict=True):
        if isinstance(answer, Grant):
            grants.append((claim, answer))
        else:
            rest.append(claim)
    return grants, rest


class After(enum.Enum):
    """What follows the reply to a DONE the lane sent."""

    COMPLETED = "completed"
    """Applied, or refused (the lease was lost): the run's ``completed`` decides."""
    AGAIN = "again"
    """An error: the step goes again alone (the protocol recovers one applied anyway)."""
    REPORTS = "reports"
    """Settled, but an ``on_lost`` report still runs: the attempt ends after it."""


def after_done(reply: Any, *, reports_pending: bool = False) -> After:
    """What follows ``reply`` to a DONE of the lane (either side's)."""
    if not isinstance(reply, Settle):
        return After.AGAIN
    return After.REPORTS if reports_pending else After.COMPLETED


class Trips(Generic[C, D]):
    """The claims and completions waiting for the lane's next round trip (either
    side's; the sync side holds its lock around each call)."""

    def __init__(self) -> None:
        self.claims: list[C] = []
        self.completes: list[D] = []

    def __bool__(self) -> bool:
        return bool(self.claims or self.completes)

    def take(self, *, ending: bool) -> tuple[list[C], list[C], list[D]]:
        """Everything waiting: the claims dropped (the serving ends: no job starts, its
        delivery stays unresolved), the claims to send, and the completions (a DONE due
        is always sent)."""
        claims, completes = self.claims, self.completes
        self.claims, self.completes = [], []
        return (claims, [], completes) if ending else ([], claims, completes)

    def take_completes(self) -> list[D]:
        """The completions alone (a DONE that waited long enough for claims to share
        its round trip)."""
        completes, self.completes = self.completes, []
        return completes


class Turn(enum.Enum):
    """What a job claimed ahead of its turn (:mod:`lockworker.daemons.inline`) does when
    its turn comes."""

    HOOK = "hook"
    RELEASE = "release"
    """The serving ends: the attempt is released, not spent."""
    CONTEST = "contest"
    """Its lease is no longer valid (not renewed): its contest decides."""


def turn(*, ending: bool, lease_valid: bool) -> Turn:
    """A claimed-ahead job's turn (see :class:`Turn`)."""
    if ending:
        return Turn.RELEASE
    return Turn.HOOK if lease_valid else Turn.CONTEST


SENDS = {
    (True, False): "claim jobs", (False, True): "mark jobs done",
    (True, True): "claim jobs and mark jobs done",
}
"""What a round trip of the lane does, by (claims, completions), for its events."""


# -- follow ---------------------------------------------------------------------------


class Running:
    """The job ids running in one serving, each with the deliveries of its id that came
    while it runs (either side's; the sync side holds its lock around each call). A job
    id runs at most once at a time in one serving: a delivery of an id already running
    waits behind it, and runs after it in the same slot."""

    def __init__(self) -> None:
        self._behind: dict[str, collections.deque[Delivery]] = {}

    def __bool__(self) -> bool:
        return bool(self._behind)

    def claim(self, delivery: Delivery) -> bool:
        """Mark ``delivery``'s job running (True), or queue it behind the delivery of
        its id that runs (False)."""
        behind = self._behind.get(delivery.job_id)
        if behind is not None:
            behind.append(delivery)
            return False
        self._behind[delivery.job_id] = collections.deque()
        return True

    def following(self, delivery: Delivery, *, going_on: bool) -> Delivery | None:
        """The next delivery of ``delivery``'s job that came while it ran, if the
        serving goes on; else the job is no longer running (None)."""
        behind = self._behind[delivery.job_id]
        if behind and going_on:
            return behind.popleft()
        del self._behind[delivery.job_id]
        return None

    def drop(self, delivery: Delivery) -> None:
        """``delivery`` never ran (the serving ends): its job is no longer running."""
        self._behind.pop(delivery.job_id, None)


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


class Look:
    """One batched look at a backup's held-back deliveries come due (either side's):
    its steps (a read-only look per job, and one at the witness of the serving's moves,
    :meth:`~lockworker.serving.held.Held.witness`), and what its answers decide. The
    sync side holds its lock around the calls that touch ``held``."""

    def __init__(self, held: Held, looked: list[Looked]) -> None:
        self.held = held
        self.looked = looked
        self.steps = [inspect_step(keys) for _, keys in looked]
        self.witness = held.witness() if self.steps else None
        if self.witness is not None:
            self.steps.append(inspect_step(self.witness[0][1]))

    def failed(self) -> list[Any]:
        """The answers when the round trip failed: none seen; ``process`` meets the
        error again for each job handed over, and says so."""
        return [None] * len(self.steps)

    def decide(
        self, seen: list[Any], now: float, *, deferring: bool, hold_free: bool,
        movers: frozenset[str],
    ) -> tuple[list[tuple[Delivery, Sighting | None]], list[tuple[Delivery, Sighting | None]]]:
        """What the answers ``seen`` decide: the deliveries handed over, and those held
        back again whose holder is to be reported (``job.locked``)."""
        if self.witness is not None:
            self.held.witnessed(seen.pop(), self.witness[1], movers)
        return self.held.after_look(
            self.looked, seen, now, deferring, hold_free=hold_free, movers=movers
        )


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


def ends(worker: Any, error: BaseException | None, cancelled: bool = False) -> bool:
    """Whether a serving ends: stopped, failed, or (asyncio) cancelled. No job starts
    any more, and a job's deliveries queued behind it do not run."""
    return bool(worker.stopping) or error is not None or cancelled


def skipped(exc: BaseException) -> bool:
    """Whether an error of ``process`` skips its delivery (``serve.job_error`` with
    ``skipped``: an id or payload the job refuses, a foreign value in its keys, an
    override raising :class:`~lockworker.InvalidConfig`), resolved as not done; any
    other stops the serving, raised at its end."""
    return isinstance(exc, (InvalidConfig, ForeignValueError))


def ended(outcome: Outcome) -> tuple[bool, bool]:
    """What ``outcome`` asks of the serving: (keep, resolve). ``keep``: a job that gave
    up keeps its stream and payload, so that a reset re-drives it, and is resolved as
    not done; ``resolve``: report the delivery resolved (:data:`RESOLVED`)."""
    return outcome is Outcome.GAVE_UP, outcome in RESOLVED
