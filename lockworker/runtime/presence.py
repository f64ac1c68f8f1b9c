"""A worker's presence in its namespace, kept by a thread of its own.

What is stored and what a backup makes of it: :mod:`lockworker.model.presence`; the
steps: :mod:`lockworker.protocol.presence`. Here the I/O and its schedule, for a
:class:`~lockworker.Worker` (the asyncio twin is :mod:`lockworker.aio.presence`):

- :meth:`Presence.start` (the worker's first ``process`` or ``serve``) registers in one
  round trip, so a primary is registered before it takes its first job, then starts
  the thread. It costs nothing per job. Before, it adds the namespace to the registry
  and, if the namespace is not marked indexed, logs :data:`NOT_INDEXED` (two commands,
  once per worker).
- The thread refreshes the registration every third of its time to live; a backup's
  also listens on the namespace's presence channel (through the process's wake hub)
  and re-reads when a worker joins or leaves, and when the registration of the last
  primary (or backup ranked before it) it saw ends. When a reading shows that no
  primary serves any more, or no backup ranked before it while none does, the worker's
  waiting jobs and held-back deliveries are woken to look again (``on_gone``).
- A backup whose reading shows that no primary serves records since when it serves
  as one (and forgets it when a primary serves again): one more round trip at each
  such change, for ``lockworker status`` and the dashboard to show.
- The thread also sends the worker's per-minute counts of what it did
  (:mod:`lockworker.runtime.rates`): after every refresh, and at least every
  :data:`~lockworker.runtime.rates.FLUSH_EVERY` seconds, one script when there is
  anything to send, nothing otherwise; so a job pays no server call for them.
- :meth:`Presence.stop` (the worker's ``stop``, SIGTERM) is safe in a signal handler:
  the thread sends the last counts, removes the registration (the removal is
  published) and ends. :meth:`Presence.close` waits for that, then sends what was
  counted since (jobs that ended after the stop).

A refresh that fails is logged and tried again soon; meanwhile the registration runs
out by itself, as after a crash, which only makes backups compete at once.
"""

from __future__ import annotations

import contextlib
import shlex
import threading
from collections.abc import Callable, Iterator

import redis

from lockworker.clock import Clock, SystemClock
from lockworker.errors import ForeignValueError, LockworkerError
from lockworker.model import presence
from lockworker.model import registry as names
from lockworker.model.presence import Member, View
from lockworker.protocol import presence as steps
from lockworker.protocol import registry
from lockworker.runtime import events, reindex
from lockworker.runtime import rates as counting
from lockworker.runtime.rates import Rates
from lockworker.runtime.wake import hub_for

REFRESH_FAILED = "presence.refresh_failed"
PRIMARY_GONE = "presence.primary_gone"
PRIMARY_SERVING = "presence.primary_serving"
NOT_INDEXED = "index.missing"
"""At a worker's start, its namespace is not marked indexed (:mod:`lockworker.model.
registry`): jobs written before the index existed are not listed until ``command``
runs (INFO, once per worker)."""
INDEXED = "index.built"
"""A worker alone in a namespace not marked indexed indexed its older jobs itself
(:mod:`lockworker.runtime.reindex`), and marked it: ``jobs`` were indexed."""
RATES_FAILED = "presence.rates_failed"
FAILURES = (redis.RedisError, OSError, LockworkerError)


class PresenceBase:
    """What the thread and the asyncio task share: the member, the view, the log."""

    def __init__(
        self, namespace: str, member: Member, *, view: View, log: events.EventLog,
        on_gone: Callable[[], None], rates: Rates | None = None,
    ) -> None:
        self.namespace = namespace
        self.keys = presence.presence_keys(namespace)
        self.member = member
        self.view = view
        self.clock: Clock = SystemClock()
        """Real time, whatever the worker's clock: the view says only whether a reading
        showed a primary, so no time of it is compared with the worker's clock, and a
        test's fake clock is never moved by this loop."""
        self.log = log
        self.on_gone = on_gone
        self.started = False
        self.stopped = False
        self.failing = False
        self.acting = False
        """Whether the server has this backup's record of serving as a primary."""
        self.alone = False
        """Whether the last reading showed no worker registered but this one."""
        self.rates = rates if rates is not None else Rates()
        """The worker's counts of what it did, sent by this loop."""
        self.flush_due = 0.0
        """When (on :attr:`clock`) the counts are sent next at the latest."""
        self.flush_failing = False

    def acting_change(self) -> bool | None:
        """For a backup: True if it serves as a primary since the last reading (no
        primary registered) and has not recorded it yet, False if it recorded it and a
        primary serves again; None if nothing is to be written."""
        now = self.view.watch and not self.view.primary_serving()
        return None if now == self.acting else now

    def refreshed(self, found: list[presence.Registered], sent_at: float) -> None:
        """Apply a reading sent at ``sent_at``; wake the waiting jobs if no primary
        serves any more."""
        if self.failing:
            self.failing = False
        self.alone = all(r.member.run == self.member.run for r in found)
        none_before = not self.view.primary_serving()
        wake = self.view.read(found, sent_at)
        if not none_before and not self.view.primary_serving():
            self.log.info(PRIMARY_GONE)
        elif none_before and self.view.watch and self.view.primary_serving():
            self.log.info(PRIMARY_SERVING)  # a backup defers (again) from now on
        if wake:
            self.on_gone()

    def not_indexed(self, error: str | None = None) -> None:
        """Say, once, that the namespace's older jobs are not indexed, and the fix."""
        self.log.info(NOT_INDEXED, command="lockworker index --namespace "
                      + shlex.quote(self.keys.job_id),
                      **({} if error is None else {"error": error}))

    def indexed(self, jobs: int) -> None:
        self.log.info(INDEXED, jobs=jobs)

    def wait_left(self, now: float) -> float:
        """Seconds until the next refresh or flush of the counts, whichever is first."""
        return min(self.view.next_read(), self.flush_due) - now

    def flushed(self, exc: BaseException | None) -> None:
        """After a flush of the counts: the next is due in :data:`~lockworker.runtime.
        rates.FLUSH_EVERY` (read now, not at import); the first failure of a streak is
        logged (the counts wait for the next)."""
        self.flush_due = self.clock.monotonic() + counting.FLUSH_EVERY
        if exc is None:
            self.flush_failing = False
        elif not self.flush_failing:
            self.flush_failing = True
            self.log.warning(RATES_FAILED, error=repr(exc))

    def refresh_failed(self, exc: BaseException, sent_at: float) -> None:
        """Log the first failure of a streak; try again soon."""
        self.view.failed(sent_at)
        if not self.failing:
            self.failing = True
            self.log.warning(REFRESH_FAILED, error=repr(exc))


class Presence(PresenceBase):
    """One worker's registration, refreshed by a daemon thread (see the module)."""

    def __init__(
        self, client: redis.Redis, namespace: str, member: Member, *, view: View,
        log: events.EventLog, on_gone: Callable[[], None], rates: Rates | None = None,
    ) -> None:
        super().__init__(namespace, member, view=view, log=log, on_gone=on_gone, rates=rates)
        self.client = client
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Register (the first call only) and start the thread; no-op once stopped."""
        if self.started:
            return
        with self._lock:
            if self.started or self.stopped:
                return
            unmarked = False
            with contextlib.suppress(*FAILURES):  # the views' list; a later start adds it
                registry.register(self.client, names.namespace(self.keys.job_id))
                unmarked = not registry.is_indexed(self.client, self.keys.job_id)
            self.refresh(presence.JOINED)
            if unmarked and self.alone:
                threading.Thread(
                    target=self._index, name="lockworker-index", daemon=True
                ).start()
            elif unmarked:
                self.not_indexed()
            self._thread = threading.Thread(
                target=self._run, name="lockworker-presence", daemon=True
            )
            self._thread.start()
            self.started = True

    def _index(self) -> None:
        """Index the namespace's older jobs and mark it (:mod:`lockworker.runtime.
        reindex`): the first worker of a namespace, alone in it."""
        namespace = self.keys.job_id
        try:
            tallies = reindex.index_all(self.client, namespace, reindex.RETENTION_MS)
        except (*FAILURES, ForeignValueError) as exc:
            self.not_indexed(repr(exc))
            return
        self.indexed(sum(t.jobs for t in tallies.values()))

    def stop(self) -> None:
        """Leave: the thread removes the registration and ends. No I/O here (safe in a
        signal handler)."""
        self.stopped = True
        self._wake.set()

    def close(self) -> None:
        """:meth:`stop`, wait until the registration was removed, and send the counts
        left (the jobs that ended after the thread's last flush); not if the thread is
        still stuck on an unresponsive server, which the send would wait for too."""
        self.stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
            if thread.is_alive():
                return
        self.flush()

    def flush(self) -> None:
        """Send the worker's counts, if any (one script); kept for the next on failure."""
        try:
            counting.flush(self.client, self.namespace, self.rates)
        except FAILURES as exc:
            self.flushed(exc)
            return
        self.flushed(None)

    def refresh(self, message: str = "") -> None:
        sent_at = self.clock.monotonic()
        try:
            found = steps.touch(
                self.client, self.keys, self.member, message
            )
        except FAILURES as exc:
            self.refresh_failed(exc, sent_at)
            return
        self.refreshed(found, sent_at)
        change = self.acting_change()
        if change is not None:  # tried again at the next reading if it fails
            with contextlib.suppress(*FAILURES):
                steps.act(self.client, self.keys, self.member, change)
                self.acting = change

    def _run(self) -> None:
        with self._listening() as message:
            while not self.stopped:
                now = self.clock.monotonic()
                left = self.wait_left(now)
                if not message.is_set() and left > 0:
                    self.clock.wait(message, left)
                    continue  # a stop, a message, or the time: decide again
                if message.is_set() or self.view.next_read() <= now:
                    message.clear()
                    if not self.stopped:
                        self.refresh()
                self.flush()
        self.flush()
        with contextlib.suppress(*FAILURES):
            steps.leave(
                self.client, self.keys, self.member,
                presence.LEFT,
            )

    @contextlib.contextmanager
    def _listening(self) -> Iterator[threading.Event]:
        """The event the thread waits on: set by :meth:`stop`, and for a backup by a
        message on the presence channel."""
        if not self.view.watch:
            yield self._wake
            return
        with hub_for(self.client).listen(self.client, self.keys.wake) as message:
            self._wake = message
            message.set()  # read once listening: a primary may have joined meanwhile
            yield message
