"""``lockworker.aio.Worker``: the failover worker on ``redis.asyncio``, hooks awaited.

The same settings (checked by the same validators), keys, values, Lua steps, contest
loop, decisions, outcomes, events and guarantees as :class:`lockworker.Worker`; a job
can be contended by sync and async workers at once. What differs is the I/O: every
Redis step, hook and wait is awaited (a plain, non-async hook in a worker thread, so it
never blocks the loop), the heartbeat is one task per lease, and the wake-ups come from
one reader task per event loop and connection pool.

Stopping: :meth:`Worker.stop` (thread- and signal-safe) ends every ``process`` at its
next safe point, as in a thread. Cancelling the task of a ``process`` call whose hook
is running releases the lease at once (the attempt is refunded and the waiters are
woken); the lease is never left to run out.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from lockworker import config
from lockworker.aio.batcher import batcher_for
from lockworker.aio.jobrun import SERVING, AsyncJobRun
from lockworker.aio.lease import AsyncHeartbeat, Background
from lockworker.aio.permissions import require_permissions
from lockworker.aio.presence import AsyncPresence
from lockworker.aio.protocol import AsyncScriptProtocol
from lockworker.aio.redrive import acandidates, reset_job_async
from lockworker.aio.serve import serve
from lockworker.aio.wake import AsyncWaits
from lockworker.clock import Clock
from lockworker.config import RetryDelay
from lockworker.errors import InvalidConfig, JobNotFound
from lockworker.model.codec import payload_view
from lockworker.model.keys import JobKeys
from lockworker.model.state import Durability, Outcome, ProtocolKind, Reset, Role, Snapshot
from lockworker.protocol.luacall import ready
from lockworker.runtime import events, retry
from lockworker.runtime.signals import stop_on_signals
from lockworker.serving.job import Job
from lockworker.serving.redrive import reported
from lockworker.serving.settings import DAY, DONE_RETENTION, RUNS_JOBS, WorkerSettings

T = TypeVar("T")

AsyncHook = Callable[..., Awaitable[None] | None]


def check_async_client(client: object, twin: str = "Worker") -> Any:
    """Refuse anything but a ``redis.asyncio`` client, before any call."""
    return config.client(client, asyncio=True, twin=twin)


def check_local_script(protocol: object, durability: object, twin: str = "Worker") -> None:
    """The asyncio side speaks the script protocol with local durability; say so, and
    what to use instead."""
    if protocol != ProtocolKind.SCRIPT:
        raise InvalidConfig(
            f"lockworker.aio supports protocol='script' only (for 'txn' use "
            f"lockworker.{twin}), got protocol={protocol!r}"
        )
    if durability != Durability.LOCAL:
        raise InvalidConfig(
            "lockworker.aio supports durability='local' only (for 'replicated' use "
            f"lockworker.{twin}), got durability={durability!r}"
        )


class Worker(WorkerSettings):
    """Runs jobs so that one process (or task) at a time does each; see the module
    docstring and :class:`lockworker.Worker` for every argument. Hooks may be
    ``async def`` (awaited on the loop) or plain functions (run in a worker thread, as
    ``asyncio.to_thread`` would), passed or overridden."""

    def __init__(
        self,
        client: Any,
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
        protocol: ProtocolKind | str = ProtocolKind.SCRIPT,
        durability: Durability | str = Durability.LOCAL,
        replicas: int = 1,
        replica_timeout: float = 0.5,
        redis_retry: retry.RetryPolicy | None = None,
        handle_signals: bool = True,
        role: Role | str = Role.PRIMARY,
        backup_delay: float = 0.5,
        on_acquired: AsyncHook | None = None,
        on_locked: AsyncHook | None = None,
        on_failed: AsyncHook | None = None,
        on_lost: AsyncHook | None = None,
        on_gave_up: AsyncHook | None = None,
    ) -> None:
        self.client = check_async_client(client)
        check_local_script(protocol, durability)
        # ``replicas``/``replica_timeout`` mean something only with replicated
        # durability, which is refused above; kept so both sides take one signature.
        del replicas, replica_timeout
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
        self.durability = Durability.LOCAL
        self.protocol = AsyncScriptProtocol(client, batcher_for(client))
        self._call = retry.AsyncCaller(self.clock, self.redis_retry, self._log)
        self._stop = threading.Event()
        self._permitted = False
        self._source_stops: set[threading.Event] = set()
        """Set with ``_stop``: the flags of the sync sources being served (each also set
        when its ``serve`` ends, so a cancelled one leaves no reader thread behind)."""
        self._heartbeat = AsyncHeartbeat(self.clock, self.lock_timeout / 3)
        self._hub = AsyncWaits(client)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_events: set[asyncio.Event] = set()
        """Set by :meth:`stop` in the loop: what a wait that is not on Redis (``serve``
        awaiting its source's next item) races against."""
        self._background = Background()
        self._signals: contextlib.ExitStack | None = None
        self._presence = AsyncPresence(
            client, self.namespace, self._member, view=self._view, log=self._log,
            on_gone=self._hub.wake_all, rates=self._rates,
        )

    # -- hooks (override with async def or def, or pass as functions) ----------------

    async def on_acquired(self, job: Job) -> None:
        """Do the work. Return: DONE. Raise: this attempt failed. Required."""
        await self._hooks.given_async("on_acquired", job)

    async def on_locked(self, job: Job) -> None:
        """Another process holds the job (``job.holder``, ``job.attempt``)."""
        await self._hooks.given_async("on_locked", job)

    async def on_failed(self, job: Job, exc: BaseException) -> None:
        """This process's attempt raised ``exc``."""
        await self._hooks.given_async("on_failed", job, exc)

    async def on_lost(self, job: Job) -> None:
        """This process can no longer be sure it holds the lease."""
        await self._hooks.given_async("on_lost", job)

    async def on_gave_up(self, job: Job) -> None:
        """``max_attempts`` attempts were used up; nobody will run the job again."""
        await self._hooks.given_async("on_gave_up", job)

    # -- public API ------------------------------------------------------------------

    async def process(self, job_id: str, payload: Any = None) -> Outcome:
        """Until ``job_id`` is resolved for this process; see :class:`~lockworker.Outcome`
        and :meth:`lockworker.Worker.process`. :meth:`serve` runs every job through
        this method, so a subclass may override it (``async def``) and await
        ``super().process(job_id, payload)``; its result is the job's."""
        self._hooks.require(RUNS_JOBS)
        keys = JobKeys.of(self.namespace, job_id)
        if not SERVING.decoded(self, payload):  # a stream's payload is one already
            payload = payload_view(payload)
        log = self._log.bind(job_id=job_id)
        self._started()
        await ready(self.client)
        await self._check_permissions(keys)
        self._view.begin(self.clock.monotonic())  # a backup's start-up grace (once)
        await self._presence.start()  # registered before its first job (once per worker)
        with SERVING.borrow(self) as gate:  # the serving's slots, when it called
            return await AsyncJobRun(self, keys, payload, log, gate).run()

    _OWN_PROCESS = process  # kept by a subclass: serve may settle a job done elsewhere
    # without calling it (lockworker.serving.looked); an override sees every job

    async def serve(self, source: Any, *, concurrency: int = 4) -> None:
        """Process jobs from ``source`` (an iterable or async iterable of
        ``(job_id, payload)``, or a :class:`lockworker.StreamSource`) until it is
        exhausted or the worker is stopped, each job as :meth:`process` serves it (a
        subclass's override of it sees every job); see :mod:`lockworker.aio.serve`. First
        checks what :meth:`process` checks on first use (the Redis user's permissions)."""
        self._hooks.require(RUNS_JOBS)
        self._started()
        await ready(self.client)
        await self._check_permissions(JobKeys.of(self.namespace, "-"))
        self._view.begin(self.clock.monotonic())
        await self._presence.start()
        await serve(self, source, concurrency=concurrency)

    async def _check_permissions(self, keys: JobKeys) -> None:
        """Once per worker: :class:`~lockworker.PermissionDenied` naming what to grant if
        the Redis user may not run the steps on this namespace, before any handler runs."""
        if not self._permitted:
            self._permitted = await require_permissions(self.client, keys)

    def stop(self) -> None:
        """Ask every ``process`` call to end (STOPPED) at its next safe point. Safe from
        any thread and from a signal handler; permanent for this worker object."""
        self._stop.set()
        self._presence.stopped = True  # never registers from now on; leaves in the loop
        for flag in list(self._source_stops):
            flag.set()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        """In the loop, after :meth:`stop`: leave the namespace's presence, and wake
        every wait of this worker."""
        self._presence.stop()
        self._hub.wake_all()
        for event in self._stop_events:
            event.set()

    def _stop_event(self) -> asyncio.Event:
        """An event set once this worker is stopped (already set if it is); the caller
        discards it from ``_stop_events`` when done."""
        event = asyncio.Event()
        self._stop_events.add(event)
        if self.stopping:
            event.set()
        return event

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def inspect(self, job_id: str) -> Snapshot:
        """What Redis says about ``job_id`` now (status, attempt, token, holder, lease),
        with its attempts (``history``)."""
        keys = JobKeys.of(self.namespace, job_id)
        return await self._call(
            lambda: self.protocol.inspect(keys, history=True), "inspect job"
        )

    async def reset(self, job_id: str, *, force: bool = False) -> bool:
        """Make a known job pending again, and re-drive it; see
        :meth:`lockworker.Worker.reset`."""
        keys = JobKeys.of(self.namespace, job_id)
        done = await self._call(
            lambda: reset_job_async(
                self.client, self.protocol, keys, self._retention_ms, force=force
            ),
            "reset job",
        )
        if done.result is Reset.ABSENT:
            raise JobNotFound(f"no job {job_id!r} in namespace {self.namespace!r}")
        events.reset(self._log, done)
        return done.reset

    async def reset_all(
        self, state: str = "gave_up", *, force: bool = False
    ) -> dict[str, Reset]:
        """Reset (and re-drive) every job of the namespace in ``state``; see
        :meth:`lockworker.Worker.reset_all`."""
        state = config.job_state(state)
        results: dict[str, Reset] = {}
        async for keys in acandidates(self.client, self.namespace, state):
            if keys.job_id in results:
                continue
            done = await self._call(
                lambda k=keys: reset_job_async(  # type: ignore[misc]
                    self.client, self.protocol, k, self._retention_ms, force=force,
                    expect=state,
                ),
                f"reset job {keys.job_id!r}",
            )
            events.reset(self._log, done)
            if reported(done.result):
                results[keys.job_id] = done.result
        return results

    async def close(self) -> None:
        """End the presence (the registration is removed: backups know at once), the
        heartbeat and hook tasks and the signal handlers; the client is the caller's
        to close."""
        await self._presence.close()
        await self._heartbeat.close()
        self._hub.wake_all()
        await self._background.cancel_all()
        signals, self._signals = self._signals, None
        if signals is not None:
            signals.close()

    async def __aenter__(self) -> Worker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals -------------------------------------------------------------------

    def _started(self) -> None:
        """Note the running loop (for a stop from another thread) and, the first time,
        install the signal handlers (main thread only, as in a thread)."""
        self._loop = asyncio.get_running_loop()
        if self.handle_signals and self._signals is None:
            stack = contextlib.ExitStack()
            if stack.enter_context(stop_on_signals(lambda _signum: self.stop())):
                self._signals = stack

    async def _hook(self, log: events.EventLog, name: str, *args: Any) -> None:
        await self._hooks.guarded_async(log, name, *args)


