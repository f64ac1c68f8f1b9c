"""The failover worker: every process sees the job, exactly one does it at a time.

:meth:`Worker.process` is a loop over three moves: try to take the next attempt
(``protocol.acquire``); if granted, run ``on_acquired`` under a renewed lease and settle
the attempt (complete, fail, release); if not, wait for the holder to finish, fail or
die (a wake message, or the end of its lease by this process's own timer) and look
again. The decisions live in :mod:`lockworker.model.policy`, the Redis steps in
:mod:`lockworker.protocol`, the lease in :mod:`lockworker.runtime.lease`; this module wires them
to hooks, logs and signals.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from lockworker import config
from lockworker.clock import Clock, SystemClock
from lockworker.config import RetryDelay
from lockworker.daemons import deadletter
from lockworker.daemons.jobrun import SERVING, JobRun
from lockworker.daemons.serve import serve
from lockworker.model.codec import payload_view
from lockworker.model.keys import JobKeys
from lockworker.model.state import Durability, Outcome, ProtocolKind, Reset, Role, Snapshot
from lockworker.protocol import LockProtocol
from lockworker.runtime import events, retry, servercheck
from lockworker.runtime.batcher import renewals
from lockworker.runtime.lease import Heartbeat
from lockworker.runtime.presence import Presence
from lockworker.runtime.signals import stop_on_signals
from lockworker.runtime.wake import Waits
from lockworker.serving.job import Job
from lockworker.serving.settings import (
    DAY,
    DONE_RETENTION,
    RUNS_JOBS,
    WorkerSettings,
    make_protocol,
)

T = TypeVar("T")

class Worker(WorkerSettings):
    """Runs jobs so that one process at a time does each, and a backup takes over.

    Subclass it and override ``on_acquired`` (and any other hook, see
    :mod:`lockworker.serving.hooks`), or pass the hooks as functions (without
    ``on_acquired``, a worker may only inspect and reset jobs: an operator's script).
    One ``Worker`` may serve many jobs, from many threads or tasks: concurrent calls for
    one job id run its hook once, the others answer as another process's worker would.

    :param client: a ``redis.Redis`` client (give it a ``socket_timeout`` shorter than
        ``lock_timeout``, so a hung connection cannot outlast a lease).
    :param namespace: groups the keys of this worker's jobs; workers that should share
        jobs use the same namespace.
    :param lock_timeout: the lease in seconds; renewed every third of it while
        ``on_acquired`` runs, so it bounds the takeover time after a crash, not the job.
    :param max_attempts: attempts (by any process) before the job is given up.
    :param owner: this process's id in Redis and logs; default ``host:pid:random``.
    :param retention: seconds that a given-up job (a dead letter) and a pending job's
        attempt count are kept.
    :param done_retention: seconds that a DONE job's record is kept (default one hour):
        a duplicate of the id within it is recognised (``DONE_ELSEWHERE``); after it,
        the id runs again, with a larger token (docs/guarantees.md).
    :param retry_delay: the job's retry schedule: when its next attempt may start after
        a failure, in any process (the fail step records it on the server). Seconds, a
        tenacity wait strategy, or a function of the failed attempt's number returning
        seconds; default :data:`lockworker.config.DEFAULT_RETRY_DELAY` (the first
        failure handed over at once, then 2, 4, 8 ... 60 s). ``on_acquired`` may raise
        :class:`~lockworker.Retry` to set one failure's delay (docs/daemons.md).
    :param give_up_on: exception types that give the job up at once when
        ``on_acquired`` raises them (as :class:`~lockworker.GiveUp` does).
    :param clock: time source (tests pass :class:`lockworker.testing.FakeClock`).
    :param protocol: ``"script"`` (default) or ``"txn"`` (WATCH/MULTI/EXEC).
    :param durability: ``"local"`` (default): a step counts once the master applied it.
        ``"replicated"``: once ``replicas`` replicas acknowledged it too (``WAIT``, at
        most ``replica_timeout`` seconds per try; retried within ``redis_retry``), so
        an acknowledged DONE or token survives the failover of the master to one of
        them (docs/topologies.md; script protocol only).
    :param redis_retry: retry policy for connection errors.
    :param handle_signals: stop on SIGTERM/SIGINT (a second signal acts as before), from
        the first ``process`` call in the main thread until :meth:`close`.
    :param role: ``"primary"`` competes for a free job at once; ``"backup"`` lets a
        free job lie for ``backup_delay`` seconds first while a primary of its
        namespace serves, so the live primary does the jobs, and competes at once when
        none does (every worker registers in its namespace from its first
        ``process``/``serve`` until :meth:`stop`/:meth:`close`; docs/daemons.md).
    :param backup_delay: seconds a backup waits before competing while a primary
        serves (ignored for a primary).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        namespace: str,
        lock_timeout: float = 10.0,
        max_attempts: int = 5,
        owner: str | None = None,
        retention: float = DAY,
        done_retention: float = DONE_RETENTION,
        retry_delay: RetryDelay = None,
        give_up_on: type[BaseException] | tuple[type[BaseException], ...] = (),
        clock: Clock | None = None,
        logger: Any = None,
        protocol: ProtocolKind | str | LockProtocol = ProtocolKind.SCRIPT,
        durability: Durability | str = Durability.LOCAL,
        replicas: int = 1,
        replica_timeout: float = 0.5,
        redis_retry: retry.RetryPolicy | None = None,
        handle_signals: bool = True,
        role: Role | str = Role.PRIMARY,
        backup_delay: float = 0.5,
        on_acquired: Callable[[Job], None] | None = None,
        on_locked: Callable[[Job], None] | None = None,
        on_failed: Callable[[Job, BaseException], None] | None = None,
        on_lost: Callable[[Job], None] | None = None,
        on_gave_up: Callable[[Job], None] | None = None,
    ) -> None:
        config.client(client, twin="Worker")
        self._configure(
            Worker, namespace=namespace, lock_timeout=lock_timeout,
            max_attempts=max_attempts, owner=owner, retention=retention,
            done_retention=done_retention,
            retry_delay=retry_delay, give_up_on=give_up_on, clock=clock, logger=logger,
            redis_retry=redis_retry,
            handle_signals=handle_signals, role=role, backup_delay=backup_delay,
            hooks={
                "on_acquired": on_acquired, "on_locked": on_locked, "on_failed": on_failed,
                "on_lost": on_lost, "on_gave_up": on_gave_up,
            },
        )
        self.client = client
        self.protocol = make_protocol(client, protocol, durability, replicas, replica_timeout)
        self.durability = Durability(durability)
        self._call = retry.Caller(self.clock, self.redis_retry, self._log)
        self._stop = threading.Event()
        self._heartbeat = Heartbeat(self.clock, self.lock_timeout / 3, send_many=renewals(self))
        self._hub = Waits(client)
        self._signals: contextlib.ExitStack | None = None
        self._permitted = False
        self._presence = Presence(
            client, self.namespace, self._member, view=self._view, log=self._log,
            on_gone=self._hub.wake_all, rates=self._rates,
        )
        # A worker dropped without close() leaves: its thread holds no reference to it.
        weakref.finalize(self, self._presence.stop)

    # -- hooks (override in a subclass, or pass as functions) ------------------------

    def on_acquired(self, job: Job) -> None:
        """Do the work. Return: DONE. Raise: this attempt failed. Required."""
        self._hooks.given("on_acquired", job)

    def on_locked(self, job: Job) -> None:
        """Another process holds the job (``job.holder``, ``job.attempt``)."""
        self._hooks.given("on_locked", job)

    def on_failed(self, job: Job, exc: BaseException) -> None:
        """This process's attempt raised ``exc``."""
        self._hooks.given("on_failed", job, exc)

    def on_lost(self, job: Job) -> None:
        """This process can no longer be sure it holds the lease (see hooks contract)."""
        self._hooks.given("on_lost", job)

    def on_gave_up(self, job: Job) -> None:
        """``max_attempts`` attempts were used up; nobody will run the job again."""
        self._hooks.given("on_gave_up", job)

    # -- public API ------------------------------------------------------------------

    def process(self, job_id: str, payload: Any = None) -> Outcome:
        """Block until ``job_id`` is resolved for this process; see :class:`Outcome`.

        Raises :class:`~lockworker.RedisUnavailable` if Redis stays unreachable past the
        retry budget (the job then stays pending, and is recoverable), and
        :class:`~lockworker.ForeignValueError` if the job's keys hold foreign values.

        :meth:`serve` (and so ``lockworker run``) runs every job through this method: a
        subclass may override it (tracing, metrics, a check of the payload) and call
        ``super().process(job_id, payload)``; its result decides whether a stream's
        delivery counts as resolved, and an :class:`~lockworker.InvalidConfig` it
        raises skips the delivery, logged (see :mod:`lockworker.daemons.serve`).
        """
        self._hooks.require(RUNS_JOBS)
        keys = JobKeys.of(self.namespace, job_id)
        if not SERVING.decoded(self, payload):  # a stream's payload is one already
            payload = payload_view(payload)  # what any other process would see
        log = self._log.bind(job_id=job_id)
        self._check_permissions(keys)
        self._install_signal_handlers()
        self._view.begin(self.clock.monotonic())  # a backup's start-up grace (once)
        self._presence.start()  # registered before its first job (once per worker)
        with SERVING.borrow(self) as gate:  # serve's slots, when serve called
            return JobRun(self, keys, payload, log, gate).run()

    _OWN_PROCESS = process  # unless overridden, serve may skip it (daemons.looked)

    def serve(self, source: Any, *, concurrency: int = 4) -> None:
        """Process jobs from ``source`` until it is exhausted or the worker is stopped.

        ``source``: any iterable of ``(job_id, payload)``, or a
        :class:`lockworker.StreamSource`. At most ``concurrency`` jobs run at once, each
        through :meth:`process` (a subclass's override of it included, whose result
        is the job's); see :mod:`lockworker.daemons.serve`.

        First checks what :meth:`process` checks on first use (the Redis user's
        permissions), and the server's eviction and persistence settings
        (``server.check`` events, again every few minutes while serving:
        :mod:`lockworker.runtime.servercheck`).
        """
        self._hooks.require(RUNS_JOBS)
        self._check_permissions(JobKeys.of(self.namespace, "-"))
        self._view.begin(self.clock.monotonic())
        self._presence.start()
        stop_watch = servercheck.watching(self.client, self._log, SystemClock())
        try:
            serve(self, source, concurrency=concurrency)
        finally:
            stop_watch()

    def stop(self) -> None:
        """Ask every ``process`` call of this worker to end (STOPPED) at its next safe point.

        A running ``on_acquired`` is not interrupted: it sees ``job.stopping`` and
        ``job.check()`` raises :class:`~lockworker.StopRequested`. Thread- and
        signal-safe; permanent for this worker object.
        """
        self._stop.set()
        self._presence.stop()
        self._hub.wake_all()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def inspect(self, job_id: str) -> Snapshot:
        """What Redis says about ``job_id`` now (status, attempt, token, holder, lease),
        with its attempts (``history``)."""
        keys = JobKeys.of(self.namespace, job_id)
        return self._call(lambda: self.protocol.inspect(keys, history=True), "inspect job")

    def reset(self, job_id: str, *, force: bool = False) -> bool:
        """Make a known job (DONE, GAVE_UP or pending) pending again, attempts cleared,
        and re-drive it: a stream's job that gave up is added to its stream again
        (:mod:`lockworker.daemons.redrive`; ``job.reset`` events say what was done).

        Refused (False) while a process holds the job, unless ``force``. Raises
        :class:`~lockworker.JobNotFound` if the server knows no such job (nothing is
        written), and :class:`~lockworker.ForeignValueError` if its keys hold values
        lockworker did not write, unless ``force`` (which replaces them). Fencing tokens
        keep growing across a reset."""
        return deadletter.reset_one(self, job_id, force=force)

    def reset_all(self, state: str = "gave_up", *, force: bool = False) -> dict[str, Reset]:
        """:meth:`reset` every job of the namespace in ``state`` (pending, held, done,
        gave_up), each only if still in it, and re-driven as :meth:`reset` re-drives
        one; results by job id (:mod:`.deadletter`)."""
        return deadletter.reset_all(self, config.job_state(state), force=force)

    def close(self) -> None:
        """Stop the background threads; the registration goes (backups know at once)."""
        self._presence.close()
        self._heartbeat.close()
        self._hub.close()
        signals, self._signals = self._signals, None
        if signals is not None:
            signals.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        """Stop on SIGTERM/SIGINT from the first ``process`` call until :meth:`close`:
        installed once, not per call, so a signal between two jobs still stops it."""
        if self.handle_signals and self._signals is None:
            stack = contextlib.ExitStack()
            if stack.enter_context(stop_on_signals(lambda _signum: self.stop())):
                self._signals = stack

    def _check_permissions(self, keys: JobKeys) -> None:
        """Once per worker: :class:`~lockworker.PermissionDenied` naming what to grant if
        the Redis user may not run the steps on this namespace, before any handler runs
        (a step refused after a handler's side effects would report work as failed)."""
        if not self._permitted:
            self._permitted = servercheck.require_permissions(self.client, keys)

    def _hook(self, log: events.EventLog, name: str, *args: Any) -> None:
        """Run a hook other than on_acquired; its exceptions are logged, not raised."""
        self._hooks.guarded(log, name, *args)
