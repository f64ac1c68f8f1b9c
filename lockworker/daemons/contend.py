"""The contender loop shared by a Worker's job runs and a Leader's campaigns.

Both contend for one lease the same way: look (a backup only, until the lease has been
free for ``backup_delay``), try to acquire, hold what was granted (the job's attempt,
the leader's term) and settle it, or report the holder and wait for a wake message or
the end of its lease; after its own failure a contender steps back ``retry_delay``.
The decisions come from :mod:`lockworker.model.policy`; what differs (what holding
means, what a resolved lease means, whether a wait gives a slot back) is the
:class:`Contest`'s.
"""

from __future__ import annotations

import enum
from typing import Generic, Protocol, TypeVar

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


class Contest(Protocol[R_co]):
    """One contest for one lease; the loop calls these, in this order."""

    not_before: float
    """Do not compete before this time (set by :meth:`hold` after a failure)."""

    @property
    def role(self) -> Role: ...

    @property
    def timing(self) -> policy.Timing: ...

    @property
    def stopping(self) -> bool: ...

    def now(self) -> float: ...

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


class Loop(Generic[R]):
    """Runs one :class:`Contest` to its end."""

    def __init__(self, contest: Contest[R]) -> None:
        self.c = contest
        self.free_since: float | None = None
        self.free_token: int | None = None

    def run(self) -> R:
        c = self.c
        while not c.stopping:
            now = c.now()
            if now < c.not_before:
                result = c.wait(c.not_before, park=False, observe=True)
                if result is not None:
                    return result
                continue
            if c.role is Role.BACKUP:
                ready = self.backup_ready(now)
                if ready is None:
                    continue
                if not isinstance(ready, bool):
                    return ready
                now = c.now()
            sent_at = now
            answer = c.acquire()
            if isinstance(answer, Grant):
                result = c.hold(answer, sent_at)
                if result is not None:
                    return result
                continue
            reaction = c.seen(answer)
            if not isinstance(reaction, Next):
                return reaction
            if reaction is Next.AGAIN:
                continue
            result = c.wait(
                policy.recheck_at(answer, c.now(), c.timing),
                park=answer.holder is not None, observe=False,
            )
            if result is not None:
                return result
        return c.stopped()

    def backup_ready(self, now: float) -> R | bool | None:
        """A backup looks before it competes: True to acquire now, None to look again,
        or the contest's result. It competes only once the lease has been free for
        ``backup_delay``, so a live primary keeps its work."""
        c = self.c
        seen = c.look()
        reaction = c.seen(seen)
        if not isinstance(reaction, Next):
            return reaction
        if reaction is Next.AGAIN:
            return None
        view = policy.backup_step(seen, self.free_since, self.free_token, now, c.timing)
        self.free_since, self.free_token = view.free_since, view.free_token
        if view.compete:
            return True
        result = c.wait(view.look_again, park=seen.holder is not None, observe=False)
        return None if result is None else result
