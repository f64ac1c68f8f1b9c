"""``compute_once``: cache-stampede protection ("look, lock, look again, compute, store").

When a cached value is missing, every process that wants it would compute it at once
(the stampede). Here exactly one process computes it under a
:class:`~lockworker.primitives.lock.Lock` while the others wait for a wake-up, not a
fixed sleep. For key ``report`` in namespace ``once``::

    lw:once:once:{report}:value   the cached value (codec-encoded), with its ttl
    lw:once:once:{report}:lock    the computing process's lock (renewed while it computes)
    lw:once:once:{report}:wake    published when the value is stored and when the lock
                                  is released

These live in a key space of their own (``lw:once:``): a ``Lock`` or a worker's job of
the same name never shares them.

A waiter subscribes to the wake channel, then looks for the value, then tries the
lock; it sleeps until a message or until the lock's PTTL runs out on its own clock.
So it wakes when the value is stored, when the computing process gives up (its ``fn``
raised: the error reaches that caller only, nothing is cached, and a waiter computes
instead), or when that process died (its lock is no longer renewed and expires after
``lock_timeout``: a waiter takes over).

Values are stored with a codec: JSON by default (:data:`JSON`), or anything with
``encode(value) -> str | bytes`` and ``decode(raw) -> value``. Never pickle: a cache
is shared, and unpickling what another process wrote runs its code.

:class:`OnceCore` is one call without its I/O (the checked arguments, the wait loop as
a generator, every decision); :func:`compute_once` runs it on a ``redis.Redis`` client
and :func:`lockworker.aio.once.compute_once` on a ``redis.asyncio`` one, so sync and
asyncio callers of one key share one computation.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar, Protocol, TypeVar

import redis

from lockworker.clock import Clock, SystemClock
from lockworker.errors import AcquireTimeout, LockLost
from lockworker.model.codec import to_json
from lockworker.model.keys import JobKeys, Space, check_name
from lockworker.primitives import common
from lockworker.primitives.lock import Lock
from lockworker.primitives.lockqueue import MIN_WAIT
from lockworker.protocol.luacall import LuaScript
from lockworker.runtime import events, retry
from lockworker.runtime.wake import Waits

# STORE: cache the computed value and wake the waiters, in one step. A script rather
# than MULTI/EXEC with PUBLISH: a cluster client routes it by its one key (the channel
# is an argument), where it refuses a PUBLISH inside a pipeline.
# KEYS[1] value key   ARGV[1] value   ARGV[2] ttl ms   ARGV[3] wake channel
STORE = LuaScript("""
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[3], 'ready')
return 1
""")

NAMESPACE = "once"
COMPUTED = "once.computed"
CACHED = "once.cached"
FAILED = "once.failed"

T = TypeVar("T")


class Codec(Protocol):
    """How values are written to and read from the cache."""

    def encode(self, value: Any) -> str | bytes:
        """Serialise ``value``; raise TypeError/ValueError if it cannot be."""
        ...

    def decode(self, raw: str | bytes) -> Any:
        """The value ``encode`` wrote."""
        ...


class JSONCodec:
    """JSON: dict, list, str, int, float (finite), bool, None. Tuples come back as lists."""

    def encode(self, value: Any) -> str:
        try:
            return to_json(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"compute_once: the value of fn() is not JSON-serialisable "
                f"({type(value).__name__}: {exc}); pass codec= for other types"
            ) from exc

    def decode(self, raw: str | bytes) -> Any:
        return json.loads(raw)


JSON = JSONCodec()


def _check_codec(codec: object) -> Codec:
    if not callable(getattr(codec, "encode", None)) or not callable(
        getattr(codec, "decode", None)
    ):
        raise TypeError(f"codec must have encode(value) and decode(raw) methods, got {codec!r}")
    return codec  # type: ignore[return-value]


class OnceCore:
    """One call of compute_once, checked, without its I/O. Subclasses supply
    :meth:`_cached`, :meth:`_compute`, :meth:`_lock_pttl` and :meth:`_wait`: the sync
    ones return their result, the asyncio ones a coroutine."""

    asyncio_client: ClassVar[bool] = False

    def __init__(
        self, client: Any, key: str, fn: Callable[[], Any], *, ttl: float,
        lock_timeout: float, timeout: float | None, codec: Codec, namespace: str,
        clock: Clock | None, logger: Any, redis_retry: retry.RetryPolicy | None,
    ) -> None:
        common.check_client(client, asyncio=self.asyncio_client, twin="compute_once")
        self.client = client
        self.name = check_name(key, "key")
        if not callable(fn):
            raise TypeError(f"fn must be a callable taking no arguments, got {fn!r}")
        self.fn = fn
        self.ttl_ms = max(1, round(common.positive(ttl, "ttl") * 1000))
        self.lock_timeout = common.lease(lock_timeout, "lock_timeout")
        self.wait = common.check_timeout(timeout)
        self.codec = _check_codec(codec)
        self.clock = clock or SystemClock()
        self.keys = JobKeys(
            check_name(namespace, "namespace"), check_name(self.name, "name"), Space.ONCE
        )
        self.value_key = self.keys.extra("value")
        self.log = events.logger(events.ONCE, logger, key=self.name, namespace=self.keys.namespace)
        self.call = retry.Caller(
            self.clock, redis_retry or retry.DEFAULT, self.log, label=f" {self.name!r}"
        )
        self.logger = logger

    def lock_settings(self) -> dict[str, Any]:
        """The arguments of the computing process's lock (after its client and name)."""
        return {
            "ttl": self.lock_timeout, "auto_renew": True, "namespace": self.keys.namespace,
            "clock": self.clock, "logger": self.logger, "redis_retry": self.call.policy,
        }

    def _hit(self, raw: Any) -> tuple[bool, Any]:
        """Whether the cache held a value, and the value."""
        return (False, None) if raw is None else (True, self.codec.decode(raw))

    def _steps(self, lock: Any, event: Any, start: float) -> common.Steps[Any]:
        """The wait loop, entered listening on the wake channel (``event``): look for
        the value, else take the lock and compute it, else wait for a message or the
        lock's PTTL, on this process's clock."""
        deadline = None if self.wait is None else start + self.wait
        while True:
            event.clear()
            hit, value = yield self._cached
            if hit:
                self.log.debug(CACHED, waited=self.clock.monotonic() - start)
                return value
            if (yield partial(lock.acquire, blocking=False)):
                return (yield partial(self._compute, lock))
            now = self.clock.monotonic()
            if deadline is not None and now >= deadline:
                raise AcquireTimeout(
                    f"compute_once: no value for {self.name!r} within {self.wait} s "
                    "(another process is still computing it)"
                )
            pttl = yield partial(self._lock_pttl, lock)
            pause = pttl / 1000.0 + MIN_WAIT if pttl > 0 else MIN_WAIT
            if deadline is not None:
                pause = min(pause, deadline - now)
            yield partial(self._wait, event, max(MIN_WAIT, pause))

    def _cached(self) -> Any:
        """(hit, value) from the cache."""
        raise NotImplementedError

    def _compute(self, lock: Any) -> Any:
        """Holding ``lock``: look again, compute, store and wake the waiters, release."""
        raise NotImplementedError

    def _lock_pttl(self, lock: Any) -> Any:
        raise NotImplementedError

    def _wait(self, event: Any, pause: float) -> Any:
        raise NotImplementedError

    def _store_step(self, raw: str | bytes, lock: Any) -> common.ScriptStep[Any]:
        return common.ScriptStep(
            STORE, [self.value_key], [raw, self.ttl_ms, lock.keys.wake], lambda reply: reply
        )

    def _failed(self, exc: BaseException) -> None:
        self.log.debug(FAILED, error=type(exc).__name__)

    def _stored(self, raw: str | bytes, token: int | None) -> Any:
        """What every caller gets: the value as stored."""
        self.log.debug(COMPUTED, token=token)
        return self.codec.decode(raw)


class _Once(OnceCore):
    def _cached(self) -> tuple[bool, Any]:
        raw = self.call(lambda: self.client.get(self.value_key), "read the cached value")
        return self._hit(raw)

    def _compute(self, lock: Lock) -> Any:
        try:
            hit, value = self._cached()  # stored between our first look and our lock
            if hit:
                return value
            try:
                raw = self.codec.encode(self.fn())
            except BaseException as exc:
                self._failed(exc)
                raise
            self._store_step(raw, lock).run(self.client)
            return self._stored(raw, lock.token)
        finally:
            # The value is stored or fn failed; a lost lock only means someone may have
            # computed it too, which the value itself does not care about.
            with contextlib.suppress(LockLost):
                lock.release()

    def _lock_pttl(self, lock: Lock) -> int:
        return self.call(lambda: int(self.client.pttl(lock.keys.lock)), "read the lock")

    def _wait(self, event: Any, pause: float) -> bool:
        return self.clock.wait(event, pause)


def compute_once(
    client: redis.Redis,
    key: str,
    fn: Callable[[], Any],
    *,
    ttl: float,
    lock_timeout: float = 10.0,
    timeout: float | None = None,
    codec: Codec = JSON,
    namespace: str = NAMESPACE,
    clock: Clock | None = None,
    logger: Any = None,
    redis_retry: retry.RetryPolicy | None = None,
) -> Any:
    """The cached value of ``key``, computed by ``fn()`` in one process if missing.

    :param ttl: seconds the computed value stays cached.
    :param lock_timeout: the computing process's lock ttl, renewed while ``fn`` runs:
        how long after that process dies another one takes over.
    :param timeout: seconds to wait for another process's result before raising
        :class:`~lockworker.AcquireTimeout` (None: as long as it takes).
    :param codec: value serialisation, JSON by default (see the module docstring).

    Every caller gets ``codec.decode(codec.encode(value))``, the computing one too,
    so all see the same value. Exceptions from ``fn`` propagate to its caller and
    nothing is cached.
    """
    once = _Once(
        client, key, fn, ttl=ttl, lock_timeout=lock_timeout, timeout=timeout, codec=codec,
        namespace=namespace, clock=clock, logger=logger, redis_retry=redis_retry,
    )
    hit, value = once._cached()
    if hit:
        return value
    lock = _OnceLock(client, once.name, **once.lock_settings())
    hub = Waits(client)
    start = once.clock.monotonic()
    try:
        with hub.listen(once.keys.wake) as event:
            return common.drive(once._steps(lock, event, start))
    finally:
        lock.close()
        hub.close()


__all__ = ["JSON", "Codec", "JSONCodec", "OnceCore", "OnceLockSpace", "compute_once"]


class OnceLockSpace:
    """What makes a lock compute_once's, on either side: its own key space, and a
    release that publishes (the waiters for the value do not queue for the lock)."""

    space: ClassVar[Space] = Space.ONCE
    publishes_release: ClassVar[bool] = True


class _OnceLock(OnceLockSpace, Lock):
    """The computing process's lock, in compute_once's own key space."""
