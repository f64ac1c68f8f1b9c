"""Prometheus metrics of lockworker's workers and leaders: the ``lockworker[metrics]`` extra.

``install()`` registers the metrics on a ``prometheus_client`` registry and counts them
from lockworker's events (an event observer, :func:`lockworker.runtime.events.add_observer`),
so they need nothing from the worker or the leader but the events they emit anyway, and
cost nothing until installed. Serving them is the application's choice
(``prometheus_client.start_http_server``, a web framework's endpoint, a push gateway);
``lockworker run --metrics-port`` serves the default registry.

The metric names and labels below are a public contract (docs/daemons.md, "Metrics"):

- ``lockworker_job_outcomes_total{namespace,outcome}``: one per ``job.done``
  (``done``), ``job.done_elsewhere``, ``job.failed``, ``job.gave_up``, ``lease.lost``
  (``lost``) and ``job.stopped`` event of this process's workers;
- ``lockworker_attempt_duration_seconds{namespace}``: from ``job.acquired`` to the end
  of that attempt here (done, failed, released, lost or stopped);
- ``lockworker_handover_wait_seconds{namespace}`` and
  ``lockworker_takeover_latency_seconds{namespace}``: ``job.acquired``'s ``waited_ms``
  and ``past_lease_ms``, when it carries them;
- ``lockworker_leases_held{namespace}``: the attempts this process holds now;
- ``lockworker_leader{name}``: 1 while this process leads ``name``, 0 once it
  campaigned for it otherwise (following, resigned, lost);
- ``lockworker_leader_elections_total{name}`` and ``lockworker_leader_lost_total{name}``:
  terms this process won (``leader.elected``) and lost (``leader.lost``: its lease
  could not be renewed in time, or was taken);
- ``lockworker_redis_retries_total{step}``: Redis steps retried after a connection
  error or a failover's refusal, by step (the job id, lock or stream name cut off);
- ``lockworker_redis_unavailable_total{step}``: Redis steps given up once their
  retries ran out (``redis.unavailable``: the caller got ``RedisUnavailable``);
- ``lockworker_server_check{server,check}``: the last ``server.check`` of a daemon
  (at start and every few minutes): 0 ok, 1 warning, 2 unknown, 3 failure (alert on
  ``lockworker_server_check{check="eviction"} == 3``);
- ``lockworker_server_evicted_keys{server}``: the keys the server evicted since it
  started (``INFO stats``), as last checked (alert on any increase);
- ``lockworker_stream_behind_seconds{stream,namespace}`` and
  ``lockworker_stream_trimming_waits{stream,namespace}``: at this process's last save
  of its stream position (``stream.progress``), how far that position was behind its
  namespace's progress (what it then skipped), and 1 if trimming waits for its own
  position (a reader of no namespace), 0 if only for its namespace's progress;
- ``lockworker_server_memory_used_ratio{server}``: the server's ``used_memory`` over
  its ``maxmemory`` (else over its host's memory), as last checked (alert above 0.8,
  where ``lockworker check`` warns);
- the schedules' ``lockworker_schedule_*{namespace,schedule}``: ticks, lateness, the
  last completed tick and the period (:mod:`lockworker.metrics.schedules`).

Only this package imports ``prometheus_client``; without it, importing this module
raises :class:`~lockworker.errors.ExtraNotInstalled` naming the install line.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from lockworker.clock import Clock, SystemClock
from lockworker.daemons.sources import PROGRESS as STREAM_PROGRESS
from lockworker.errors import ExtraNotInstalled
from lockworker.runtime import events

try:
    import prometheus_client
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
except ImportError as exc:
    raise ExtraNotInstalled(
        "lockworker.metrics needs prometheus_client: pip install 'lockworker[metrics]'"
    ) from exc

from lockworker.metrics.schedules import ScheduleMetrics

__all__ = [
    "ATTEMPT_BUCKETS", "DEFAULT_HOST", "LATENCY_BUCKETS", "MAX_PAIRS", "OUTCOMES", "Metrics",
    "install", "serve_http", "step_label", "wsgi_app",
]

OUTCOMES = {
    events.DONE: "done",
    events.DONE_ELSEWHERE: "done_elsewhere",
    events.FAILED: "failed",
    events.GAVE_UP: "gave_up",
    events.LOST: "lost",
    events.STOPPED: "stopped",
}
"""The worker events counted by ``lockworker_job_outcomes_total``, and their ``outcome``."""

CHECK_LEVELS = {"ok": 0, "warning": 1, "unknown": 2, "failure": 3}
ENDS = frozenset({events.DONE, events.FAILED, events.RELEASED, events.LOST, events.STOPPED})
"""The events that end an attempt this process held (the first of them, per token)."""

LEADER_ELECTED = "leader.elected"
LEADER_LOST = "leader.lost"
LEADER_ENDED = frozenset({"leader.resigned", LEADER_LOST})

LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)
"""Seconds, for waits and takeovers: a SIGTERM handover takes milliseconds, a takeover
after a crash a lease (seconds), a backlog behind a long job minutes."""

ATTEMPT_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)
"""Seconds, for attempts: from a few milliseconds of work to an hour."""

MAX_PAIRS = 10_000
"""The most attempts remembered between ``job.acquired`` and their end. An attempt
whose end is never seen (an exception past the library, Redis unreachable while
settling) is dropped when the job is acquired again here, or, past this many, the
oldest first: so the table, and ``lockworker_leases_held``, cannot drift without
bound."""

_NAMED = re.compile(r"""\s*(\(|'|").*$""")
"""What follows a step's words: `` (job 'nightly-7')``, `` 'report'`` (a lock, a stream)."""

_installed: dict[int, Metrics] = {}
_installed_lock = threading.Lock()


def install(
    registry: CollectorRegistry | None = None, *, clock: Clock | None = None
) -> Metrics:
    """Register lockworker's metrics on ``registry`` (default:
    ``prometheus_client.REGISTRY``) and count every event emitted from now on.

    Installing again on the same registry returns the :class:`Metrics` already there
    (no duplicate registration); :meth:`Metrics.uninstall` first to start afresh.
    ``clock`` times the attempts (default: the monotonic system clock).
    """
    target = prometheus_client.REGISTRY if registry is None else registry
    with _installed_lock:
        found = _installed.get(id(target))
        if found is not None:
            return found
        metrics = Metrics(target, clock or SystemClock())
        _installed[id(target)] = metrics
    events.add_observer(metrics.observe)
    return metrics


DEFAULT_HOST = "0.0.0.0"


def serve_http(port: int, *, host: str = DEFAULT_HOST) -> Metrics:
    """:func:`install` on the default registry, and serve it over HTTP on ``host:port``
    (``prometheus_client.start_http_server``: every path answers, ``/metrics`` by
    custom) from a daemon thread, for the life of the process. What
    ``lockworker run --metrics-port`` does. Raises ``OSError`` if it cannot listen
    there (the port is taken, the host is not this machine's)."""
    prometheus_client.start_http_server(port, addr=host)  # first: a failure installs nothing
    return install()


def wsgi_app() -> Any:
    """:func:`install` on the default registry, and a WSGI application serving it
    (every path answers): what ``lockworker run --metrics-port`` serves beside its
    probes (:mod:`lockworker.cli.probes`)."""
    install()
    return prometheus_client.make_wsgi_app()


class Metrics:
    """lockworker's metrics on one registry, counted from events; made by :func:`install`.

    The attributes are the ``prometheus_client`` metrics, for reading in tests or
    adding to: ``outcomes``, ``attempt_duration``, ``handover_wait``,
    ``takeover_latency``, ``leases_held``, ``leader``, ``leader_elections``,
    ``leader_lost``, ``redis_retries``, ``redis_unavailable``, ``server_check``,
    ``evicted_keys``, ``memory_used``, ``stream_behind``, ``stream_trimming_waits``;
    ``schedules`` holds the schedules' (:class:`~lockworker.metrics.schedules.ScheduleMetrics`).
    """

    def __init__(self, registry: CollectorRegistry, clock: Clock) -> None:
        self.registry = registry
        self.clock = clock
        self.outcomes = Counter(
            "lockworker_job_outcomes_total",
            "Ends of this process's job runs and attempts, by outcome.",
            ["namespace", "outcome"], registry=registry,
        )
        self.attempt_duration = Histogram(
            "lockworker_attempt_duration_seconds",
            "From acquiring a job to the end of that attempt (done, failed, released, "
            "lost, stopped).",
            ["namespace"], registry=registry, buckets=ATTEMPT_BUCKETS,
        )
        self.handover_wait = Histogram(
            "lockworker_handover_wait_seconds",
            "From first seeing another holder of a job to acquiring it.",
            ["namespace"], registry=registry, buckets=LATENCY_BUCKETS,
        )
        self.takeover_latency = Histogram(
            "lockworker_takeover_latency_seconds",
            "From the end of a lease that ran out to taking the job over.",
            ["namespace"], registry=registry, buckets=LATENCY_BUCKETS,
        )
        self.leases_held = Gauge(
            "lockworker_leases_held", "Job attempts this process holds now.",
            ["namespace"], registry=registry,
        )
        self.leader = Gauge(
            "lockworker_leader", "1 while this process leads the name, else 0.",
            ["name"], registry=registry,
        )
        self.leader_elections = Counter(
            "lockworker_leader_elections",
            "Terms this process won, by leader name.", ["name"], registry=registry,
        )
        self.leader_lost = Counter(
            "lockworker_leader_lost",
            "Terms this process lost (its lease not renewed in time, or taken), by name.",
            ["name"], registry=registry,
        )
        self.redis_unavailable = Counter(
            "lockworker_redis_unavailable",
            "Redis steps given up once their retries ran out, by step.",
            ["step"], registry=registry,
        )
        self.redis_retries = Counter(
            "lockworker_redis_retries_total",
            "Redis steps retried after a connection error or a failover's refusal, by step.",
            ["step"], registry=registry,
        )
        self.server_check = Gauge(
            "lockworker_server_check",
            "Last verdict of a server check: 0 ok, 1 warning, 2 unknown, 3 failure.",
            ["server", "check"], registry=registry,
        )
        self.evicted_keys = Gauge(
            "lockworker_server_evicted_keys",
            "Keys the server evicted since it started (INFO stats), as last checked.",
            ["server"], registry=registry,
        )
        self.stream_behind = Gauge(
            "lockworker_stream_behind_seconds",
            "How far this process's stream position was behind its namespace's progress "
            "at its last save (by entry time).",
            ["stream", "namespace"], registry=registry,
        )
        self.stream_trimming_waits = Gauge(
            "lockworker_stream_trimming_waits",
            "1 if trimming waits for this process's own stream position, 0 if only for "
            "its namespace's progress.",
            ["stream", "namespace"], registry=registry,
        )
        self.memory_used = Gauge(
            "lockworker_server_memory_used_ratio",
            "The server's used memory over its maxmemory (else its host's memory), as "
            "last checked.", ["server"], registry=registry,
        )
        self.schedules = ScheduleMetrics(registry)
        self._collectors = (
            self.memory_used, self.outcomes, self.attempt_duration, self.handover_wait,
            self.takeover_latency, self.leases_held, self.leader, self.redis_retries,
            self.server_check, self.evicted_keys, self.leader_elections, self.leader_lost,
            self.redis_unavailable, self.stream_behind, self.stream_trimming_waits,
            *self.schedules.collectors,
        )
        self._lock = threading.Lock()
        self._held: OrderedDict[tuple[str, str], tuple[Any, float]] = OrderedDict()
        """(namespace, job_id) -> (token, acquired at): one attempt per job at a time,
        as the server grants one holder at a time."""
        self._namespaces: set[str] = set()

    def uninstall(self) -> None:
        """Stop counting and unregister the metrics from the registry."""
        events.remove_observer(self.observe)
        with _installed_lock:
            if _installed.get(id(self.registry)) is self:
                del _installed[id(self.registry)]
        for collector in self._collectors:
            with contextlib.suppress(KeyError):  # unregistered already (a second uninstall)
                self.registry.unregister(collector)

    # -- counting --------------------------------------------------------------------

    def observe(self, logger_name: str, event: str, fields: Mapping[str, Any]) -> None:
        """The event observer: one event of any lockworker logger."""
        if logger_name == events.WORKER:
            self._job(event, fields)
        elif logger_name == events.LEADER:
            name = fields.get("leader")
            if isinstance(name, str):
                # Any event of a campaign (a follower's too) shows the name at 0, so
                # ``sum by (name) (lockworker_leader) < 1`` still has the followers'
                # series to sum when the leader's process is gone.
                gauge = self.leader.labels(name)
                elections, lost = self.leader_elections.labels(name), self.leader_lost.labels(name)
                if event == LEADER_ELECTED:
                    gauge.set(1)
                    elections.inc()
                elif event in LEADER_ENDED:
                    gauge.set(0)
                    if event == LEADER_LOST:
                        lost.inc()
        if event == events.REDIS_RETRY:
            step = step_label(fields.get("step"))
            self.redis_retries.labels(step).inc()
            self.redis_unavailable.labels(step)  # at 0 from the first retry: see _first_seen
        elif event == events.REDIS_UNAVAILABLE:
            self.redis_unavailable.labels(step_label(fields.get("step"))).inc()
        elif event == events.SERVER_CHECK:
            self._server_check(fields)
        elif event == STREAM_PROGRESS and logger_name == events.SOURCES:
            self._stream(fields)
        elif logger_name == events.SOURCES and event.startswith("schedule."):
            self.schedules.observe(event, fields)

    def _stream(self, fields: Mapping[str, Any]) -> None:
        labels = (str(fields.get("stream", "")), str(fields.get("namespace") or ""))
        behind = fields.get("behind_ms")
        if isinstance(behind, int):
            self.stream_behind.labels(*labels).set(behind / 1000.0)
        self.stream_trimming_waits.labels(*labels).set(1 if fields.get("holds_trimming") else 0)

    def _server_check(self, fields: Mapping[str, Any]) -> None:
        server, check = str(fields.get("server", "")), str(fields.get("check", ""))
        level = CHECK_LEVELS.get(str(fields.get("status")))
        if level is not None:
            self.server_check.labels(server, check).set(level)
        value = str(fields.get("value", ""))
        if check == "evicted_keys" and value.isdigit():
            self.evicted_keys.labels(server).set(int(value))
        measure = fields.get("measure")
        if check == "memory" and isinstance(measure, (int, float)):
            self.memory_used.labels(server).set(measure)

    def _job(self, event: str, fields: Mapping[str, Any]) -> None:
        namespace = fields.get("namespace")
        if not isinstance(namespace, str):
            return
        if namespace not in self._namespaces:
            self._first_seen(namespace)
        if event == events.ACQUIRED:
            self._acquired(namespace, fields)
        elif event in ENDS:
            self._ended(namespace, fields)
        outcome = OUTCOMES.get(event)
        if outcome is not None:
            self.outcomes.labels(namespace, outcome).inc()

    def _first_seen(self, namespace: str) -> None:
        """Every series of a namespace at 0 from its first event, so a rate or an
        ``increase() > 0`` alert sees the first failure too (a series that appears
        at 1 has no increase)."""
        with self._lock:
            if namespace in self._namespaces:
                return
            self._namespaces.add(namespace)
        for outcome in OUTCOMES.values():
            self.outcomes.labels(namespace, outcome)
        self.leases_held.labels(namespace)
        self.attempt_duration.labels(namespace)

    def _acquired(self, namespace: str, fields: Mapping[str, Any]) -> None:
        now = self.clock.monotonic()
        dropped: list[str] = []
        with self._lock:
            job = (namespace, str(fields.get("job_id")))
            if self._held.pop(job, None) is not None:
                dropped.append(namespace)  # its end was never seen: this acquisition ends it
            self._held[job] = (fields.get("token"), now)
            while len(self._held) > MAX_PAIRS:
                (other, _job_id), _pair = self._held.popitem(last=False)
                dropped.append(other)
        self.leases_held.labels(namespace).inc()
        for other in dropped:
            self.leases_held.labels(other).dec()
        for field, histogram in (
            ("waited_ms", self.handover_wait), ("past_lease_ms", self.takeover_latency),
        ):
            ms = fields.get(field)
            if isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms >= 0:
                histogram.labels(namespace).observe(ms / 1000.0)

    def _ended(self, namespace: str, fields: Mapping[str, Any]) -> None:
        job = (namespace, str(fields.get("job_id")))
        with self._lock:
            held = self._held.get(job)
            if held is None or held[0] != fields.get("token"):
                return  # not an attempt held here, or its end was counted already
            del self._held[job]
        self.attempt_duration.labels(namespace).observe(
            max(0.0, self.clock.monotonic() - held[1])
        )
        self.leases_held.labels(namespace).dec()


def step_label(step: object) -> str:
    """``redis.retry``'s ``step`` as a label of bounded cardinality: its words, without
    the job id, lock or stream name they end with (``acquire job (job 'nightly-7')``
    is ``acquire job``)."""
    if not isinstance(step, str):
        return "unknown"
    return _NAMED.sub("", step) or "unknown"
