"""A worker's per-minute counts of what it did, and the reads of a namespace's counts.

What is counted and how it is stored: :mod:`lockworker.model.rates`. A
:class:`Rates` lives in each worker (sync and asyncio): its job runs call
:meth:`Rates.add` as they settle (a lock and a dict increment: no server call), and
its presence loop (:mod:`lockworker.runtime.presence`, :mod:`lockworker.aio.presence`)
sends what it :meth:`~Rates.take`\\ s in one script every few seconds and when the
worker closes. A flush that fails gives the counts back (:meth:`~Rates.restore`) for
the next one; counts older than :data:`~lockworker.model.rates.KEPT_AFTER_HOUR` are
dropped, as the server would no longer keep them.

:func:`rates` and :func:`done_in_window` read a namespace's counts (one script over
its last hour hashes): what ``lockworker status`` and the dashboard show.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, cast

import redis

from lockworker import config
from lockworker.clock import wall_time
from lockworker.model import rates as model
from lockworker.model.keys import check_name
from lockworker.protocol import rates as steps

FLUSH_EVERY = 5.0
"""The longest time (s) counts wait in a worker before its presence loop sends them,
whatever its refresh interval (a third of ``lock_timeout``). Read at each flush, not
imported by value: a test sets it (``monkeypatch.setattr``) to see a send while the worker
serves without waiting the 5 s; it is not a setting of the worker."""
DROP_AFTER = model.KEPT_AFTER_HOUR
"""Counts of minutes older than this (s) are dropped rather than sent."""


class Rates:
    """One worker's outcomes per minute, not yet sent. Thread-safe.

    ``now`` is the wall clock (Unix s) that cuts the minutes: a test passes its own.
    """

    __slots__ = ("_counts", "_lock", "now")

    def __init__(self, now: Callable[[], float] = wall_time) -> None:
        self.now = now
        self._lock = threading.Lock()
        self._counts: model.Counts = {}

    def add(self, kind: str, n: int = 1) -> None:
        """Count ``n`` of ``kind`` (one of :data:`~lockworker.model.rates.KINDS`) now."""
        key = (model.minute_of(self.now()), kind)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + n

    def pending(self) -> bool:
        """Whether anything is counted and not sent."""
        return bool(self._counts)

    def take(self) -> model.Counts:
        """Everything counted since the last take, to send (the minutes too old to keep
        left out); the counter starts empty again."""
        with self._lock:
            taken, self._counts = self._counts, {}
        return self._recent(taken)

    def restore(self, taken: model.Counts) -> None:
        """Give back counts whose flush failed, for the next one."""
        kept = self._recent(taken)
        with self._lock:
            for key, n in kept.items():
                self._counts[key] = self._counts.get(key, 0) + n

    def snapshot(self) -> model.Counts:
        """A copy of what is counted and not sent (for tests and debugging)."""
        with self._lock:
            return dict(self._counts)

    def _recent(self, counts: model.Counts) -> model.Counts:
        oldest = self.now() - DROP_AFTER
        return {key: n for key, n in counts.items() if n and key[0] >= oldest}


def flush(client: redis.Redis, namespace: str, counter: Rates) -> bool:
    """Send what ``counter`` holds in one script; True if anything was sent. A failure
    gives the counts back and raises."""
    taken = counter.take()
    if not taken:
        return False
    try:
        steps.record(client, namespace, taken)
    except BaseException:
        counter.restore(taken)
        raise
    return True


def _minutes(value: object) -> int:
    """``minutes`` checked: an int from 1 to :data:`~lockworker.model.rates.MAX_MINUTES`."""
    return cast(int, config.number(value, "minutes", minimum=1, maximum=model.MAX_MINUTES,
                                   integer=True, unit=""))


def rates(
    client: redis.Redis, namespace: str, minutes: int = 60, *, now: float | None = None
) -> list[model.Bucket]:
    """``namespace``'s counts of the ``minutes`` minutes ending with the current one
    (it included, so far), oldest first: ``(minute start (UTC), {"done": n, "failed":
    n, "gave_up": n, "handed_over": n})``. One script over the one to four hour hashes
    they span."""
    count, at = _minutes(minutes), wall_time() if now is None else now
    check_name(namespace, "namespace")
    last = model.minute_of(at)
    first = last - (count - 1) * model.MINUTE
    found = steps.read(client, namespace, model.hours_between(first, at))
    return model.buckets(found, last, count)


def done_in_window(
    client: redis.Redis, namespace: str, seconds: float, *, now: float | None = None
) -> int:
    """The jobs of ``namespace`` done in the last ``seconds``, counted by whole minutes:
    every minute that overlaps the window (so up to a minute more than it), at most the
    :data:`~lockworker.model.rates.MAX_MINUTES` kept."""
    window = config.seconds(seconds, "seconds")
    at = wall_time() if now is None else now
    minutes = min(model.MAX_MINUTES, (model.minute_of(at) - model.minute_of(at - window))
                  // model.MINUTE + 1)
    return model.total(rates(client, namespace, minutes, now=at))[model.DONE]


async def arates(
    client: Any, namespace: str, minutes: int = 60, *, now: float | None = None
) -> list[model.Bucket]:
    """:func:`rates` on a ``redis.asyncio`` client."""
    count, at = _minutes(minutes), wall_time() if now is None else now
    check_name(namespace, "namespace")
    last = model.minute_of(at)
    first = last - (count - 1) * model.MINUTE
    found = await steps.aread(client, namespace, model.hours_between(first, at))
    return model.buckets(found, last, count)
