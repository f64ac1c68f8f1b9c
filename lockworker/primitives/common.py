"""What the primitives share: argument checks, the wake hub's lifetime, event names.

Every primitive is one holder: a :class:`~lockworker.primitives.lock.Lock` object holds
the lock at most once at a time, and each acquisition gets a fresh owner id, so a
retried request whose reply was lost recognises its own grant but never an earlier,
abandoned one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, ClassVar

import redis

from lockworker.clock import Clock, SystemClock
from lockworker.config import count, default_owner, lease, optional_seconds, positive, seconds
from lockworker.errors import AlreadyHeld, InvalidConfig
from lockworker.model.keys import JobKeys, Space, check_name
from lockworker.runtime import events
from lockworker.runtime.events import EventLog
from lockworker.runtime.lease import Heartbeat, Lease
from lockworker.runtime.retry import DEFAULT, Caller, RetryPolicy

ACQUIRED = "lock.acquired"
RELEASED = "lock.released"
LOST = "lock.lost"
EXTENDED = "lock.extended"
TIMED_OUT = "lock.timed_out"

__all__ = [
    "ACQUIRED",
    "EXTENDED",
    "LOST",
    "RELEASED",
    "TIMED_OUT",
    "AlreadyHeld",
    "Primitive",
    "check_client",
    "check_timeout",
    "count",
    "default_owner",
    "lease",
    "new_owner",
    "positive",
    "seconds",
]


def check_client(client: object, argument: str = "client") -> redis.Redis:
    """Refuse anything that is not a redis-py client before any Redis call."""
    if not hasattr(client, "register_script") or not hasattr(client, "pubsub"):
        raise InvalidConfig(f"{argument} must be a redis.Redis client, got {client!r}")
    return client  # type: ignore[return-value]


def check_timeout(timeout: object, argument: str = "timeout") -> float | None:
    """None (wait for ever) or a finite number of seconds >= 0."""
    return optional_seconds(timeout, argument)


def check_bool(value: object, argument: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidConfig(f"{argument} must be True or False, got {value!r}")
    return value


def new_owner(base: str) -> str:
    """A fresh owner id for one acquisition: readable prefix, unique suffix."""
    return f"{base}:{uuid.uuid4().hex[:12]}"


class Primitive:
    """The settings and local state every primitive shares, checked the same way.

    A subclass calls :meth:`_configure` first in its constructor, then adds its own.
    """

    space: ClassVar[Space]
    """The product's key space: no other product can reach these keys."""
    log_name: ClassVar[str]
    """The logger (one of :data:`lockworker.runtime.events.LOGGERS`)."""
    label: ClassVar[str]
    """The field naming the object in its events (``lock``, ``semaphore``)."""
    client: redis.Redis
    redis_retry: RetryPolicy
    _log: EventLog
    _call: Caller
    name: str
    keys: JobKeys
    ttl: float
    auto_renew: bool
    timeout: float | None
    clock: Clock
    _ttl_ms: int
    _base: str
    _lease: Lease | None
    _heartbeat: Heartbeat | None
    _valid_until: float

    def _configure(
        self, client: object, name: str, *, namespace: str, ttl: object, auto_renew: object,
        timeout: object, clock: Clock | None, logger: Any, redis_retry: RetryPolicy | None,
    ) -> None:
        """Check and set what every primitive on one client has, in one place: the
        client, then :meth:`_settings`."""
        self.client = check_client(client)
        self._settings(
            name, namespace=namespace, ttl=ttl, auto_renew=auto_renew, timeout=timeout,
            clock=clock, logger=logger, redis_retry=redis_retry,
        )

    def _settings(
        self, name: str, *, namespace: str, ttl: object, auto_renew: object,
        timeout: object, clock: Clock | None, logger: Any, redis_retry: RetryPolicy | None,
        **log_fields: Any,
    ) -> None:
        """The name and keys, the lease, the clock, the logger (:attr:`log_name`, bound
        to the name and ``log_fields``) and the one path to Redis (``self._call``)."""
        self.name = check_name(name, "name")
        self.keys = JobKeys(check_name(namespace, "namespace"), self.name, self.space)
        self.ttl = lease(ttl, "ttl")
        self.auto_renew = check_bool(auto_renew, "auto_renew")
        self.timeout = check_timeout(timeout)
        self.clock = clock or SystemClock()
        self._ttl_ms = max(1, round(self.ttl * 1000))
        self._base = default_owner()
        self._lease = None
        self._heartbeat = None
        self.redis_retry = redis_retry or DEFAULT
        self._valid_until = 0.0
        self._log = events.logger(
            self.log_name, logger,
            **{self.label: self.name, "namespace": self.keys.namespace, **log_fields},
        )
        self._call = Caller(self.clock, self.redis_retry, self._log, label=f" {self.name!r}")

    # -- the one holder: local validity, and a heartbeat with auto_renew --------------

    def _hold(
        self, until: float, next_renewal: float, renew: Callable[[float], bool] | None,
        **lost_fields: Any,
    ) -> None:
        """Hold what was granted: trusted until ``until`` on the local clock; with
        ``renew`` (``auto_renew``), a heartbeat renews it every ``ttl / 3`` from
        ``next_renewal`` and a failed renewal loses it (logged as ``lock.lost``)."""
        self._valid_until = until
        if renew is None:
            return

        def lost(_lease: Lease, reason: str) -> None:
            self._log.warning(LOST, reason=reason, **lost_fields)

        interval = self.ttl / 3
        self._lease = Lease(
            renew=renew, lease=self.ttl, valid_until=until, next_renewal=next_renewal,
            on_lost=lost,
        )
        self._heartbeat = Heartbeat(self.clock, interval)
        self._heartbeat.hold(self._lease)

    def _unhold(self) -> None:
        """Stop renewing (a release, a loss, a close)."""
        lease, heartbeat = self._lease, self._heartbeat
        self._lease = self._heartbeat = None
        if heartbeat is not None:
            if lease is not None:
                heartbeat.drop(lease)
            heartbeat.close()

    def _lost(self) -> bool:
        """Whether what is held can no longer be trusted: by the renewing lease, or by
        the local validity of the last grant or extension; no Redis call."""
        lease = self._lease
        if lease is not None:
            return not lease.is_valid(self.clock.monotonic())
        return self.clock.monotonic() >= self._valid_until
