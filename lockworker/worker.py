"""The failover worker: every process sees the job, exactly one does it at a time.

:meth:`Worker.process` is a loop over three moves: try to take the next attempt
(``protocol.acquire``); if granted, run ``on_acquired`` under a renewed lease and settle
the attempt (complete, fail, release); if not, wait for the holder to finish, fail or
die (a wake message, or the end of its lease by this process's own timer) and look
again. The decisions live in :mod:`lockworker.policy`, the Redis steps in
:mod:`lockworker.protocol`, the lease in :mod:`lockworker.lease`; this module wires them
to hooks, logs and signals.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from lockworker import events, policy, retry
from lockworker.clock import Clock, SystemClock
from lockworker.codec import LockValue, check_payload
from lockworker.errors import InvalidConfig, LockworkerError, StopRequested
from lockworker.hooks import check_hooks
from lockworker.job import Job
from lockworker.keys import JobKeys, check_name
from lockworker.lease import Heartbeat, Lease, valid_until
from lockworker.protocol import LockProtocol, ScriptProtocol
from lockworker.serve import serve
from lockworker.signals import stop_on_signals
from lockworker.state import Grant, JobStatus, Outcome, Settle, Snapshot
from lockworker.txn import TxnProtocol
from lockworker.wake import WakeHub

T = TypeVar("T")

DAY = 86400.0

RESERVED_NAMESPACES = frozenset({"leaders"})
"""Namespaces lockworker uses itself (``leaders``: :class:`lockworker.Leader`)."""


def default_owner() -> str:
    """``host:pid:random``: unique per worker, readable in logs and status."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _positive(value: object, name: str, *, integer: bool = False) -> float:
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        expected = "an int >= 1" if integer else "a number of seconds > 0"
        raise InvalidConfig(f"{name} must be {expected}, got {value!r}")
    if (integer and value < 1) or (not integer and not value > 0):  # type: ignore[operator]
        expected = "an int >= 1" if integer else "a number of seconds > 0"
        raise InvalidConfig(f"{name} must be {expected}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def make_protocol(client: redis.Redis, protocol: str | LockProtocol) -> LockProtocol:
    """``"script"`` (Lua, the default), ``"txn"`` (WATCH/MULTI/EXEC), or an instance."""
    if protocol == "script":
        return ScriptProtocol(client)
    if protocol == "txn":
        return TxnProtocol(client)
    if isinstance(protocol, str):
        raise InvalidConfig(f"protocol must be 'script' or 'txn', got {protocol!r}")
    return protocol


class Worker:
    """Runs jobs so that one process at a time does each, and a backup takes over.

    Subclass it and override ``on_acquired`` (and any other hook, see
    :mod:`lockworker.hooks`), or pass the hooks as functions. One ``Worker`` may serve
    many jobs, from many threads, but one job id at a time per worker.

    :param client: a ``redis.Redis`` client (give it a ``socket_timeout`` shorter than
        ``lock_timeout``, so a hung connection cannot outlast a lease).
    :param namespace: groups the keys of this worker's jobs; workers that should share
        jobs use the same namespace.
    :param lock_timeout: the lease in seconds; renewed every third of it while
        ``on_acquired`` runs, so it bounds the takeover time after a crash, not the job.
    :param max_attempts: attempts (by any process) before the job is given up.
    :param owner: this process's id in Redis and logs; default ``host:pid:random``.
    :param retention: seconds that DONE/GAVE_UP (and the attempt count) are kept.
    :param retry_delay: seconds a process whose attempt failed waits before competing
        again (others are woken at once); default ``min(1, lock_timeout / 4)``.
    :param clock: time source (tests pass :class:`lockworker.testing.FakeClock`).
    :param protocol: ``"script"`` (default) or ``"txn"`` (WATCH/MULTI/EXEC).
    :param redis_retry: retry policy for connection errors.
    :param handle_signals: stop on SIGTERM/SIGINT (a second signal acts as before), from
        the first ``process`` call in the main thread until :meth:`close`.
    :param role: ``"primary"`` competes for a free job at once; ``"backup"`` lets a
        free job lie for ``backup_delay`` seconds first, so a live primary normally
        does the jobs and backups step in only when it is gone (docs/daemons.md).
    :param backup_delay: seconds a backup waits before competing (ignored for a primary).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        namespace: str,
        lock_timeout: float = 10.0,
        max_attempts: int = 3,
        owner: str | None = None,
        retention: float = DAY,
        retry_delay: float | None = None,
        clock: Clock | None = None,
        logger: Any = None,
        protocol: str | LockProtocol = "script",
        redis_retry: retry.RetryPolicy | None = None,
        handle_signals: bool = True,
        role: str = "primary",
        backup_delay: float = 0.5,
        on_acquired: Callable[[Job], None] | None = None,
        on_locked: Callable[[Job], None] | None = None,
        on_failed: Callable[[Job, BaseException], None] | None = None,
        on_lost: Callable[[Job], None] | None = None,
        on_gave_up: Callable[[Job], None] | None = None,
    ) -> None:
        if not isinstance(client, (redis.Redis, redis.RedisCluster)) and not hasattr(
            client, "register_script"
        ):
            raise InvalidConfig(f"client must be a redis.Redis client, got {client!r}")
        self.namespace = check_name(namespace, "namespace")
        if self.namespace in RESERVED_NAMESPACES:
            raise InvalidConfig(
                f"namespace {namespace!r} is reserved (used by lockworker.Leader); choose another"
            )
        self.role, self.backup_delay = policy.check_role(role, backup_delay)
        self.lock_timeout = _positive(lock_timeout, "lock_timeout")
        self.max_attempts = int(_positive(max_attempts, "max_attempts", integer=True))
        self.owner = check_name(owner, "owner") if owner is not None else default_owner()
        self.retention = _positive(retention, "retention")
        if self.retention <= self.lock_timeout:
            raise InvalidConfig(
                f"retention must be longer than lock_timeout ({self.lock_timeout}s), "
                f"got {retention!r}"
            )
        delay = min(1.0, self.lock_timeout / 4) if retry_delay is None else retry_delay
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
            raise InvalidConfig(f"retry_delay must be a number of seconds >= 0, got {delay!r}")
        self._hooks = check_hooks(
            {
                "on_acquired": on_acquired, "on_locked": on_locked, "on_failed": on_failed,
                "on_lost": on_lost, "on_gave_up": on_gave_up,
            }
        )
        if "on_acquired" not in self._hooks and type(self).on_acquired is Worker.on_acquired:
            raise InvalidConfig(
                "on_acquired is required: override it in a subclass or pass on_acquired=fn"
            )
        self.client = client
        self.timing = policy.Timing(
            self.lock_timeout, float(delay), self.backup_delay if role == "backup" else 0.0
        )
        self.clock: Clock = clock or SystemClock()
        self.protocol = make_protocol(client, protocol)
        self.redis_retry = redis_retry or retry.RetryPolicy()
        self.handle_signals = handle_signals
        self._log = events.logger(logger, namespace=self.namespace, owner=self.owner)
        self._lease_ms = max(1, round(self.lock_timeout * 1000))
        self._retention_ms = max(1, round(self.retention * 1000))
        self._stop = threading.Event()
        self._heartbeat = Heartbeat(self.clock, self.lock_timeout / 3)
        self._hub = WakeHub(client, self.clock)
        self._signals: contextlib.ExitStack | None = None

    # -- hooks (override in a subclass, or pass as functions) ------------------------

    def on_acquired(self, job: Job) -> None:
        """Do the work. Return: DONE. Raise: this attempt failed. Required."""
        self._hooks["on_acquired"](job)

    def on_locked(self, job: Job) -> None:
        """Another process holds the job (``job.holder``, ``job.attempt``)."""
        if "on_locked" in self._hooks:
            self._hooks["on_locked"](job)

    def on_failed(self, job: Job, exc: BaseException) -> None:
        """This process's attempt raised ``exc``."""
        if "on_failed" in self._hooks:
            self._hooks["on_failed"](job, exc)

    def on_lost(self, job: Job) -> None:
        """This process can no longer be sure it holds the lease (see hooks contract)."""
        if "on_lost" in self._hooks:
            self._hooks["on_lost"](job)

    def on_gave_up(self, job: Job) -> None:
        """``max_attempts`` attempts were used up; nobody will run the job again."""
        if "on_gave_up" in self._hooks:
            self._hooks["on_gave_up"](job)

    # -- public API ------------------------------------------------------------------

    def process(self, job_id: str, payload: Any = None) -> Outcome:
        """Block until ``job_id`` is resolved for this process; see :class:`Outcome`.

        Raises :class:`~lockworker.RedisUnavailable` if Redis stays unreachable past the
        retry budget (the job then stays pending, and is recoverable), and
        :class:`~lockworker.ForeignValueError` if the job's keys hold foreign values.
        """
        keys = JobKeys.of(self.namespace, job_id)
        check_payload(payload)
        log = self._log.bind(job_id=job_id)
        self._install_signal_handlers()
        return _JobRun(self, keys, payload, log).run()

    def serve(self, source: Any, *, concurrency: int = 4) -> None:
        """Process jobs from ``source`` until it is exhausted or the worker is stopped.

        ``source``: any iterable of ``(job_id, payload)``, or a
        :class:`lockworker.StreamSource`. At most ``concurrency`` jobs run at once, each
        through :meth:`process`; see :mod:`lockworker.serve`.
        """
        serve(self, source, concurrency=concurrency)

    def stop(self) -> None:
        """Ask every ``process`` call of this worker to end (STOPPED) at its next safe point.

        A running ``on_acquired`` is not interrupted: it sees ``job.stopping`` and
        ``job.check()`` raises :class:`~lockworker.StopRequested`. Thread- and
        signal-safe; permanent for this worker object.
        """
        self._stop.set()
        self._hub.wake_all()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def inspect(self, job_id: str) -> Snapshot:
        """What Redis says about ``job_id`` now (status, attempt, token, holder, lease)."""
        keys = JobKeys.of(self.namespace, job_id)
        return self._call(lambda: self.protocol.inspect(keys), "inspect job")

    def reset(self, job_id: str, *, force: bool = False) -> bool:
        """Make a DONE/GAVE_UP job pending again with its attempts cleared.

        Refused (False) while a process holds the job, unless ``force``. Fencing tokens
        keep growing across a reset.
        """
        keys = JobKeys.of(self.namespace, job_id)
        return self._call(
            lambda: self.protocol.reset(keys, self._retention_ms, force=force), "reset job"
        )

    def close(self) -> None:
        """Stop the background threads (heartbeat, wake reader)."""
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
        """Stop on SIGTERM/SIGINT from the first ``process`` call until :meth:`close`.

        Installed once rather than per call: it is the same handler every time, and a
        signal arriving between two jobs must still stop the worker.
        """
        if self.handle_signals and self._signals is None:
            stack = contextlib.ExitStack()
            if stack.enter_context(stop_on_signals(lambda _signum: self.stop())):
                self._signals = stack

    def _call(self, fn: Callable[[], T], what: str, deadline: float | None = None) -> T:
        return retry.call(
            fn, clock=self.clock, policy=self.redis_retry, what=what, deadline=deadline
        )

    def _hook(self, log: Any, name: str, *args: Any) -> None:
        """Run a hook other than on_acquired; its exceptions are logged, not raised."""
        try:
            getattr(self, name)(*args)
        except Exception as exc:
            log.error(events.HOOK_ERROR, hook=name, error=repr(exc))


class _JobRun:
    """One ``process`` call: the loop for one job in one thread."""

    def __init__(self, worker: Worker, keys: JobKeys, payload: Any, log: Any) -> None:
        self.w = worker
        self.keys = keys
        self.payload = payload
        self.log = log
        self.previous: Snapshot | None = None
        self.not_before = 0.0
        self.wake: threading.Event | None = None
        self.free_since: float | None = None
        self.free_token: int | None = None
        self.stack = contextlib.ExitStack()

    def job(self, attempt: int, token: int, holder: str | None) -> Job:
        w = self.w
        return Job(
            self.keys.job_id, self.payload, attempt, token, w.max_attempts, holder,
            _clock=w.clock, _stopping=w._stop,
        )

    def run(self) -> Outcome:
        with self.stack:
            while True:
                if self.w.stopping:
                    self.log.info(events.STOPPED)
                    return Outcome.STOPPED
                now = self.w.clock.monotonic()
                if now < self.not_before:
                    outcome = self.wait_until(self.not_before, observe=True)
                    if outcome is not None:
                        return outcome
                    continue
                if self.w.role == "backup":
                    ready = self.backup_ready()
                    if isinstance(ready, Outcome):
                        return ready
                    if not ready:
                        continue
                    now = self.w.clock.monotonic()
                sent_at = now
                result = self.w._call(
                    lambda: self.w.protocol.acquire(
                        self.keys, self.w.owner, self.w._lease_ms, self.w.max_attempts,
                        self.w._retention_ms,
                    ),
                    "acquire job",
                )
                if isinstance(result, Grant):
                    outcome = self.attempt(result, sent_at)
                    if outcome is not None:
                        return outcome
                    continue
                outcome = self.observe(result)
                if outcome is not None:
                    return outcome
                if self.subscribe():
                    continue  # subscribed just now: look again before waiting
                self.wait_until(policy.recheck_at(result, self.w.clock.monotonic(), self.w.timing))

    def backup_ready(self) -> Outcome | bool:
        """A backup looks before it competes: True to acquire now, False to look again.

        The primary skips this (no extra round trip); a backup inspects the job and
        competes only once it has been free for ``backup_delay``, waiting meanwhile on
        the wake channel so that a job finished elsewhere ends the wait at once.
        """
        seen = self.w._call(lambda: self.w.protocol.inspect(self.keys), "inspect job")
        outcome = self.observe(seen)
        if outcome is not None:
            return outcome
        view = policy.backup_step(
            seen, self.free_since, self.free_token, self.w.clock.monotonic(), self.w.timing
        )
        self.free_since, self.free_token = view.free_since, view.free_token
        if view.compete:
            return True
        if not self.subscribe():
            self.wait_until(view.look_again)
        return False

    def subscribe(self) -> bool:
        """Listen on the job's wake channel; True if this call started listening."""
        if self.wake is not None:
            return False
        self.wake = self.stack.enter_context(self.w._hub.listen(self.keys.wake))
        return True

    def wait_until(self, deadline: float, *, observe: bool = False) -> Outcome | None:
        """Block until ``deadline``, a wake message or a stop. With ``observe``, a wake
        message makes it read the job and return its outcome if it was resolved."""
        self.subscribe()
        assert self.wake is not None
        while not self.w.stopping:
            remaining = deadline - self.w.clock.monotonic()
            if remaining <= 0:
                return None
            woken = self.w.clock.wait(self.wake, remaining)
            if not woken:
                return None
            self.wake.clear()
            if not observe:
                return None
            seen = self.w._call(lambda: self.w.protocol.inspect(self.keys), "inspect job")
            outcome = self.observe(seen)
            if outcome is not None:
                return outcome
        return None

    def observe(self, seen: Snapshot) -> Outcome | None:
        """React to a job this process does not hold: resolved, or held by another."""
        w = self.w
        if seen.status is JobStatus.DONE:
            mine = seen.owner == w.owner
            self.log.info(
                events.DONE if mine else events.DONE_ELSEWHERE,
                attempt=seen.attempt, token=seen.token, by=seen.owner,
            )
            return Outcome.DONE if mine else Outcome.DONE_ELSEWHERE
        if seen.status is JobStatus.GAVE_UP:
            self.log.warning(events.GAVE_UP, attempt=seen.attempt, token=seen.token)
            w._hook(self.log, "on_gave_up", self.job(seen.attempt, seen.token, None))
            return Outcome.GAVE_UP
        if seen.holder is not None and policy.is_news(self.previous, seen):
            self.previous = seen
            self.log.info(
                events.LOCKED, attempt=seen.attempt, token=seen.token, holder=seen.holder,
                lease_ms=seen.pttl_ms,
            )
            w._hook(self.log, "on_locked", self.job(seen.attempt, seen.token, seen.holder))
        return None

    def attempt(self, grant: Grant, sent_at: float) -> Outcome | None:
        """Hold the lease for ``grant`` while ``on_acquired`` runs, then settle it.

        Returns the outcome, or None to go round the loop again (this attempt failed
        or was lost and the job is still pending).
        """
        w = self.w
        held = LockValue(grant.token, grant.attempt, w.owner)
        log = self.log.bind(attempt=grant.attempt, token=grant.token)
        job = self.job(grant.attempt, grant.token, w.owner)

        def renew(deadline: float) -> bool:
            return w._call(
                lambda: w.protocol.renew(self.keys, held, w._lease_ms, w._retention_ms),
                "renew lease",
                deadline=deadline,
            )

        def lost(_lease: Lease, reason: str) -> None:
            log.warning(events.LOST, reason=reason)
            w._hook(log, "on_lost", job)

        lease = Lease(
            renew=renew,
            lease=w.lock_timeout,
            valid_until=valid_until(sent_at, w.lock_timeout),
            next_renewal=sent_at + w.lock_timeout / 3,
            on_renewed=lambda _lease: log.debug(events.RENEWED),
            on_lost=lost,
        )
        job._lease = lease
        log.info(events.ACQUIRED, reentered=grant.reentered)
        w._heartbeat.hold(lease)
        try:
            w.on_acquired(job)
        except StopRequested:
            w._heartbeat.drop(lease)
            return self.settle_stop(held, log)
        except Exception as exc:
            w._heartbeat.drop(lease)
            return self.settle_failure(job, held, exc, log)
        except BaseException:
            w._heartbeat.drop(lease)
            with contextlib.suppress(LockworkerError, redis.RedisError):
                w.protocol.release(self.keys, held, w._retention_ms)
            raise
        w._heartbeat.drop(lease)
        settled = w._call(
            lambda: w.protocol.complete(self.keys, held, w._retention_ms), "mark job done"
        )
        if settled is Settle.DONE:
            log.info(events.DONE)
            return Outcome.DONE
        self.refused(lease, job, log)
        return None

    def refused(self, lease: Lease, job: Job, log: Any) -> None:
        """The server refused to settle: the lease was lost; step back and watch."""
        if not lease.lost:
            lease.lost = True
            log.warning(events.LOST, reason="completion refused: lease lost on the server")
            self.w._hook(log, "on_lost", job)
        self.not_before = policy.compete_after_failure(self.w.clock.monotonic(), self.w.timing)

    def settle_failure(
        self, job: Job, held: LockValue, exc: Exception, log: Any
    ) -> Outcome | None:
        w = self.w
        log.warning(events.FAILED, error=repr(exc), last=job.is_last_attempt)
        w._hook(log, "on_failed", job, exc)
        settled = w._call(
            lambda: w.protocol.fail(self.keys, held, w.max_attempts, w._retention_ms),
            "release failed attempt",
        )
        if settled is Settle.GAVE_UP:
            log.warning(events.GAVE_UP)
            w._hook(log, "on_gave_up", job)
            return Outcome.GAVE_UP
        if settled is Settle.RELEASED:
            log.info(events.RELEASED, reason="failed")
            self.not_before = policy.compete_after_failure(w.clock.monotonic(), w.timing)
            return None
        self.refused(job._lease or Lease(lambda _d: False, 0, 0, 0), job, log)
        return None

    def settle_stop(self, held: LockValue, log: Any) -> Outcome:
        w = self.w
        settled = w._call(
            lambda: w.protocol.release(self.keys, held, w._retention_ms), "release on stop"
        )
        log.info(events.RELEASED, reason="stopping", settled=settled.value)
        log.info(events.STOPPED)
        return Outcome.STOPPED
