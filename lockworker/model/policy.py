"""Pure decisions of the worker loop: no Redis, no clock, no threads.

Given what the protocol observed and the current time, these functions say when to
look again. They are unit-tested with plain numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lockworker.config import seconds
from lockworker.errors import InvalidConfig
from lockworker.model.state import JobStatus, Role, Snapshot

EXPIRY_MARGIN = 0.001
"""Seconds added after a lease's end before re-checking, so the check lands after it."""


@dataclass(frozen=True)
class Timing:
    """The worker's time settings, in seconds."""

    lock_timeout: float
    retry_delay: float
    """How long a process whose attempt failed steps back before competing again when
    the next attempt is due at once (so another process takes it); a job with a due
    time is waited for by everyone alike."""
    backup_delay: float = 0.0
    """How long a backup lets a free job lie before competing (0 for a primary)."""

    @classmethod
    def of(cls, lock_timeout: float, role: Role, backup_delay: float) -> Timing:
        """A worker's or leader's timing: it steps back ``min(1 s, lock_timeout / 4)``
        after a failure, and only a backup lets a free job or term lie."""
        return cls(lock_timeout, min(1.0, lock_timeout / 4),
                   backup_delay if role is Role.BACKUP else 0.0)


def recheck_at(seen: Snapshot, now: float, timing: Timing) -> float:
    """When a waiter that saw ``seen`` should try again, at the latest.

    At the end of the holder's lease (from the server's PTTL, measured now), plus a
    margin; a message on the wake channel may wake it sooner. A lease whose time left is
    unknown is re-checked after a full ``lock_timeout``. A free job whose next attempt
    is not due yet (a failure's retry schedule) is re-checked when it is due.
    """
    if seen.due_ms is not None:
        return now + seen.due_ms / 1000.0 + EXPIRY_MARGIN
    if seen.pttl_ms is None:
        return now + timing.lock_timeout
    return now + seen.pttl_ms / 1000.0 + EXPIRY_MARGIN


def compete_after_failure(now: float, timing: Timing) -> float:
    """When a process whose own attempt just failed (or whose lease was lost) may
    compete again, when the job's next attempt is due at once.

    It steps back for ``timing.retry_delay`` so that a waiting process takes the next
    attempt first; alone, it retries after the step back. (A failure with a due time
    is waited for by every process alike: the worker's schedule, not this.)
    """
    return now + timing.retry_delay


def is_news(previous: Snapshot | None, seen: Snapshot) -> bool:
    """True if ``seen`` shows a holder or attempt not reported before (for ``on_locked``)."""
    if previous is None:
        return True
    return (previous.holder, previous.token) != (seen.holder, seen.token)


ROLES = tuple(role.value for role in Role)


def check_role(role: object, backup_delay: object) -> tuple[Role, float]:
    """``(role, backup_delay)`` validated, for Worker and Leader alike (a role is a
    :class:`Role` or its value, ``"primary"`` or ``"backup"``)."""
    if isinstance(role, bool) or role not in ROLES:
        raise InvalidConfig(f"role must be 'primary' or 'backup', got {role!r}")
    return Role(role), seconds(backup_delay, "backup_delay", positive=False)


@dataclass(frozen=True)
class BackupView:
    """What a backup decided after looking at a pending job.

    ``compete``: try to acquire now. Otherwise look again at ``look_again`` (a wake
    message may come sooner). ``free_since``/``free_token`` remember when this backup
    first saw the job free, and at which token, so the delay is not restarted by every
    look but is restarted when somebody held the job in between.
    """

    compete: bool
    look_again: float
    free_since: float | None
    free_token: int | None


def primary_serving(primary_until: float, now: float) -> bool:
    """Whether a backup defers to a primary at ``now``: one of its namespace is
    registered until ``primary_until`` (see :mod:`lockworker.model.presence`)."""
    return now < primary_until


def backup_step(
    seen: Snapshot, free_since: float | None, free_token: int | None, now: float,
    timing: Timing, *, primary_until: float = math.inf,
) -> BackupView:
    """The backup's move for a pending job it does not hold.

    While a primary serves (registered until ``primary_until``), a backup lets a free
    job lie for ``backup_delay`` before competing, so the primary (which competes at
    once) normally wins. Held: wait for the lease's end. Free: start (or keep) the
    delay's clock; compete once it has run out, or once no primary serves (then at
    once: look again when the primary's registration ends, if that comes first). A new
    token since the clock started means somebody held the job in between, so the clock
    starts again.
    """
    if seen.holder is not None or seen.due_ms is not None:
        return BackupView(False, recheck_at(seen, now, timing), None, None)
    known = None if free_since is None or free_token is None else (free_since, free_token)
    free_since, free_token = free_clock(seen, known, now)
    ready_at = free_since + timing.backup_delay
    if now >= ready_at or not primary_serving(primary_until, now):
        return BackupView(True, now, free_since, free_token)
    return BackupView(False, min(ready_at, primary_until), free_since, free_token)


@dataclass
class Sightings:
    """What one contender saw of other holders before it acquired: for the figures its
    ``job.acquired`` event carries (how long it waited, how late after a lease's end).

    ``first_held``: when it first saw another holder (since its last acquisition);
    ``lease_end``: when the last lease it saw ends, by its own clock (the server's PTTL
    measured at the sighting).
    """

    first_held: float | None = None
    lease_end: float | None = None

    def saw(self, seen: Snapshot, now: float) -> None:
        """Record ``seen``, read at ``now``, if another process holds it."""
        if seen.holder is None:
            return
        if self.first_held is None:
            self.first_held = now
        if seen.pttl_ms is not None:
            self.lease_end = now + seen.pttl_ms / 1000.0

    def granted(self, sent_at: float) -> dict[str, float]:
        """Fields for an acquisition whose request was sent at ``sent_at``, and forget:
        ``waited_ms`` if another holder was seen first, and ``past_lease_ms`` if the
        request went after the end of the last lease seen (a takeover from a holder
        that did not release)."""
        fields: dict[str, float] = {}
        if self.first_held is not None:
            fields["waited_ms"] = round((sent_at - self.first_held) * 1000.0, 3)
        if self.lease_end is not None and sent_at > self.lease_end:
            fields["past_lease_ms"] = round((sent_at - self.lease_end) * 1000.0, 3)
        self.first_held = self.lease_end = None
        return fields


FreeClock = tuple[float, int]
"""Since when a job has been seen lying free (by this process's clock), and its token
then."""


def lies_free(seen: Snapshot) -> bool:
    """A pending job nobody holds whose next attempt is due now: what a backup lets lie
    for ``backup_delay`` while a primary serves."""
    return seen.status is JobStatus.PENDING and seen.holder is None and seen.due_ms is None


def free_clock(
    seen: Snapshot, clock: FreeClock | None, now: float, delivered: float | None = None
) -> FreeClock:
    """The free clock of ``seen``, a free job, after ``clock`` (None: not seen free
    before): a new token since means somebody held the job in between, so the clock
    starts again, now. A job the server knows nothing of (no token: nobody ever took
    it, since a grant writes one) has lain free at least since it was ``delivered``
    to this process, if that is known: its clock starts then, not at the first look."""
    if clock is not None and clock[1] == seen.token:
        return clock
    if delivered is not None and seen.token == 0 and clock is None:
        return (min(delivered, now), 0)
    return (now, seen.token)


def look_again_at(seen: Snapshot, now: float, delay: float) -> float | None:
    """When a backup holding a delivery back while a primary serves looks at it again
    (:mod:`lockworker.daemons.defer`): held by another, ``delay`` later or just after
    the lease's end, whichever comes first; anything else (resolved, free, a failure's
    retry schedule) is for the contest, now (None)."""
    if seen.status is not JobStatus.PENDING or seen.holder is None:
        return None
    if seen.pttl_ms is None:
        return now + delay
    return now + min(delay, seen.pttl_ms / 1000 + 0.001)
