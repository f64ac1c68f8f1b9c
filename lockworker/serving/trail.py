"""A fan-out backup that trails its primary instead of reading every entry.

Behind a live primary, every entry a backup reads and holds back costs the server a
read and a look (or a reading of the progress) and the backup's process its decoding,
for a job the primary finishes within milliseconds. So while a primary of its namespace
serves, a backup following the progress (:mod:`lockworker.serving.follow`) reads the
stream only through :data:`~lockworker.protocol.trail.TRAIL`, once per poll
(:meth:`Trailing.pause`, at most ``backup_delay / 2``), and asks it for entries only:

- when its namespace's progress has not moved for ``backup_delay`` (the primary
  stalled, crashed with its registration still running, or passed a job over and
  holds the progress behind it), then for the entries past the progress that are at
  least ``backup_delay`` old by the server's clock: a job the primary took at once is
  never read;
- when a holder handed a job over (a failure due again at once, a release on stop:
  the handover channel its deferrals listen on), then for every entry past the
  progress, at once (:meth:`Trailing.nudge`), each delivery marked ``urgent`` so the
  deferrals look at it without holding it back: the failed job is taken over within
  milliseconds, as one the backup had read.

A backup that missed a handover (disconnected while it was published) finds the job
the same way once the progress has stood still behind it for ``backup_delay``. While
the serving is seen to stall (:meth:`lockworker.serving.held.Held.stalled`), the
deferrals stop the trailing: each new entry is read and looked at at once. When no
primary serves, the reader reads the stream as every reader does, from where it got
to (the progress, at least). The decisions are :class:`Trailing`'s; the source
(:class:`lockworker.daemons.sources.StreamSource`) sends the calls and waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from lockworker.clock import Clock
from lockworker.protocol.trail import Entries, trailed

ANY_AGE = -1
"""TRAIL's age argument for entries of any age (a handover asked for them)."""


class Trailing:
    """What a trailing backup asks of each poll, from how its namespace's progress moved."""

    def __init__(self, deferring: Callable[[], bool], delay: float, now: float) -> None:
        self.deferring = deferring
        """True while a primary (or a backup ranked before) serves: trail it."""
        self.delay = delay
        self.nudged = threading.Event()
        """Set on a handover: the next poll reads every entry past the progress."""
        self._progress: str | None = None
        self._since = now
        """When the progress was last seen to move (or the trailing started)."""
        self.urgent = False
        """Whether the entries the last poll asked for are a handover's."""

    def nudge(self) -> None:
        """A holder handed a job over: read what is past the progress at once."""
        self.nudged.set()

    def ask(self, now: float) -> int | None:
        """The age in ms of the entries to ask TRAIL for (:data:`ANY_AGE`: any), or
        None for none (only the progress)."""
        self.urgent = self.nudged.is_set()
        self.nudged.clear()
        if self.urgent:
            return ANY_AGE
        if now - self._since >= self.delay:
            return max(1, round(self.delay * 1000))
        return None

    def saw(self, progress: str | None, now: float) -> None:
        """The progress a poll read: a new one starts the stall clock again."""
        if progress != self._progress:
            self._progress, self._since = progress, now

    def pause(self, block: float) -> float:
        """Seconds to wait between two polls that read nothing: a stall is seen within
        half of ``backup_delay``, and a stop within the reader's ``block``."""
        return max(0.001, min(block, self.delay / 2))

    def poll(
        self, trail: Callable[..., Any], batch: int, clock: Clock
    ) -> tuple[str | None, Entries]:
        """One poll: ``trail(count, age)`` sends TRAIL (the source's call, retried);
        returns the progress it read and the entries it asked for."""
        age = self.ask(clock.monotonic())
        progress, entries = trailed(trail(0, ANY_AGE) if age is None else trail(batch, age))
        self.saw(progress, clock.monotonic())
        return progress, entries


def heard(news: object, trailing: Trailing | None) -> None:
    """Nudge ``trailing`` if ``news`` (the deferrals' handover event) heard a handover
    published: a wake message it keeps. A deferral's own wake (an urgent delivery
    added) keeps none, so urgent reads never call for more."""
    take = getattr(news, "take", None)
    if take is not None and take() is not None and trailing is not None:
        trailing.nudge()
