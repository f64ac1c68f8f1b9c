"""The contender loop shared by a Worker's job runs and a Leader's campaigns.

Both contend for one lease the same way: look (a backup only, while a primary serves,
until the lease has been free for ``backup_delay``), try to acquire, hold what was
granted (the job's attempt, the leader's term) and settle it, or report the holder and
wait for a wake message or the end of its lease; after its own failure a contender
steps back ``retry_delay``.
The decisions come from :mod:`lockworker.model.policy`; what differs (what holding
means, what a resolved lease means, whether a wait gives a slot back) is the
:class:`Contest`'s.

The loop is written once, as a generator that yields the contest calls doing I/O
(:func:`contest_steps`); a thread drives it with plain calls (:func:`run`), an asyncio
task by awaiting them (:mod:`lockworker.aio.contend`). Both sides therefore contend by
one algorithm, and a fix to it is a fix to both.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Generator
from typing import Any, Protocol, TypeVar

from lockworker.model import policy
from lockworker.model.state import Grant, Role, Snapshot

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Next(enum.Enum):
    """What a contest's reaction asks of the loop, when it does not end it."""

    WAIT = "wait"
    """Wait (for a wake message, or the time the loop computed) before looking again."""
    AGAIN = "again"
    """Look again at once (the contest changed something, or started listening)."""


class Contestant(Protocol):
    """What the loop reads of a contest without I/O, on either side."""

    not_before: float
    """Do not compete before this time (set by ``hold`` after a failure)."""

    @property
    def role(self) -> Role: ...

    @property
    def timing(self) -> policy.Timing: ...

    @property
    def stopping(self) -> bool: ...

    def now(self) -> float: ...

    def primary_until(self) -> float:
        """Until when a primary is known to serve (a backup defers to it until then)."""
        ...

    def lain_free(self) -> policy.FreeClock | None:
        """Since when the job has been seen lying free before the contest, if it was
        (a backup's held-back delivery): its ``backup_delay`` is not paid twice."""
        ...


class Contender(Protocol):
    """What a contest reads of the worker or leader it runs for."""

    role: Role
    timing: policy.Timing

    @property
    def stopping(self) -> bool: ...

    @property
    def clock(self) -> Any: ...


class ContestantBase:
    """A :class:`Contestant` whose settings are its contender's (``base``): shared by a
    job run and a leader's campaign, on either side."""

    base: Contender
    not_before: float

    @property
    def stopping(self) -> bool:
        return self.base.stopping

    @property
    def role(self) -> Role:
        return self.base.role

    @property
    def timing(self) -> policy.Timing:
        return self.base.timing

    def now(self) -> float:
        return float(self.base.clock.monotonic())

    def primary_until(self) -> float:
        """Always: a leader's backup defers to whoever may hold the one term (a term
        is taken over once per failover, so its delay is paid once, not per job)."""
        return math.inf

    def lain_free(self) -> policy.FreeClock | None:
        return None


class Contest(Contestant, Protocol[R_co]):
    """One contest for one lease in a thread; the loop calls these, in this order (the
    asyncio side's contests have the same methods as coroutines)."""

    def look(self) -> Snapshot:
        """Read the lease without competing (a backup, before it competes)."""
        ...

    def acquire(self) -> Grant | Snapshot:
        """Try to take the lease."""
        ...

    def hold(self, grant: Grant, sent_at: float) -> R_co | None:
        """Hold a granted lease and settle it; a result ends the contest."""
        ...

    def seen(self, snapshot: Snapshot) -> R_co | Next:
        """React to a lease this contender does not hold (resolved, or held by another)."""
        ...

    def wait(self, deadline: float, *, park: bool, observe: bool) -> R_co | None:
        """Until ``deadline``, a wake message or a stop; ``park``: the wait is on another
        holder's lease; ``observe``: a wake message may end the contest (a result)."""
        ...

    def stopped(self) -> R_co:
        """The result of a contest ended by a stop."""
        ...


Call = tuple[str, tuple[Any, ...], dict[str, Any]]
"""A contest method the loop needs called: its name, arguments and keyword arguments."""


def contest_steps(c: Contestant) -> Generator[Call, Any, Any]:
    """The loop, without I/O: it yields each call of a contest method that does I/O
    (``look``, ``acquire``, ``hold``, ``seen``, ``wait``, ``stopped``) and is sent its
    result. :func:`run` drives it with plain calls, :func:`lockworker.aio.contend.run`
    awaits them, so a thread's contest and a task's contest are one loop."""
    free_since, free_token = c.lain_free() or (None, None)
    while not c.stopping:
        now = c.now()
        if now < c.not_before:
            # After its own failure: the job's next attempt is not due yet (or another
            # process should take it first); the wait holds no slot.
            result = yield ("wait", (c.not_before,), {"park": True, "observe": True})
            if result is not None:
                return result
            continue
        if c.role is Role.BACKUP and policy.primary_serving(c.primary_until(), now):
            # While a primary serves, a backup looks before it competes, and competes
            # only once the lease has been free for ``backup_delay``, so the primary
            # keeps its work; with no primary serving it competes at once, as one.
            seen = yield ("look", (), {})
            reaction = yield ("seen", (seen,), {})
            if not isinstance(reaction, Next):
                return reaction
            if reaction is Next.AGAIN:
                continue
            view = policy.backup_step(
                seen, free_since, free_token, now, c.timing, primary_until=c.primary_until()
            )
            free_since, free_token = view.free_since, view.free_token
            if not view.compete:
                result = yield (
                    "wait", (view.look_again,), {"park": waits_on_job(seen), "observe": False}
                )
                if result is not None:
                    return result
                continue
            now = c.now()
        sent_at = now
        answer = yield ("acquire", (), {})
        if isinstance(answer, Grant):
            result = yield ("hold", (answer, sent_at), {})
            if result is not None:
                return result
            continue
        reaction = yield ("seen", (answer,), {})
        if not isinstance(reaction, Next):
            return reaction
        if reaction is Next.AGAIN:
            continue
        result = yield (
            "wait", (policy.recheck_at(answer, c.now(), c.timing),),
            {"park": waits_on_job(answer), "observe": False},
        )
        if result is not None:
            return result
    result = yield ("stopped", (), {})
    return result


def waits_on_job(seen: Snapshot) -> bool:
    """True if the wait after ``seen`` is on the job, not on this process: another
    holder's lease, or a due time still ahead. Such a wait parks (holds no slot)."""
    return seen.holder is not None or seen.due_ms is not None


def run(contest: Contest[R]) -> R:
    """Run ``contest`` to its end, calling its methods in this thread."""
    steps = contest_steps(contest)
    reply: Any = None
    while True:
        try:
            name, args, kwargs = steps.send(reply)
        except StopIteration as end:
            return end.value  # type: ignore[no-any-return]
        reply = getattr(contest, name)(*args, **kwargs)
