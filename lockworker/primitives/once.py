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
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import redis

from lockworker.clock import Clock, SystemClock
from lockworker.errors import AcquireTimeout, LockLost
from lockworker.model.codec import to_json
from lockworker.model.keys import JobKeys, Space, check_name
from lockworker.primitives import common
from lockworker.primitives.lock import MIN_WAIT, Lock
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
    common.check_client(client)
    name = check_name(key, "key")
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {fn!r}")
    ttl_ms = max(1, round(common.positive(ttl, "ttl") * 1000))
    common.lease(lock_timeout, "lock_timeout")
    wait = common.check_timeout(timeout)
    codec = _check_codec(codec)
    clock = clock or SystemClock()
    policy = redis_retry or retry.DEFAULT
    keys = JobKeys(check_name(namespace, "namespace"), check_name(name, "name"), Space.ONCE)
    value_key = keys.extra("value")
    log = events.logger(events.ONCE, logger, key=name, namespace=keys.namespace)

    call = retry.Caller(clock, policy, log, label=f" {name!r}")

    def cached() -> tuple[bool, Any]:
        raw = call(lambda: client.get(value_key), "read the cached value")
        return (False, None) if raw is None else (True, codec.decode(raw))

    hit, value = cached()
    if hit:
        return value
    lock = _OnceLock(
        client, name, ttl=lock_timeout, auto_renew=True, namespace=keys.namespace,
        clock=clock, logger=logger, redis_retry=policy,
    )
    hub = Waits(client)
    start = clock.monotonic()
    deadline = None if wait is None else start + wait
    try:
        with hub.listen(keys.wake) as event:
            while True:
                event.clear()
                hit, value = cached()
                if hit:
                    log.debug(CACHED, waited=clock.monotonic() - start)
                    return value
                if lock.acquire(blocking=False):
                    return _compute(
                        client, lock, value_key=value_key, fn=fn, codec=codec,
                        ttl_ms=ttl_ms, log=log, cached=cached,
                    )
                now = clock.monotonic()
                if deadline is not None and now >= deadline:
                    raise AcquireTimeout(
                        f"compute_once: no value for {name!r} within {wait} s "
                        "(another process is still computing it)"
                    )
                pttl = call(lambda: int(client.pttl(lock.keys.lock)), "read the lock")
                pause = pttl / 1000.0 + MIN_WAIT if pttl > 0 else MIN_WAIT
                if deadline is not None:
                    pause = min(pause, deadline - now)
                clock.wait(event, max(MIN_WAIT, pause))
    finally:
        lock.close()
        hub.close()


def _compute(
    client: redis.Redis,
    lock: Lock,
    *,
    value_key: str,
    fn: Callable[[], Any],
    codec: Codec,
    ttl_ms: int,
    log: events.EventLog,
    cached: Callable[[], tuple[bool, Any]],
) -> Any:
    """Holding the lock: look again, compute, store and wake the waiters, release."""
    try:
        hit, value = cached()  # stored between our first look and our lock
        if hit:
            return value
        try:
            raw = codec.encode(fn())
        except BaseException as exc:
            log.debug(FAILED, error=type(exc).__name__)
            raise
        STORE(client, [value_key], [raw, ttl_ms, lock.keys.wake])
        log.debug(COMPUTED, token=lock.token)
        return codec.decode(raw)
    finally:
        # The value is stored or fn failed; a lost lock only means someone may have
        # computed it too, which the value itself does not care about.
        with contextlib.suppress(LockLost):
            lock.release()


__all__ = ["JSON", "Codec", "JSONCodec", "compute_once"]


class _OnceLock(Lock):
    """The computing process's lock, in compute_once's own key space."""

    space = Space.ONCE
    publishes_release = True  # waiters for the value learn that the computer gave up
