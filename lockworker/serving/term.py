"""The handle a leader's hooks receive: one term of leadership, as one process sees it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from lockworker.clock import Clock, SystemClock
from lockworker.errors import LockLost, StopRequested
from lockworker.runtime.lease import Flag, Lease, LeaseView

WAKE_MARGIN = 0.0005
"""Seconds past a lease's validity at which :meth:`Term.wait` looks again."""


@dataclass(eq=False)
class Term(LeaseView):
    """One term of leadership of ``name``.

    In ``on_acquired`` and ``on_lost`` it is this process's own term; in ``on_locked``
    it describes the term of the process that leads (``holder``), and never becomes
    :attr:`lost` (this process holds no lease to lose).
    """

    name: str
    token: int
    """Fencing token: grows with every term of this name, never reused. Pass it to the
    systems the leader writes to, so they can reject a deposed leader's writes."""
    holder: str | None
    """Owner id of the leading process."""
    since: float | None = None
    """Wall-clock time (epoch seconds) the term began, when known; for display only."""
    _clock: Clock | None = field(default=None, repr=False)
    _lease: Lease | None = field(default=None, repr=False)
    _stopping: Flag | None = field(default=None, repr=False)
    _wake: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def leading(self) -> bool:
        """True for this process's own term (also after it was lost)."""
        return self._lease is not None

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; return early once the term is lost or stopping.

        Returns True if the term is over for this process (lost or stopping), False
        after a full, uneventful wait; so ``while not term.wait(1.0): ...`` works.
        """
        clock = self._clock or SystemClock()
        end = clock.monotonic() + max(0.0, seconds)
        while True:
            step = self._step(end, clock.monotonic())
            if isinstance(step, bool):
                return step
            clock.wait(self._wake, step)

    def _step(self, end: float, now: float) -> float | bool:
        """One step of a wait until ``end``: True if the term is over (lost or
        stopping), False once ``end`` passed, else the seconds to sleep (until ``end``
        or the lease's validity, whichever comes first). Shared by the asyncio wait."""
        if self.lost or self.stopping:
            return True
        if now >= end:
            return False
        until = end
        if self._lease is not None:
            until = min(until, self._lease.valid_until + WAKE_MARGIN)
        return max(0.0, until - now)

    def check(self) -> None:
        """Raise :class:`~lockworker.LockLost` if lost, :class:`~lockworker.StopRequested`
        if stopping (returning or raising it from ``on_acquired`` resigns at once)."""
        if self.lost:
            raise LockLost(
                f"leadership of {self.name!r} lost (token {self.token})",
                key=self.name, token=self.token,
            )
        if self.stopping:
            raise StopRequested(f"leader stopping; {self.name!r} will be handed over")
