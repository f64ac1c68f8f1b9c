"""The schedules' metrics (:mod:`lockworker.metrics`), counted from the events of
:class:`lockworker.ScheduleSource` (:mod:`lockworker.daemons.schedules`), all labelled
``namespace`` and ``schedule``:

- ``lockworker_schedule_ticks_total{outcome}``: ``ran`` (``schedule.ran``: a tick's job
  resolved, done or given up), ``skipped`` (``overlap``) and ``dropped`` (left out by
  ``catch_up``: due while no process served; ``schedule.dropped``'s ``dropped``), all
  at 0 from the start;
- ``lockworker_schedule_lateness_seconds``: from a tick's nominal time to its admission
  to run, on the server's clock (``schedule.admitted``'s ``late_ms``);
- ``lockworker_schedule_last_completed_seconds``: the nominal time (Unix) of the latest
  tick whose job was resolved, from the schedule's hash; before any, when this process
  began serving it;
- ``lockworker_schedule_period_seconds``: seconds between ticks (a cron's, the longest
  gap of its next ten). Alert on ``time() - last_completed > N * period``.

Each decision about a tick is counted once across processes: ``schedule.skipped``,
``schedule.dropped`` and ``schedule.admitted`` only where ``decided`` (the process
whose ADMIT made it), ``schedule.ran`` only in the process that settled the tick. The
two gauges are the same in every process serving a schedule, so an alert takes their
``max`` over processes.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from lockworker.daemons.schedules import ADMITTED, DROPPED, PROGRESS, RAN, SKIPPED

LATENESS_BUCKETS = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0,
    86400.0,
)
"""Seconds from a tick's nominal time to its start: the source looks every second at
most (a tick starts within one), ``jitter`` puts ticks off by up to their interval, a
tick caught up after an outage starts hours late."""
TICK_OUTCOMES = ("ran", "skipped", "dropped")


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class ScheduleMetrics:
    """``ticks`` (``lockworker_schedule_ticks_total``), ``lateness``, ``last_completed``
    and ``period``, on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["namespace", "schedule"]
        self.ticks = Counter(
            "lockworker_schedule_ticks_total",
            "Ticks of a schedule: ran (its job resolved), skipped (overlap), dropped "
            "(left out by catch_up).",
            [*labels, "outcome"], registry=registry,
        )
        self.lateness = Histogram(
            "lockworker_schedule_lateness_seconds",
            "From a tick's nominal time to its admission to run (server clock).",
            labels, registry=registry, buckets=LATENESS_BUCKETS,
        )
        self.last_completed = Gauge(
            "lockworker_schedule_last_completed_seconds",
            "Nominal time (Unix) of the schedule's latest tick whose job was resolved; "
            "before any, when this process began serving it.",
            labels, registry=registry,
        )
        self.period = Gauge(
            "lockworker_schedule_period_seconds",
            "Seconds between the schedule's ticks (a cron's: the longest gap of its "
            "next ten).", labels, registry=registry,
        )
        self.collectors = (self.ticks, self.lateness, self.last_completed, self.period)
        self._lock = threading.Lock()
        self._completed: dict[tuple[str, str], float] = {}

    def _completed_at(self, labels: tuple[str, str], at: float, *, newer: bool) -> None:
        """Set the gauge to ``at`` (only if later than it shows, with ``newer``)."""
        with self._lock:
            if newer and at <= self._completed.get(labels, float("-inf")):
                return
            self._completed[labels] = at
            self.last_completed.labels(*labels).set(at)

    def observe(self, event: str, fields: Mapping[str, Any]) -> None:
        """One event of ``lockworker.daemons.sources``."""
        name = fields.get("schedule")
        if not isinstance(name, str):
            return
        labels = (str(fields.get("namespace") or ""), name)
        if event == PROGRESS:
            for outcome in TICK_OUTCOMES:  # at 0 from the start: increase() sees the first
                self.ticks.labels(*labels, outcome)
            self.lateness.labels(*labels)
            last = _whole(fields.get("last_ran"))
            since = fields.get("since")
            if last is not None:
                self._completed_at(labels, last, newer=False)
            elif isinstance(since, (int, float)):
                self._completed_at(labels, since, newer=False)
            period = _whole(fields.get("period_s"))
            if period is not None:
                self.period.labels(*labels).set(period)
        elif event == RAN:
            self.ticks.labels(*labels, "ran").inc()
            tick = _whole(fields.get("tick_at"))
            if tick is not None:
                self._completed_at(labels, tick, newer=True)
        elif event == SKIPPED and fields.get("decided") is True:
            self.ticks.labels(*labels, "skipped").inc()
        elif event == DROPPED and fields.get("decided") is True:
            dropped = _whole(fields.get("dropped"))
            if dropped is not None and dropped > 0:
                self.ticks.labels(*labels, "dropped").inc(dropped)
        elif event == ADMITTED and fields.get("decided") is True:
            late = fields.get("late_ms")
            if isinstance(late, (int, float)) and late >= 0:
                self.lateness.labels(*labels).observe(late / 1000.0)
