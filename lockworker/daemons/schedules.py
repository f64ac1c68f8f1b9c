"""``ScheduleSource``: the ticks of schedules, as jobs for ``Worker.serve``.

Every process serving a schedule hands ``serve`` each tick as a job whose id is the
tick's (``digest@2026-11-30T06:00:00Z``, :mod:`lockworker.model.schedule`); the lock
protocol makes one process run it, a backup take it over if its holder dies, and a DONE
tick never run again. Around that, the schedule's hash on the server
(:mod:`lockworker.protocol.schedules`) records what was decided about its ticks, so that
every process decides alike and a process that starts late or again resumes from it:

- Due-ness is read from the server's clock (``TIME``), never from this host's. A tick
  not due yet is no delivery at all: it blocks nothing and holds no serve slot; the
  source sleeps until it is due (its ``jitter`` delay included), or
  :data:`POLL` seconds at most, then looks again.
- A due tick is admitted once for all processes (``ADMIT``): to run, to wait for the
  running one (``overlap="wait"``), skipped (``overlap="skip"`` while the previous tick
  still runs anywhere), or found dropped by catch-up. A tick admitted to run and not yet
  resolved is delivered by every serving process, including one that joins later: a
  started tick is never dropped, it follows its job's attempts and retry schedule.
- When its job is resolved here (DONE, done elsewhere, given up), ``RESOLVE`` settles
  it on the server; the schedule's progress then moves past it. A tick left pending by
  a stop is not settled, and is delivered again after a restart.
- Catch-up, for the ticks after the latest decided one: ``"latest"`` admits only the
  latest due tick (older ones are dropped); ``"all"`` admits the missed ones one at a
  time, in order, each once the one before is settled (the last
  :data:`~lockworker.model.schedule.MAX_CATCH_UP` of them, then the current one);
  ``"none"`` admits only ticks that fell due since this source started serving. A
  schedule new to the server starts with the ticks after its first serving began.

Events (on ``lockworker.daemons.sources``; :mod:`lockworker.metrics` counts them), each
with ``schedule`` and ``tick`` (the tick's id): ``schedule.admitted`` (a tick admitted
to run; ``late_ms``, server time then minus the nominal time; ``decided``, true in the
one process whose ADMIT decided it), ``schedule.waiting``, ``schedule.skipped`` (both
with ``decided``), ``schedule.ran`` (this process settled the tick: its job resolved;
``tick_at``, its nominal time in epoch seconds),
and ``schedule.progress`` (DEBUG, at the first look and whenever the latest resolved
tick changes: ``last_ran`` from the hash, else ``since`` this process began serving,
and ``period_s``, :func:`~lockworker.model.schedule.period`).

``beside=`` serves another source (a :class:`~lockworker.StreamSource`) in the same
``serve`` call: it is read in a thread of its own, one delivery ahead at most.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Iterator
from typing import Any

import redis

from lockworker.clock import Clock, SystemClock
from lockworker.errors import InvalidConfig, LockworkerError
from lockworker.model import registry as names
from lockworker.model.schedule import MAX_CATCH_UP, Schedule, as_schedules, definition, period
from lockworker.protocol import text
from lockworker.protocol.schedules import ADMIT, RESOLVE, schedule_key
from lockworker.runtime import events, registering, retry
from lockworker.serving.delivery import Delivery

__all__ = ["POLL", "ScheduleSource"]

POLL = 1.0
"""Seconds between two looks at the schedules' hashes at most: how soon a tick another
process admitted, or a waiting tick promoted, is joined here."""
SKIPPED = "schedule.skipped"
DROPPED = "schedule.dropped"
ADMITTED = "schedule.admitted"
WAITING = "schedule.waiting"
RAN = "schedule.ran"
PROGRESS = "schedule.progress"
RESOLVE_FAILED = "schedule.resolve_failed"
SLICE = 0.1
"""Seconds between two looks at the serving's stop flag while the source sleeps."""


def server_now(client: redis.Redis) -> float:
    """The server's clock (``TIME``), in seconds since the epoch."""
    secs, micros = client.time()
    return int(secs) + int(micros) / 1e6


class _Plan:
    """What this process knows of one schedule during one pass of ``deliveries``."""

    def __init__(self, schedule: Schedule, key: str, started: float) -> None:
        self.schedule = schedule
        self.key = key
        self.started = started
        self.inflight: set[int] = set()
        """Ticks delivered here whose jobs are not resolved here yet."""
        self.settled: set[int] = set()
        """Ticks resolved here (not delivered again while the server still shows them
        open: its RESOLVE may be on the way)."""
        self.waiting: set[int] = set()
        """Ticks this process decided should wait: it reports their start."""
        self.last_ran: int | None = -1
        """The hash's ``last_ran`` at the last look (-1: not looked yet)."""


class ScheduleSource:
    """The ticks of ``schedules`` (:class:`~lockworker.Every`, :class:`~lockworker.Cron`)
    as jobs, for ``Worker.serve`` and ``aio.Worker.serve``; see the module docstring.

    The ticks' jobs and the schedules' progress live in the serving worker's namespace.

    :param beside: another source served in the same ``serve`` call (a stream).
    :param redis_retry: retry policy for connection errors; when it runs out,
        :class:`~lockworker.RedisUnavailable` ends ``serve``.
    """

    def __init__(
        self,
        client: redis.Redis,
        schedules: list[Schedule],
        *,
        beside: Any = None,
        clock: Clock | None = None,
        logger: Any = None,
        redis_retry: retry.RetryPolicy | None = None,
    ) -> None:
        self.client = client
        self.schedules = as_schedules(schedules)
        if beside is not None and not hasattr(beside, "deliveries"):
            raise InvalidConfig(f"beside must be a source (a StreamSource), got {beside!r}")
        self.beside = beside
        self.clock: Clock = clock or SystemClock()
        self.namespace: str | None = None
        self._logger = logger
        self._log = events.logger(events.SOURCES, logger)
        self._call = retry.Caller(self.clock, redis_retry or retry.DEFAULT, self._log)
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._ready = 0
        self._registration = registering.Registration(client)

    # -- what serve asks of a source ------------------------------------------------

    def attach(self, worker: Any) -> None:
        """``serve`` names the worker: its namespace holds the ticks and progress."""
        self.namespace = worker.namespace
        self._log = events.logger(
            events.SOURCES, self._logger or getattr(worker, "_logger", None),
            namespace=worker.namespace,
        )
        self._call.log = self._log
        attach = getattr(self.beside, "attach", None)
        if attach is not None:
            attach(worker)

    @property
    def group(self) -> str | None:
        """The consumer group of the stream beside, if any (ticks go to every process)."""
        return getattr(self.beside, "group", None)

    @property
    def buffered(self) -> int:
        return self._ready

    def resolving(self) -> contextlib.AbstractContextManager[None]:
        resolving = getattr(self.beside, "resolving", None)
        return contextlib.nullcontext() if resolving is None else resolving()

    def key(self, schedule: Schedule | str) -> str:
        """The server hash of ``schedule`` (:mod:`lockworker.protocol.schedules`)."""
        if self.namespace is None:
            raise InvalidConfig("a ScheduleSource is served by a Worker (serve attaches it)")
        name = schedule if isinstance(schedule, str) else schedule.name
        return schedule_key(self.namespace, name)

    def deliveries(self, stop: threading.Event) -> Iterator[Delivery]:
        """The schedules' ticks as they fall due (and the source beside's jobs), until
        ``stop`` is set."""
        started = self._call(lambda: server_now(self.client), "read the server's time")
        plans = [_Plan(s, self.key(s), started) for s in self.schedules]
        for plan in plans:  # for ``lockworker status``: what the ticks are
            shown = json.dumps(definition(plan.schedule), sort_keys=True)
            self._call(
                lambda p=plan, d=shown: self.client.hset(p.key, "definition", d),  # type: ignore[misc]
                "record schedule",
            )
        namespace = self.namespace or ""  # key() above refused a source never attached
        self._registration(*(names.schedule(namespace, s.name) for s in self.schedules))
        others: queue.Queue[Any] | None = None
        ended = threading.Event()  # the source beside stops with this pass
        if self.beside is not None:
            others = queue.Queue(maxsize=1)
            threading.Thread(
                target=self._pump, args=(others, ended), daemon=True,
                name="lockworker-schedule-beside",
            ).start()
        try:
            while not stop.is_set():
                now = self._call(lambda: server_now(self.client), "read the server's time")
                ready: list[Delivery] = []
                wait = POLL
                for plan in plans:
                    wait = min(wait, self._plan(plan, now, ready))
                self._ready = len(ready)
                for delivery in ready:
                    if stop.is_set():
                        return
                    self._ready -= 1
                    yield delivery
                yield from self._meanwhile(stop, max(0.0, wait), others)
        finally:
            ended.set()

    def _meanwhile(
        self, stop: threading.Event, wait: float, others: queue.Queue[Any] | None
    ) -> Iterator[Delivery]:
        """Until the next look at the schedules (``wait`` seconds, or a tick resolved
        here, or ``stop``): the deliveries of the source beside, if any."""
        deadline = self.clock.monotonic() + wait
        while not stop.is_set() and not self._wake.is_set():
            left = deadline - self.clock.monotonic()
            if left <= 0:
                break
            if others is None:
                self._wake.wait(min(left, SLICE))
                continue
            try:
                item = others.get(timeout=min(left, SLICE))
            except queue.Empty:
                continue
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, Delivery):
                yield item
        self._wake.clear()

    def _plan(self, plan: _Plan, now: float, ready: list[Delivery]) -> float:
        """Deliver what of ``plan``'s schedule is due at ``now`` (server seconds) into
        ``ready``; the seconds until it should be looked at again."""
        fields = {
            text(k): text(v)
            for k, v in self._call(lambda: self.client.hgetall(plan.key), "read schedule").items()
        }
        resolved = int(fields.get("resolved", -1))
        last = int(fields["last"]) if "last" in fields else None
        runs = sorted(int(f[2:]) for f in fields if f.startswith("r:"))
        schedule = plan.schedule
        self._progress(plan, fields.get("last_ran"), now)
        with self._lock:
            plan.settled = {t for t in plan.settled if t > resolved}
            for tick in runs:  # started ticks: every process follows them
                if tick not in plan.inflight and tick not in plan.settled:
                    ready.append(self._deliver(plan, tick))
                    if tick in plan.waiting:  # it waited: it starts now
                        self._admitted(plan, tick, now, decided=True, waited=True)
            plan.waiting = {t for t in plan.waiting if t > resolved and t not in runs}
        base = plan.started if last is None else float(last)
        if schedule.catch_up == "none":
            base = max(base, plan.started)
        most = MAX_CATCH_UP + 1 if schedule.catch_up == "all" else 1
        due = schedule.recent(base, now, most)
        # A backlog of missed ticks, or the end of one: the last missed tick is due
        # alone once the one before was admitted, and must wait for that one to end
        # rather than be skipped behind it (the hash's ``catching`` remembers how far
        # the missed ticks went, for every process).
        backlog = len(due) > 1 or (
            schedule.catch_up == "all" and bool(due)
            and due[0] <= int(fields.get("catching", -1))
        )
        if backlog and (runs or plan.inflight):  # one tick at a time, in order
            return POLL
        for tick in due[:1]:
            wait = tick + schedule.delay(tick) - now
            if wait > 0:
                return wait  # jitter: not due yet
            # The ticks between the latest decided one and this one are left out for
            # good once it is decided: counted then, by the process that decides it.
            dropped = 0 if last is None else schedule.count_between(last, tick)
            args = [tick, schedule.overlap, int(backlog), due[-1], dropped,
                    "" if last is None else last]
            reply = self._call(
                lambda a=args: ADMIT(self.client, [plan.key], a),  # type: ignore[misc]
                "admit a tick of schedule",
            )
            verdict, decided = text(reply[0]), int(reply[1]) == 1
            if len(reply) > 2 and int(reply[2]) > 0:
                self._log.info(
                    DROPPED, schedule=schedule.name, tick=schedule.tick_id(tick),
                    dropped=int(reply[2]), decided=True,
                )
            if verdict == "run":
                with self._lock:
                    if tick not in plan.inflight and tick not in plan.settled:
                        ready.append(self._deliver(plan, tick))
                self._admitted(plan, tick, now, decided=decided, caught_up=backlog)
            elif verdict in ("skip", "wait"):
                if verdict == "wait" and decided:
                    plan.waiting.add(tick)
                self._log.info(
                    SKIPPED if verdict == "skip" else WAITING, schedule=schedule.name,
                    tick=schedule.tick_id(tick), decided=decided,
                )
            base = max(base, tick)
        upcoming = schedule.next_after(max(now, base))
        return upcoming + schedule.delay(upcoming) - now

    def _admitted(self, plan: _Plan, tick: int, now: float, **fields: Any) -> None:
        self._log.info(
            ADMITTED, schedule=plan.schedule.name, tick=plan.schedule.tick_id(tick),
            late_ms=max(0, round((now - tick) * 1000)), **fields,
        )

    def _progress(self, plan: _Plan, raw: str | None, now: float) -> None:
        """Report the latest resolved tick when it changed (for the metrics' gauges)."""
        last_ran = int(raw) if raw is not None and raw.isdigit() else None
        if last_ran == plan.last_ran:
            return
        plan.last_ran = last_ran
        self._log.debug(
            PROGRESS, schedule=plan.schedule.name, last_ran=last_ran,
            since=round(plan.started, 3), period_s=period(plan.schedule, now),
        )

    def _deliver(self, plan: _Plan, tick: int) -> Delivery:
        plan.inflight.add(tick)
        schedule = plan.schedule
        return Delivery(
            schedule.tick_id(tick), schedule.tick_payload(tick),
            lambda: self._resolved(plan, tick),
        )

    def _resolved(self, plan: _Plan, tick: int) -> None:
        """The tick's job is resolved here: settle it on the server, then look again
        (the next tick of a backlog, a waiting tick promoted)."""
        try:
            if self._call(
                lambda: RESOLVE(self.client, [plan.key], [tick]), "settle a tick of schedule"
            ) == 1:
                self._log.info(
                    RAN, schedule=plan.schedule.name, tick=plan.schedule.tick_id(tick),
                    tick_at=tick,
                )
            settled = True
        except (redis.RedisError, LockworkerError) as exc:  # delivered again, then settled
            self._log.warning(
                RESOLVE_FAILED, tick=plan.schedule.tick_id(tick), error=events.describe(exc)
            )
            settled = False
        with self._lock:
            plan.inflight.discard(tick)
            if settled:
                plan.settled.add(tick)
        self._wake.set()

    def _pump(self, into: queue.Queue[Any], stop: threading.Event) -> None:
        """The thread reading the source beside: one delivery ahead of ``serve`` at
        most. An error it raises ends the serving; its end does not (ticks go on)."""
        try:
            for delivery in self.beside.deliveries(stop):
                while not stop.is_set():
                    try:
                        into.put(delivery, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:
            while not stop.is_set():
                try:
                    into.put(exc, timeout=0.1)
                    return
                except queue.Full:
                    continue
