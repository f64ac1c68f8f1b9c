"""What the workers of a namespace did, minute by minute: jobs done, attempts failed,
jobs given up and jobs handed over. Pure: no Redis, no clock, no threads.

Each worker counts its own outcomes in memory (:class:`lockworker.runtime.rates.Rates`),
so a job pays no server call for them; its presence loop adds the counts to the
server every few seconds and when the worker closes. They are kept in one hash per
hour, in the namespace's presence slot (the hash tag ``{<namespace>}`` of
:mod:`lockworker.model.presence`), so ``lockworker status`` and the dashboard read an
hour in one or two ``HGETALL`` instead of scanning jobs::

    lw:presence:workers:{billing}:rates:<hour start, Unix s>   hash:
        <minute start, Unix s>|<kind> -> count

where ``kind`` is one of :data:`KINDS`. Each hash expires :data:`KEPT_AFTER_HOUR`
seconds after its hour ends. Minutes are cut by each worker's own wall clock (hosts
agree within seconds, as NTP keeps them).

The counts are approximate in two ways: a process killed without closing its worker
(SIGKILL, a crash) loses what it counted since its last flush (at most a few
seconds' worth), and a flush applied by the server whose reply was lost is sent again
with the next one (counted twice).

The kinds:

- ``done``: jobs this worker completed (``job.done``);
- ``failed``: attempts that raised (``job.failed``; the last one of a job that then
  gives up included);
- ``gave_up``: jobs given up by this worker's fail step (its last attempt failed, or
  ``GiveUp``). A job whose last attempt's holder died is given up by the next acquire
  of any process and is not counted here;
- ``handed_over``: attempts this worker took over from another process: an acquire of
  a job whose previous grant (a failed attempt, a lease that ran out, a release at a
  stop) was another process's, as the dashboard's handovers panel and the attempt
  histories (:func:`lockworker.model.history.handed_over`) count them.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from lockworker.model.keys import PREFIX, Space, unescape
from lockworker.model.presence import NAMESPACE, presence_keys

DONE, FAILED, GAVE_UP, HANDED_OVER = "done", "failed", "gave_up", "handed_over"
KINDS = (DONE, FAILED, GAVE_UP, HANDED_OVER)
"""What is counted, in the order the views show it."""
MINUTE = 60
HOUR = 3600
KEPT_AFTER_HOUR = 2 * HOUR
"""Seconds an hour's hash is kept after the hour ends: the last two hours are always
there to read."""
MAX_MINUTES = 180
"""The most minutes one read asks for (the hashes kept cover at least two hours)."""
SEPARATOR = "|"
RATES = "rates"
"""The suffix of a namespace's hour hashes (followed by ``:<hour start>``)."""

Counts = dict[tuple[int, str], int]
"""(minute start, kind) -> count."""
Bucket = tuple[datetime.datetime, dict[str, int]]
"""A minute (its start, UTC) and its counts by kind (every kind present)."""

RATES_PATTERN = f"{PREFIX}:{Space.PRESENCE.value}:{NAMESPACE}:{{*}}:{RATES}:*"
"""A SCAN pattern matching every namespace's hour hashes."""


def minute_of(at: float) -> int:
    """The start (Unix s) of the minute holding ``at``."""
    return int(at // MINUTE) * MINUTE


def hour_of(at: float) -> int:
    """The start (Unix s) of the hour holding ``at``."""
    return int(at // HOUR) * HOUR


def hour_key(namespace: str, hour: int) -> str:
    """The hash of ``namespace``'s counts of the hour starting at ``hour``."""
    return presence_keys(namespace).extra(f"{RATES}:{hour}")


def parse_rates_key(key: str) -> str | None:
    """The namespace whose hour hash ``key`` is, or None if it is not one."""
    head = f"{PREFIX}:{Space.PRESENCE.value}:{NAMESPACE}:{{"
    tail = f"}}:{RATES}:"
    if not key.startswith(head) or tail not in key:
        return None
    name, _, hour = key[len(head):].rpartition(tail)
    if not name or "}" in name or not hour.isdigit():
        return None
    return unescape(name)


def field(minute: int, kind: str) -> str:
    """The hash field of ``kind``'s count in the minute starting at ``minute``."""
    return f"{minute}{SEPARATOR}{kind}"


def record_call(
    namespace: str, counts: Mapping[tuple[int, str], int]
) -> tuple[list[str], list[Any]]:
    """The keys and arguments of the record script for ``counts``: every hour hash they
    touch, then each key's expiry (Unix s), then ``key index, field, delta`` for every
    nonzero count."""
    hours = sorted({hour_of(minute) for (minute, _), n in counts.items() if n})
    index = {hour: i + 1 for i, hour in enumerate(hours)}
    args: list[Any] = [hour + HOUR + KEPT_AFTER_HOUR for hour in hours]
    for (minute, kind), n in sorted(counts.items()):
        if n:
            args += [index[hour_of(minute)], field(minute, kind), n]
    return [hour_key(namespace, hour) for hour in hours], args


def hours_between(start: float, end: float) -> list[int]:
    """The starts of the hours from the one holding ``start`` to the one holding ``end``."""
    return list(range(hour_of(start), hour_of(end) + 1, HOUR))


def parse_hash(raw: Mapping[str, str]) -> Counts:
    """An hour hash as counts; fields lockworker did not write are left out."""
    found: Counts = {}
    for name, value in raw.items():
        minute, sep, kind = name.partition(SEPARATOR)
        if not sep or kind not in KINDS or not minute.isdigit():
            continue
        try:
            found[(int(minute), kind)] = found.get((int(minute), kind), 0) + int(value)
        except ValueError:
            continue
    return found


def buckets(counts: Mapping[tuple[int, str], int], last: int, minutes: int) -> list[Bucket]:
    """The ``minutes`` minutes ending with the one starting at ``last``, oldest first,
    each with its counts (zeros where none)."""
    out: list[Bucket] = []
    for minute in range(last - (minutes - 1) * MINUTE, last + 1, MINUTE):
        start = datetime.datetime.fromtimestamp(minute, tz=datetime.timezone.utc)
        out.append((start, {kind: counts.get((minute, kind), 0) for kind in KINDS}))
    return out


def total(found: Iterable[Bucket]) -> dict[str, int]:
    """The counts of ``found`` summed by kind."""
    sums = dict.fromkeys(KINDS, 0)
    for _start, counts in found:
        for kind in KINDS:
            sums[kind] += counts.get(kind, 0)
    return sums
