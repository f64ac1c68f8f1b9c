"""What a backup's held-back deliveries decide alike on both sides.

The sync :class:`lockworker.daemons.defer.Deferrals` (a thread) and the asyncio
:class:`lockworker.aio.defer.AsyncDeferrals` (a task) only differ in how they wait and
send. Whether the backup defers, whether its source trails the serving it defers to,
and what a wake-up asks of the next take are decided here once, so the two cannot
drift apart.
"""

from __future__ import annotations

from typing import Any, Protocol

from lockworker.serving import follow, trail
from lockworker.serving.held import Held
from lockworker.serving.rules import deferring
from lockworker.serving.trail import Trailing


class News(Protocol):
    """The handover channel's event, as either side's wake hub gives it."""

    def is_set(self) -> bool: ...

    def clear(self) -> None: ...


class DeferralsBase:
    """The held-back deliveries of one ``serve`` call of a backup: their state and the
    decisions both drivers share."""

    def __init__(self, worker: Any, *, ranked: bool) -> None:
        self.w = worker
        self.ranked = ranked
        self.held = Held(float(worker.backup_delay))
        self.following = follow.Following()
        self.trailing: Trailing | None = None
        """The source's trailing of the primary, nudged on a handover (:meth:`trailing_of`)."""
        self._done = False
        self._looking = 0
        """Deliveries taken from the heap and not yet handed over or held back again."""

    def deferring(self) -> bool:
        return deferring(self.w, ranked=self.ranked)

    def trails(self) -> bool:
        """Whether the source trails the serving deferred to: while it defers, but not
        while that serving stalls (:meth:`Held.stalled`: then each new delivery is
        read and looked at at once, as the stall asks)."""
        return self.deferring() and not self.held.stalled()

    def trailing_of(self, source: object) -> Trailing | None:
        """Have a fan-out ``source`` trail the primary (:mod:`lockworker.serving.trail`)
        while this backup defers to it, if the backup follows the progress; the
        trailing, which the driver then listens for handovers for."""
        if follow.follows(self.w) and hasattr(source, "trail"):
            self.trailing = source.trail(self.trails, float(self.w.backup_delay))
        return self.trailing

    def woken(self, news: News) -> bool:
        """What a wake-up asks: whether every held-back delivery is due now (a handover
        was heard, or the backup no longer defers); a heard handover also nudges the
        trailing to read past the progress."""
        everything = news.is_set() or not self.deferring()
        news.clear()
        trail.heard(news, self.trailing)
        return everything
