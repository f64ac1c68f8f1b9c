"""Value types shared by the protocol, the policy and the worker.

Pure data: what the protocol observed in Redis (:class:`Snapshot`, :class:`Grant`) and
how a job ended for this process (:class:`Outcome`). No Redis, no time, no threads.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from lockworker.model.history import AttemptRecord


class JobStatus(str, enum.Enum):
    """What Redis says about a job. Only PENDING jobs can still be acquired."""

    PENDING = "pending"
    DONE = "done"
    GAVE_UP = "gave_up"


class Outcome(str, enum.Enum):
    """How :meth:`lockworker.Worker.process` ended for this process."""

    DONE = "done"
    """This call ran ``on_acquired`` to the end and marked the job DONE: one call in the
    whole fleet gets it per job."""
    DONE_ELSEWHERE = "done_elsewhere"
    """Another call finished the job: another process's, or another (earlier or
    concurrent) call of this worker."""
    GAVE_UP = "gave_up"
    """``max_attempts`` attempts failed (by anyone); nobody will run the job again."""
    STOPPED = "stopped"
    """The worker was stopped before the job was resolved; the job is still pending."""


@dataclass(frozen=True)
class Grant:
    """The caller now holds the lease for ``attempt``, fenced by ``token``."""

    attempt: int
    token: int
    reentered: bool = False
    """True if the caller's run already held it (a retried acquire whose reply was lost)."""


@dataclass(frozen=True)
class Snapshot:
    """What a process that did not get the lease saw.

    ``holder``/``pttl_ms`` are set while another process holds a live lease; ``owner``
    is whoever last held the job (for DONE: who finished it) and ``run`` which run of
    that owner (or of the holder, while a lease is live). ``due_ms`` is set while the
    job is free but its next attempt may not start yet (a failed attempt's retry
    schedule): the milliseconds left until it is due, by the server's clock when read,
    as ``pttl_ms`` is for a lease.
    """

    status: JobStatus
    attempt: int
    token: int
    owner: str
    holder: str | None = None
    pttl_ms: int | None = None
    run: str = ""
    due_ms: int | None = None
    history: tuple[AttemptRecord, ...] = ()
    """The job's attempts, oldest first (:mod:`lockworker.model.history`); read only
    when asked for (``Worker.inspect``), else empty."""

    @property
    def resolved(self) -> bool:
        return self.status is not JobStatus.PENDING


class Settle(str, enum.Enum):
    """Result of ending an attempt (complete, fail or release)."""

    DONE = "done"
    """The job is marked DONE by this holder."""
    RELEASED = "released"
    """The lease is released; the job is pending for the next attempt."""
    GAVE_UP = "gave_up"
    """The failed attempt was the last one: the job is marked GAVE_UP."""
    NOT_HOLDER = "not_holder"
    """Refused: the caller no longer holds this attempt's lease."""
    STATE_LOST = "state_lost"
    """Refused, and the job's state is gone: the server lost its data (a restart
    without persistence, a failover to a replica that had not received it)."""

    @property
    def refused(self) -> bool:
        return self in (Settle.NOT_HOLDER, Settle.STATE_LOST)


class Renewal(str, enum.Enum):
    """Result of renewing a lease. True only for RENEWED."""

    RENEWED = "renewed"
    NOT_HOLDER = "not_holder"
    """The lease is gone or another run holds it."""
    STATE_LOST = "state_lost"
    """The lease is gone and so is the job's state: the server lost its data."""

    def __bool__(self) -> bool:
        return self is Renewal.RENEWED


class Reset(str, enum.Enum):
    """Result of resetting a job."""

    RESET = "reset"
    """The job is pending again with no attempts spent (its token counter kept)."""
    HELD = "held"
    """Refused: a live lease holds the job (reset with ``force`` to take it anyway)."""
    ABSENT = "absent"
    """The server knows no such job; nothing was written."""
    CHANGED = "changed"
    """Refused: the job is not in the state the caller expected (``expect``); it
    changed since it was listed. Nothing was written."""


class Role(str, enum.Enum):
    """How a Worker or Leader competes: at once, or after ``backup_delay``."""

    PRIMARY = "primary"
    """Competes for a free job or term at once."""
    BACKUP = "backup"
    """Lets a free job lie ``backup_delay`` seconds first while a primary of its
    namespace serves (a free term: always), so a live primary keeps its work; competes
    at once when none serves."""

    def __str__(self) -> str:  # logs and messages show "backup", as the option is spelt
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Ending(str, enum.Enum):
    """How an attempt ends (the settle step's kind)."""

    COMPLETE = "complete"
    """Done: the job is marked DONE."""
    FAIL = "fail"
    """Failed: the attempt is spent (GAVE_UP if it was the last)."""
    RELEASE = "release"
    """Given back unused: the attempt is refunded."""


class ProtocolKind(str, enum.Enum):
    """Which implementation of the lock protocol a Worker uses (``protocol=``)."""

    SCRIPT = "script"
    """Lua scripts: one round trip per step (the default)."""
    TXN = "txn"
    """WATCH/MULTI/EXEC: three round trips per step, for servers that forbid scripts."""


class Durability(str, enum.Enum):
    """When a Worker's step counts (``durability=``)."""

    LOCAL = "local"
    """Once the master applied it."""
    REPLICATED = "replicated"
    """Once ``replicas`` replicas acknowledged it too (WAIT)."""
