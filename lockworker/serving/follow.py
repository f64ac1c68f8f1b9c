"""A backup that follows its namespace's progress instead of looking at each job.

A fan-out stream keeps, per namespace, its **progress**: the entry id up to which every
entry is resolved in that namespace (:mod:`lockworker.daemons.sources`). Beside it, the
stream keeps per namespace the highest entry id a reader of it resolved otherwise than
DONE (given up, or skipped as a job that cannot run), written in the same step that
moves that reader's position past the entry (TOUCH). So an entry at or before the
progress and after that mark was done, by some process of the namespace.

A backup's held-back delivery of such an entry (:mod:`lockworker.daemons.defer`) needs
no look at its job: it is settled there and then, reported as a look that saw it done
by another run would report it (``job.done_elsewhere``, with ``followed=True`` and
without the attempt, token and holder the look would have read), and its delivery
resolved. Reading the progress costs one call (:data:`~lockworker.protocol.streams.
FOLLOW`) for a batch of held-back deliveries the progress last read does not cover
yet, none for one it does. An entry at or before the not-DONE mark is looked at as
before, so a job given up is reported as given up (``job.gave_up``, ``on_gave_up``)
by the backup's ``process``, as its look would hand it over. With an overridden
``process`` (it sees every job) a backup follows nothing and looks at every job.

The marks are kept per stream and only move forward here: a progress once read stays
true (every entry up to it was resolved; the stream's own readers skip to it the same
way), and the not-DONE mark never moves back on the server.

The decisions are :class:`Following`'s (no I/O); the calls are the sync and asyncio
deferrals'.
"""

from __future__ import annotations

from typing import Any

from lockworker.model.keys import JobKeys
from lockworker.protocol.streams import entry_order, follow_keys, followed
from lockworker.runtime import events
from lockworker.serving.delivery import Delivery, stream_keys
from lockworker.serving.looked import serves_through_its_own_process, watched

Order = tuple[int, int]
Looked = tuple[Delivery, JobKeys]


def follows(worker: Any) -> bool:
    """Whether ``worker``'s held-back deliveries may be settled by the progress: only
    when its ``process`` is lockworker's own (an override sees every job)."""
    return serves_through_its_own_process(worker)


def keys_of(stream: str) -> list[str]:
    """The keys :data:`~lockworker.protocol.streams.FOLLOW` reads for ``stream``."""
    return follow_keys(stream_keys(stream))


def report(worker: Any, delivery: Delivery) -> None:
    """Log a delivery settled by the progress, as a look that saw it done elsewhere
    would (``job.done_elsewhere``), marked ``followed``: no look read its attempt."""
    found = watched(worker, delivery)
    if found is not None:
        found[2].info(events.DONE_ELSEWHERE, followed=True, entry=delivery.entry)


class Following:
    """The progress and not-DONE mark last read of each stream, and which held-back
    deliveries they settle."""

    def __init__(self) -> None:
        self._progress: dict[str, Order] = {}
        self._not_done: dict[str, Order] = {}

    def covers(self, delivery: Delivery) -> bool:
        """Whether ``delivery`` was done in the namespace, by the marks last read."""
        stream, entry = delivery.stream, delivery.entry
        if stream is None or entry is None:
            return False
        progress = self._progress.get(stream)
        if progress is None:
            return False
        order = entry_order(entry)
        not_done = self._not_done.get(stream)
        return order <= progress and (not_done is None or order > not_done)

    def unread(self, looked: list[Looked]) -> list[str]:
        """The streams worth reading the marks of before ``looked`` is looked at: those
        of a fan-out delivery the marks last read do not settle (but one at or before
        the not-DONE mark, which no new reading settles)."""
        streams: list[str] = []
        for delivery, _ in looked:
            stream, entry = delivery.stream, delivery.entry
            if stream is None or entry is None or stream in streams:
                continue
            not_done = self._not_done.get(stream)
            if not_done is not None and entry_order(entry) <= not_done:
                continue
            if not self.covers(delivery):
                streams.append(stream)
        return streams

    def learn(self, stream: str, reply: Any) -> None:
        """Take FOLLOW's reply for ``stream``; each mark only moves forward."""
        progress, not_done = followed(reply)
        if progress is not None:
            order = entry_order(progress)
            self._progress[stream] = max(order, self._progress.get(stream, order))
        if not_done is not None:
            order = entry_order(not_done)
            self._not_done[stream] = max(order, self._not_done.get(stream, order))

    def split(self, looked: list[Looked]) -> tuple[list[Looked], list[Looked]]:
        """``looked`` as (settled by the marks, still to look at), each in its order."""
        covered = [item for item in looked if self.covers(item[0])]
        rest = [item for item in looked if not self.covers(item[0])]
        return covered, rest
