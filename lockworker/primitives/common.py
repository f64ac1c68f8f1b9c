"""What the primitives share: argument checks, the holder, event names, steps and loops.

Every primitive is one holder: a :class:`~lockworker.primitives.lock.Lock` object holds
the lock at most once at a time, and each acquisition gets a fresh owner id, so a
retried request whose reply was lost recognises its own grant but never an earlier,
abandoned one.

Each primitive is written once for both kinds of client. Its atomic steps are
:class:`ScriptStep` objects (the script, keys, arguments and what the reply means), and
its waiting loops are generators that yield the calls doing I/O (:data:`Steps`): the
classes here send and call them on a ``redis.Redis`` client (:func:`drive`), those of
:mod:`lockworker.aio` await them on a ``redis.asyncio`` one. Only the I/O differs.
"""

from __future__ import annotations

import contextlib
import uuid
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from lockworker.clock import Clock, SystemClock
from lockworker.config import (
    acquire_wait,
    count,
    default_owner,
    flag,
    lease,
    optional_seconds,
    positive,
    seconds,
)
from lockworker.config import client as config_client
from lockworker.errors import AlreadyHeld
from lockworker.model.keys import JobKeys, Space, check_name
from lockworker.primitives.turns import Turns, TurnsCore
from lockworker.protocol.luacall import LuaScript
from lockworker.runtime import events
from lockworker.runtime.events import EventLog
from lockworker.runtime.lease import Heartbeat, Lease
from lockworker.runtime.retry import DEFAULT, Caller, RetryPolicy
from lockworker.steps import Steps, drive

ACQUIRED = "lock.acquired"
RELEASED = "lock.released"
LOST = "lock.lost"
EXTENDED = "lock.extended"
TIMED_OUT = "lock.timed_out"
DROPPED = "lock.dropped"

R = TypeVar("R")

__all__ = [
    "ACQUIRED",
    "DROPPED",
    "EXTENDED",
    "LOST",
    "RELEASED",
    "TIMED_OUT",
    "AlreadyHeld",
    "Primitive",
    "RoundTrips",
    "ScriptStep",
    "Steps",
    "check_acquire",
    "check_client",
    "check_timeout",
    "count",
    "default_owner",
    "drive",
    "lease",
    "new_owner",
    "positive",
    "round_trips",
    "seconds",
]


def check_client(
    client: object, argument: str = "client", *, asyncio: bool = False, twin: str = ""
) -> Any:
    """A redis-py client of the side's kind, with pub/sub (:func:`lockworker.config.client`)."""
    return config_client(client, argument, asyncio=asyncio, pubsub=True, twin=twin)


def check_timeout(timeout: object, argument: str = "timeout") -> float | None:
    """None (wait for ever) or a finite number of seconds >= 0."""
    return optional_seconds(timeout, argument)


def check_bool(value: object, argument: str) -> bool:
    """True or False (:func:`lockworker.config.flag`)."""
    return flag(value, argument)


def check_acquire(blocking: object, timeout: object) -> tuple[bool, float | None]:
    """An acquisition's arguments (:func:`lockworker.config.acquire_wait`): a timeout
    with ``blocking=False`` is refused."""
    return acquire_wait(blocking, timeout)


def new_owner(base: str) -> str:
    """A fresh owner id for one acquisition: readable prefix, unique suffix."""
    return f"{base}:{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True)
class ScriptStep(Generic[R]):
    """One atomic step of a primitive, built without I/O: ``decode(reply)`` is what
    Redis did. :meth:`run` sends it on a ``redis.Redis`` client, :meth:`arun` on a
    ``redis.asyncio`` one: one script, one set of arguments, one reading, both sides."""

    script: LuaScript
    keys: Sequence[str]
    args: Sequence[Any]
    decode: Callable[[Any], R]

    def run(self, client: Any) -> R:
        return self.decode(self.script(client, self.keys, self.args))

    async def arun(self, client: Any) -> R:
        return self.decode(await self.script.acall(client, self.keys, self.args))




class RoundTrips:
    """How early a timed acquire stops waiting, so that it returns by its deadline.

    After its last wait an acquire still reads that wait's answer and leaves the
    queue: about two round trips. Waiting until the deadline and making them then
    returned a few milliseconds late, every time; so the waits end :meth:`reserve`
    seconds before it (twice the longest recent round trip, and a margin for
    scheduling), and no look starts after that. The estimate is the object's own,
    measured on its looks and on how late its waits' answers come: it follows a
    slower link at once, and a faster one as it halves. One estimate per client (its
    connection pool), so that a new object starts from what the others measured."""

    GUESS = 0.002
    """Seconds a round trip is taken to last before one is measured."""
    MARGIN = 0.002
    """Seconds kept besides the round trips, for the scheduling of the returning thread."""

    __slots__ = ("rtt",)

    def __init__(self) -> None:
        self.rtt = self.GUESS

    def measured(self, sent: float, answered: float) -> None:
        self.rtt = max(answered - sent, self.rtt / 2)

    def reserve(self) -> float:
        return 2 * self.rtt + self.MARGIN

    def end(self, deadline: float | None) -> float | None:
        """When waiting must stop for an acquire due back at ``deadline``."""
        return None if deadline is None else deadline - self.reserve()


_trips: weakref.WeakKeyDictionary[Any, RoundTrips] = weakref.WeakKeyDictionary()


def round_trips(client: Any) -> RoundTrips:
    """The round-trip estimate of ``client`` (shared by the objects on its pool)."""
    key = getattr(client, "connection_pool", client)
    try:
        return _trips.setdefault(key, RoundTrips())
    except TypeError:  # not weakly referable: an estimate of the object's own
        return RoundTrips()


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
    asyncio_client: ClassVar[bool] = False
    """Whether the client is a ``redis.asyncio`` one (:mod:`lockworker.aio`)."""
    dropped_event: ClassVar[str] = DROPPED
    """The event logged when the object is collected while it holds."""
    shares: ClassVar[bool] = True
    """Whether the object's threads (tasks) take turns with it (a lock), rather than a
    second one being refused (a semaphore): :mod:`lockworker.primitives.turns`."""
    turns_kind: ClassVar[Callable[..., TurnsCore[Any]]] = Turns
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
    _turns: TurnsCore[Any]

    def _configure(
        self, client: object, name: str, *, namespace: str, ttl: object, auto_renew: object,
        timeout: object, clock: Clock | None, logger: Any, redis_retry: RetryPolicy | None,
    ) -> None:
        """Check what every primitive on one client has, in one place: the client (the
        subclass keeps it, typed for its side), then :meth:`_settings`."""
        check_client(client, asyncio=self.asyncio_client, twin=self.label.capitalize())
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
        self._turns = self.turns_kind(
            f"{type(self).__name__} {self.name!r}", share=self.shares
        )
        self._log = events.logger(
            self.log_name, logger,
            **{self.label: self.name, "namespace": self.keys.namespace, **log_fields},
        )
        self._call = Caller(self.clock, self.redis_retry, self._log, label=f" {self.name!r}")

    # -- the one holder: local validity, and a heartbeat with auto_renew --------------

    def _hold(
        self, until: float, next_renewal: float, renew: Callable[[float], Any] | None,
        **lost_fields: Any,
    ) -> None:
        """Hold what was granted: trusted until ``until`` on the local clock; with
        ``renew`` (``auto_renew``), renewed every ``ttl / 3`` from ``next_renewal`` in the
        background, and a failed renewal loses it (logged as ``lock.lost``). ``renew``
        returns whether it is still held (on the asyncio side, as a coroutine)."""
        self._valid_until = until
        if renew is None:
            return

        log = self._log  # not self: renewal must not keep a dropped object alive

        def lost(_lease: Lease, reason: str) -> None:
            log.warning(LOST, reason=reason, **lost_fields)

        self._lease = Lease(
            renew=renew, lease=self.ttl, valid_until=until, next_renewal=next_renewal,
            on_lost=lost,
        )
        self._renew_in_background(self._lease, self.ttl / 3)

    def _renew_in_background(self, lease: Lease, interval: float) -> None:
        """Renew ``lease`` every ``interval`` in a heartbeat thread."""
        self._heartbeat = Heartbeat(self.clock, interval)
        self._heartbeat.hold(lease)

    def _unhold(self, *, wait: bool = True) -> None:
        """Stop renewing (a release, a loss, a close); ``wait`` for the heartbeat to end."""
        lease, self._lease = self._lease, None
        self._stop_background_renewal(lease, wait=wait)

    def _stop_background_renewal(self, lease: Lease | None, *, wait: bool = True) -> None:
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            if lease is not None:
                heartbeat.drop(lease)
            heartbeat.close(wait=wait)

    def _holding(self) -> dict[str, Any] | None:
        """What this object holds, as the fields of an event; None if nothing."""
        return None

    def __del__(self) -> None:
        """Collected while holding (never released, no ``with``, an error path): stop
        renewing at once, so the lease lapses within its ttl, and say so, as an unclosed
        file does. Renewal holds no reference to the object, so dropping it is enough."""
        try:
            holding = self._holding()
        except AttributeError:  # a constructor that raised: nothing was held
            return
        if holding is None:
            return
        self._unhold(wait=False)  # never block the collector (or interpreter shutdown)
        warnings.warn(
            f"{self.label} {self.name!r} (namespace {self.keys.namespace!r}) was dropped "
            f"while held ({', '.join(f'{k} {v}' for k, v in holding.items())}); renewal "
            f"stopped and it lapses within its ttl. Release it, or use 'with'",
            ResourceWarning, stacklevel=2, source=self,
        )
        with contextlib.suppress(Exception):  # logging may be gone at interpreter exit
            self._log.warning(self.dropped_event, **holding)

    def _lost(self) -> bool:
        """Whether what is held can no longer be trusted: by the renewing lease, or by
        the local validity of the last grant or extension; no Redis call."""
        lease = self._lease
        if lease is not None:
            return not lease.is_valid(self.clock.monotonic())
        return self.clock.monotonic() >= self._valid_until
