"""``Lock``: the SET NX + token + TTL recipe as a proper lock, with a fencing token.

The lock and its token counter are the job protocol's values (:mod:`lockworker.model.codec`),
so a lock named ``report`` in namespace ``locks`` uses::

    lw:lock:locks:{report}:lock    holder's value lw2|<token>|<n>|<run>|<owner>, with the TTL
    lw:lock:locks:{report}:state   the fencing-token counter (kept a year after last use)

and the waiters' queue (:mod:`lockworker.primitives.lockqueue`). Every acquisition has a
run id of its own, so only a retry of that same acquisition (whose reply was lost) can
re-enter it.

Each step is one Lua script, one round trip: acquire (take it if free and nobody is
queued ahead, else join the queue), release (compare the caller's exact value, then
grant the lock to the first live waiter or free it; never GET then DEL) and extend. A
waiter blocks on its own grant list until a release grants it the lock or, if the holder
died, until the lock's PTTL runs out on this process's clock; nobody else wakes.

Whether this process still holds the lock is judged by its own monotonic clock, taken
before the request that granted or extended it (:mod:`lockworker.runtime.lease`). A lock that
expired is *lost*: ``release``/``extend`` then raise :class:`~lockworker.LockLost`
rather than report success, so the caller learns its critical section was not exclusive.

:class:`~lockworker.primitives.lockcore.LockCore` is all of that but the I/O: the
settings, the state, the acquire loop (a generator yielding its calls to Redis) and
every decision. :class:`Lock` makes those calls on a ``redis.Redis`` client;
:class:`lockworker.aio.lock.Lock` awaits them on a ``redis.asyncio`` one, so the two take
the same steps on the same keys and exclude and hand over to each other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import cached_property
from typing import Any

import redis

from lockworker.errors import LockworkerError
from lockworker.model.codec import Holder, LockValue
from lockworker.model.state import Grant, Snapshot
from lockworker.primitives import common, lockqueue, lockwait
from lockworker.primitives.lockcore import (
    MAX_ACQUISITIONS,
    NAMESPACE,
    NO_WAIT,
    RETENTION,
    LockCore,
)
from lockworker.protocol import ScriptProtocol
from lockworker.runtime import nudge

__all__ = ["MAX_ACQUISITIONS", "NAMESPACE", "NO_WAIT", "RETENTION", "Lock", "LockCore"]


class Lock(LockCore[redis.Redis]):
    """A distributed mutual-exclusion lock on one Redis server, with a fencing token.

    :param client: a ``redis.Redis`` client (``decode_responses`` either way).
    :param name: the lock's name; every ``Lock`` with the same name and namespace
        excludes the others.
    :param ttl: seconds the lock lives unless released or extended: how long a crashed
        holder blocks the others.
    :param auto_renew: renew the lock every ``ttl / 3`` in a background thread while it
        is held; renewal stops at release, or when it fails (the lock is then lost).
    :param timeout: default for :meth:`acquire` and ``with``: seconds to wait, None for
        ever. ``durability``: ``"local"`` only (:data:`NO_WAIT` says why).

    The lock passes in order of arrival: waiters queue, and a release grants the lock
    to the first live one directly (:mod:`lockworker.primitives.lockqueue`), which
    learns it holds it without asking again. Each waiting thread blocks on a
    connection of its own from the client's pool.

    One ``Lock`` object is one holder and not re-entrant: the thread holding it that
    acquires it again gets :class:`~lockworker.AlreadyHeld`. Threads sharing one
    object take turns, as with a ``threading.Lock``: another thread's acquire waits
    (within its timeout) until the hold ends, then acquires with a run and token of
    its own (:mod:`lockworker.primitives.turns`).
    """

    @cached_property
    def protocol(self) -> ScriptProtocol:
        return ScriptProtocol(self.client)

    def locked(self) -> bool:
        """True if anyone holds the lock now (one Redis call)."""
        return bool(self._call(lambda: self.client.exists(self.keys.lock), "read the lock"))

    def owned(self) -> bool:
        """True if this object holds the lock now, as Redis sees it (one Redis call)."""
        if self._held is None:
            return False
        raw = self._call(lambda: self.client.get(self.keys.lock), "read the lock")
        return self._holds_value(raw)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take the lock; True if taken, False if not within ``timeout``.

        :param blocking: False: one try, no waiting (and no place in the queue).
        :param timeout: seconds to wait (None: the ``timeout`` given to the constructor,
            which is None, for ever, by default).
        """
        who, _, deadline = self._begin(blocking, timeout)
        if not self._turns.take(self.clock, blocking, deadline):
            return False  # another thread of this object kept it until the deadline
        granted = False
        try:
            start = self.clock.monotonic()
            granted = common.drive(self._acquire_steps(who, blocking, start, deadline))
            return granted
        finally:
            if not granted:
                try:
                    if blocking:
                        self._leave(who)
                finally:
                    self._turns.give()

    def _look(
        self, who: Holder, deadline: float | None, *, queue: bool
    ) -> Grant | Snapshot | float:
        step = self._look_step(who, queue=queue)
        return self._call(lambda: self._steps.run(step), "acquire the lock", deadline=deadline)

    def _look_wait(self, who: Holder, pause: float, deadline: float | None) -> lockwait.Looked:
        step = self._look_step(who, queue=True, pause=pause)
        key = self._steps.grant_key(who)
        timeout, nudging = self._nudging(key, pause, deadline)
        with nudging:
            return self._call(
                lambda: lockwait.look_and_pop(self._steps, step, key, timeout),
                "acquire the lock", deadline=deadline,
            )

    def _await_grant(
        self, who: Holder, pause: float, deadline: float | None
    ) -> tuple[int, int] | None:
        key = self._steps.grant_key(who)
        timeout, nudging = self._nudging(key, pause, deadline)
        with nudging:
            reply = self._call(
                lambda: self.client.blpop([key], timeout=timeout), "wait for the lock",
                deadline=deadline,
            )
        return lockqueue.pushed_grant(key, reply)

    def _nudging(
        self, key: str, pause: float, deadline: float | None
    ) -> tuple[float, contextlib.AbstractContextManager[Any]]:
        """A pop of ``pause`` as its server timeout, and what nudges it at ``deadline``."""
        client = self.client
        timeout, at = nudge.pop(pause, self.clock.monotonic(), deadline, lockqueue.MIN_WAIT)
        if at is None:
            return timeout, contextlib.nullcontext()
        return timeout, nudge.Nudger(self.clock, lambda: client.exists(key), at)

    def _leave(self, who: Holder) -> None:
        # Give our place in the queue up (even on KeyboardInterrupt), so nobody waits
        # behind it, and pass on a grant that came too late; if Redis is unreachable
        # the place expires anyway.
        step = self._steps.leave_step(who, self._retention_ms)
        with contextlib.suppress(LockworkerError, redis.RedisError):
            self._call(lambda: self._steps.run(step), "leave the queue")

    def _renewer(self, held: LockValue) -> Callable[[float], bool]:
        # Closes over what renewing needs, not over self: the heartbeat must not keep
        # a dropped Lock alive (its collection stops the renewal, see Primitive.__del__).
        call, protocol, keys = self._call, self.protocol, self.keys
        ttl_ms, retention_ms = self._ttl_ms, self._retention_ms

        def renew(deadline: float) -> bool:
            step = lambda: protocol.renew(keys, held, ttl_ms, retention_ms)  # noqa: E731
            return bool(call(step, "renew the lock", deadline=deadline))

        return renew

    def release(self) -> None:
        """Release the lock, granting it at once to the first process in the queue.

        Raises :class:`~lockworker.NotHeld` if this object does not hold it, and
        :class:`~lockworker.LockLost` if it had expired (or was taken over) before the
        release: another process may have held it meanwhile. Either way this object
        no longer holds it afterwards.
        """
        held = self._take_held()
        step = self._steps.release_step(held, self._retention_ms)
        self._released(held, self._call(lambda: self._steps.run(step), "release the lock"))

    def extend(self, ttl: float | None = None) -> None:
        """Reset the lock's remaining time to ``ttl`` seconds (default: the lock's ttl).

        Atomic compare-and-set: only the holder's exact value is extended. Raises
        :class:`~lockworker.NotHeld` if not held by this object and
        :class:`~lockworker.LockLost` if it had already expired (then it is no longer
        held). With ``auto_renew`` the heartbeat keeps renewing to the lock's ``ttl``.
        """
        held, seconds, ms = self._extension(ttl)
        sent = self.clock.monotonic()
        ok = self._call(
            lambda: self.protocol.renew(self.keys, held, ms, self._retention_ms),
            "extend the lock",
        )
        self._extended(held, bool(ok), sent, seconds)

    def __enter__(self) -> Lock:
        if not self.acquire(blocking=True, timeout=self.timeout):
            raise self._timed_out()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
