"""The handle a hook receives: which job, which attempt, and whether it is still held."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from lockworker.clock import Clock
from lockworker.errors import LockLost, StopRequested
from lockworker.runtime.lease import Flag, Lease, LeaseView


@dataclass(eq=False)
class Job(LeaseView):
    """One job as one process sees it.

    In ``on_acquired`` it describes this process's attempt (``holder`` is this
    process's owner id); in ``on_locked`` the attempt of the process that holds it; in
    ``on_gave_up`` the last attempt made.
    """

    id: str
    payload: Any
    attempt: int
    """1-based number of the attempt (0 if none was made yet)."""
    token: int
    """Fencing token: grows with every attempt on this job id, never reused. Pass it to
    downstream systems so they can reject writes from a stale holder."""
    max_attempts: int
    holder: str | None
    """Owner id of the process holding the job (None if nobody does)."""
    _clock: Clock | None = field(default=None, repr=False)
    _lease: Lease | None = field(default=None, repr=False)
    _stopping: Flag | None = field(default=None, repr=False)

    @property
    def scheduled_for(self) -> datetime | None:
        """The nominal time of a schedule's tick (:class:`lockworker.Every`,
        :class:`lockworker.Cron`), as an aware UTC datetime, read from the tick's payload
        (never from its id); None for any other job. Jitter never changes it."""
        payload = self.payload
        if not (isinstance(payload, dict) and isinstance(payload.get("schedule"), str)):
            return None
        tick = payload.get("tick")
        if isinstance(tick, bool) or not isinstance(tick, int):
            return None
        return datetime.fromtimestamp(tick, timezone.utc)

    @property
    def is_last_attempt(self) -> bool:
        """True if failing this attempt gives the job up."""
        return self.attempt >= self.max_attempts

    def check(self) -> None:
        """Raise if this process should not go on with the job.

        :class:`~lockworker.LockLost` when :attr:`lost`; :class:`~lockworker.StopRequested`
        when :attr:`stopping` (letting it propagate hands the job over at once without
        spending an attempt). Call it between the steps of long work.
        """
        if self.lost:
            raise LockLost(
                f"lock on job {self.id!r} lost (attempt {self.attempt}, token {self.token})",
                key=self.id, token=self.token,
            )
        if self.stopping:
            raise StopRequested(f"worker stopping; job {self.id!r} will be handed over")
