"""Schedules: :class:`Every` and :class:`Cron`, and their ticks, as pure values.

A tick is a nominal time at which a schedule's job should run once. Every process
serving a schedule computes the same ticks from the same definition (no leader), names
each one ``"<name>@<nominal UTC time>"`` (:meth:`Schedule.tick_id`), and the lock
protocol decides who runs it: a tick is a job like any other, so a holder that dies is
taken over at its lease's end and a DONE tick never runs again.

Ticks are whole seconds since the epoch (``int``) inside the library and aware UTC
datetimes at the edges (:meth:`Schedule.ticks`). Nothing here reads a clock: the
serving side (:mod:`lockworker.daemons.schedules`) asks the server for the time.

Daylight saving time, for a :class:`Cron` in a zone that has it (the rule is cron's,
as Debian's cron and cronsim read it):

- a local time that does not exist (clocks go forward) runs once, at the first instant
  after the gap (``30 2 * * *`` in Europe/Berlin on the spring day: 03:00 CEST);
- a local time that happens twice (clocks go back) runs once, at its first occurrence
  (``30 2 * * *`` on the autumn day: 02:30 CEST, not 02:30 CET again); a schedule
  that names every hour (``0 * * * *``) therefore skips the repeated hour.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from lockworker.config import choice, number, seconds
from lockworker.errors import InvalidConfig
from lockworker.model.codec import check_payload
from lockworker.model.keys import check_name

CATCH_UP = ("latest", "all", "none")
"""``catch_up=``: which ticks run of those whose time passed while no process served."""
OVERLAP = ("skip", "allow", "wait")
"""``overlap=``: what a tick does that falls due while the previous one still runs."""
MAX_CATCH_UP = 100
"""``catch_up="all"`` runs at most this many missed ticks (the latest ones), then the
current one: a schedule stopped for a month does not start thirty days of work."""
COUNT_MOST = 100_000
"""The most ticks :meth:`Schedule.count_between` counts in one gap (a cron schedule's
ticks are walked one by one: a year of every-minute ticks is about 525,000)."""
TICK_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_WINDOW = 3600
"""Seconds of the first window :meth:`Schedule.recent` looks back over (doubled until
it holds enough ticks)."""


def utc(second: int) -> datetime:
    """Epoch seconds as an aware UTC datetime."""
    return datetime.fromtimestamp(second, timezone.utc)


def _epoch(moment: object, name: str) -> float:
    if not isinstance(moment, datetime) or moment.utcoffset() is None:
        raise InvalidConfig(f"{name} must be an aware datetime, got {moment!r}")
    return moment.timestamp()


class Schedule:
    """What :class:`Every` and :class:`Cron` share: a name, a payload, the policies."""

    def __init__(
        self, name: str, *, payload: Any = None, catch_up: str = "latest",
        overlap: str = "skip", jitter: float = 0,
    ) -> None:
        self.name = check_name(name, "schedule name")
        check_payload(payload)
        self.payload = payload
        self.catch_up = choice(catch_up, "catch_up", CATCH_UP)
        self.overlap = choice(overlap, "overlap", OVERLAP)
        self.jitter = seconds(jitter, "jitter", positive=False)

    # -- what each kind defines ------------------------------------------------------

    def _after(self, after: float) -> Iterator[int]:
        """The ticks strictly after ``after`` (epoch seconds), in order, forever."""
        raise NotImplementedError

    @property
    def spec(self) -> str:
        """The definition in words (logs, the CLI)."""
        raise NotImplementedError

    # -- derived ----------------------------------------------------------------------

    def seconds_between(self, after: float, until: float) -> list[int]:
        """The ticks in ``(after, until]``, as epoch seconds."""
        found = []
        for tick in self._after(after):
            if tick > until:
                break
            found.append(tick)
        return found

    def count_between(self, after: float, until: float) -> int:
        """How many ticks lie strictly between ``after`` and ``until`` (epoch seconds):
        those a catch-up policy drops when it admits ``until`` next after ``after``.
        Counted up to :data:`COUNT_MOST` (a cron's ticks are walked one by one)."""
        found = 0
        for tick in self._after(after):
            if tick >= until or found >= COUNT_MOST:
                break
            found += 1
        return found

    def ticks(self, after: datetime, until: datetime) -> list[datetime]:
        """The nominal times in ``(after, until]``, as aware UTC datetimes, in order.

        A pure function of the schedule: every process computes the same ones.
        """
        return [
            utc(t)
            for t in self.seconds_between(_epoch(after, "after"), _epoch(until, "until"))
        ]

    def next_after(self, after: float) -> int:
        """The first tick strictly after ``after`` (epoch seconds)."""
        return next(self._after(after))

    def recent(self, after: float, until: float, most: int) -> list[int]:
        """The last ``most`` ticks in ``(after, until]``, in order: found by looking back
        over a window doubled until it holds enough (a forward iteration each time, so
        the same ticks as :meth:`seconds_between`)."""
        window = _WINDOW
        while True:
            start = max(after, until - window)
            found = self.seconds_between(start, until)
            if len(found) >= most or start <= after:
                return found[-most:] if most else []
            window *= 2

    def tick_id(self, tick: int | datetime) -> str:
        """``"<name>@<nominal time, UTC, %Y-%m-%dT%H:%M:%SZ>"``, e.g.
        ``digest@2026-11-30T06:00:00Z``: the tick's job id in every process."""
        moment = tick if isinstance(tick, datetime) else utc(tick)
        return f"{self.name}@{moment.astimezone(timezone.utc).strftime(TICK_FORMAT)}"

    def tick_payload(self, tick: int) -> dict[str, Any]:
        """The payload of a tick's job: the schedule's name, the nominal time (epoch
        seconds, read by :attr:`lockworker.Job.scheduled_for`, and as text) and the
        schedule's own ``payload``."""
        return {
            "schedule": self.name, "tick": tick,
            "at": utc(tick).strftime(TICK_FORMAT), "payload": self.payload,
        }

    def delay(self, tick: int) -> float:
        """Seconds the tick's start is put off by ``jitter``: the same in every process
        (derived from the tick's id, which it never changes), below the next tick."""
        if not self.jitter:
            return 0.0
        digest = hashlib.sha256(self.tick_id(tick).encode()).digest()
        share = int.from_bytes(digest[:8], "big") / 2**64
        return share * min(self.jitter, self.next_after(tick) - tick)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.spec})"


class Every(Schedule):
    """A tick every ``seconds`` (a whole number, at least 1), on the multiples of it since
    the epoch: ``Every("sync", 300)`` ticks at :00, :05, :10 ... of every hour, in every
    process alike, whenever each started."""

    def __init__(
        self, name: str, seconds: int, *, payload: Any = None, catch_up: str = "latest",
        overlap: str = "skip", jitter: float = 0,
    ) -> None:
        super().__init__(
            name, payload=payload, catch_up=catch_up, overlap=overlap, jitter=jitter
        )
        interval = number(seconds, "seconds", minimum=1)
        if interval is None or not float(interval).is_integer():
            raise InvalidConfig(f"seconds must be a whole number of seconds >= 1, got {seconds!r}")
        self.seconds = int(interval)

    @property
    def spec(self) -> str:
        return f"every {self.seconds} s"

    def count_between(self, after: float, until: float) -> int:
        first = (math.floor(after) // self.seconds + 1) * self.seconds
        return max(0, -(-(math.ceil(until) - first) // self.seconds))

    def _after(self, after: float) -> Iterator[int]:
        tick = (math.floor(after) // self.seconds + 1) * self.seconds
        while True:
            yield tick
            tick += self.seconds


class Cron(Schedule):
    """Ticks of a five-field cron expression (minute hour day-of-month month day-of-week,
    read by cronsim) in the zone ``tz`` (an IANA name, default UTC); DST as the module
    docstring says."""

    def __init__(
        self, name: str, expression: str, *, tz: str = "UTC", payload: Any = None,
        catch_up: str = "latest", overlap: str = "skip", jitter: float = 0,
    ) -> None:
        super().__init__(
            name, payload=payload, catch_up=catch_up, overlap=overlap, jitter=jitter
        )
        self.tz = zone(tz)
        self.expression = cron_expression(expression)

    @property
    def spec(self) -> str:
        return f"cron {self.expression!r} in {self.tz.key}"

    def _after(self, after: float) -> Iterator[int]:
        start = datetime.fromtimestamp(math.floor(after), timezone.utc).astimezone(self.tz)
        last = math.floor(after)
        for local in CronSim(self.expression, start):
            if local.fold and local.replace(fold=0).utcoffset() != local.utcoffset():
                continue  # the second occurrence of a repeated local time
            tick = int(local.timestamp())
            if tick > last:  # a gap's times land on the same instant: one tick
                last = tick
                yield tick


def zone(value: object, name: str = "tz") -> ZoneInfo:
    """An IANA time zone name (``"Europe/Berlin"``, ``"UTC"``) as a ZoneInfo."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidConfig(f"{name} must be an IANA time zone name like 'UTC', got {value!r}")
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidConfig(
            f"{name} must be an IANA time zone name like 'Europe/Berlin', got {value!r}"
        ) from None


def cron_expression(value: object, name: str = "expression") -> str:
    """A five-field cron expression, checked by the cron library itself."""
    expected = "a five-field cron expression like '*/5 * * * *'"
    if not isinstance(value, str) or len(value.split()) != 5:
        raise InvalidConfig(f"{name} must be {expected}, got {value!r}")
    text = " ".join(value.split())
    try:
        next(CronSim(text, datetime(2000, 1, 1, tzinfo=timezone.utc)))
    except (CronSimError, StopIteration) as exc:
        raise InvalidConfig(f"{name} must be {expected}, got {value!r} ({exc})") from None
    return text


def as_schedules(value: object) -> list[Schedule]:
    """A list of schedules with distinct names (a ScheduleSource's)."""
    if isinstance(value, Schedule):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise InvalidConfig(f"schedules must be a non-empty list of Every or Cron, got {value!r}")
    names: set[str] = set()
    for item in value:
        if not isinstance(item, Schedule):
            raise InvalidConfig(f"schedules must be Every or Cron objects, got {item!r}")
        if item.name in names:
            raise InvalidConfig(f"schedule names must be distinct, got {item.name!r} twice")
        names.add(item.name)
    return list(value)




def definition(schedule: Schedule) -> dict[str, Any]:
    """What defines ``schedule``'s ticks, as JSON-ready data (kept in its hash on the
    server for ``lockworker status``): ``{"every": 300}`` or
    ``{"cron": "30 2 * * *", "tz": "Europe/Berlin"}``."""
    if isinstance(schedule, Every):
        return {"every": schedule.seconds}
    if isinstance(schedule, Cron):
        return {"cron": schedule.expression, "tz": schedule.tz.key}
    raise InvalidConfig(f"a schedule must be an Every or a Cron, got {schedule!r}")


def from_definition(name: str, found: object) -> Schedule | None:
    """The schedule :func:`definition` describes, or None when ``found`` is none that
    this release reads (written by another, or by hand): its ticks are then unknown."""
    if not isinstance(found, dict):
        return None
    try:
        if set(found) == {"every"}:
            return Every(name, found["every"])
        if set(found) == {"cron", "tz"}:
            return Cron(name, found["cron"], tz=found["tz"])
    except InvalidConfig:
        return None
    return None


def period(schedule: Schedule, after: float, most: int = 10) -> int:
    """Seconds between ticks, for alerting on a schedule that has not completed one in
    N of them: an ``Every``'s interval; for a ``Cron``, the longest gap between its next
    ``most`` ticks after ``after``, so that a weekday schedule's weekend, or a short
    month, is not taken for ticks missed."""
    if isinstance(schedule, Every):
        return schedule.seconds
    ticks = []
    for tick in schedule._after(after):
        ticks.append(tick)
        if len(ticks) > most:
            break
    return max(b - a for a, b in itertools.pairwise(ticks))
