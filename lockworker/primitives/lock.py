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

:class:`LockCore` is all of that but the I/O: the settings, the state, the acquire loop
(a generator yielding its calls to Redis) and every decision. :class:`Lock` makes those
calls on a ``redis.Redis`` client; :class:`lockworker.aio.lock.Lock` awaits them on a
``redis.asyncio`` one, so the two take the same steps on the same keys and exclude and
hand over to each other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import cached_property, partial
from typing import Any, ClassVar, Generic, TypeVar

import redis

from lockworker.clock import Clock
from lockworker.config import local_durability
from lockworker.errors import AcquireTimeout, LockLost, LockworkerError, NotHeld
from lockworker.model.codec import Holder, LockValue, new_run
from lockworker.model.keys import Space
from lockworker.model.state import Grant, Settle, Snapshot
from lockworker.primitives import common, lockqueue
from lockworker.protocol import ScriptProtocol
from lockworker.runtime import events, nudge, retry
from lockworker.runtime.lease import valid_until

NAMESPACE = "locks"
MAX_ACQUISITIONS = 10**15
"""Attempt limit passed to the job protocol's acquire: never reached."""
RETENTION = 365 * 86400.0
"""Seconds the token counter outlives the last use, so fencing tokens never repeat."""
NO_WAIT = ("a release hands the lock to the next waiter, which writes nothing WAIT could "
           "count; for a lock that outlives a failover use Redlock (docs/guarantees.md)")

C = TypeVar("C")


class LockCore(common.Primitive, Generic[C]):
    """What a lock is and decides, for a client of either kind (``C``). Subclasses
    supply the I/O (:meth:`_look`, :meth:`_await_grant`, :meth:`_renewer`): the sync
    ones return their result, the asyncio ones a coroutine."""

    space = Space.LOCK
    log_name = events.LOCK
    label = "lock"
    publishes_release: ClassVar[bool] = False
    """Publish on the wake channel when a release frees the lock (nobody queued): only
    for waiters that do not queue, such as compute_once's waiters for its value."""
    client: C

    def __init__(
        self,
        client: C,
        name: str,
        *,
        ttl: float = 10.0,
        auto_renew: bool = False,
        timeout: float | None = None,
        namespace: str = NAMESPACE,
        clock: Clock | None = None,
        logger: Any = None,
        redis_retry: retry.RetryPolicy | None = None,
        durability: str = "local",
    ) -> None:
        self._configure(
            client, name, namespace=namespace, ttl=ttl, auto_renew=auto_renew,
            timeout=timeout, clock=clock, logger=logger, redis_retry=redis_retry,
        )
        self.durability = local_durability(durability, "Lock", NO_WAIT)
        self.client = client
        self._steps = lockqueue.LockSteps(client, self.keys, publish=self.publishes_release)
        self._retention_ms = round(RETENTION * 1000)
        self._held: LockValue | None = None
        self._token: int | None = None
        self._slice = lockqueue.wait_slice(client, self.ttl)
        self._place_ms = lockqueue.place_ms(self._slice)

    # -- state -----------------------------------------------------------------------

    @property
    def token(self) -> int | None:
        """The fencing token of the current acquisition, or of the last one.

        None until this object first acquires the lock; after :meth:`release` (or a
        loss) it stays the token of the hold that ended, for logs and audits, until the
        next acquisition replaces it. Check :attr:`held` to know whether it is current.

        It grows with every acquisition of this name by anyone, so a resource that
        remembers the highest token it has seen can refuse a stale holder's writes.
        """
        return self._token

    @property
    def held(self) -> bool:
        """True between a successful :meth:`acquire` and :meth:`release` (local view)."""
        return self._held is not None

    @property
    def lost(self) -> bool:
        """True if this object acquired the lock but can no longer trust it.

        Judged by the local clock (TTL since the last grant or renewal, minus a drift
        allowance) or by a failed renewal; no Redis call.
        """
        return self._held is not None and self._lost()

    def _holding(self) -> dict[str, Any] | None:
        held = self._held
        return None if held is None else {"token": held.token}

    def _holds_value(self, raw: Any) -> bool:
        """Whether ``raw``, the lock key's value, is this object's hold."""
        held = self._held
        if held is None:
            return False
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        return bool(raw == held.encode())

    # -- acquire ---------------------------------------------------------------------

    def _begin(
        self, blocking: object, timeout: object
    ) -> tuple[Holder, float, float | None]:
        """Check an acquisition's arguments; its holder, start and deadline."""
        _, wait = common.check_acquire(blocking, timeout)
        if wait is None:
            wait = self.timeout
        if self._held is not None:
            raise common.AlreadyHeld(f"lock {self.name!r} is already held by this Lock object")
        start = self.clock.monotonic()
        return Holder(self._base, new_run()), start, None if wait is None else start + wait

    def _acquire_steps(
        self, who: Holder, blocking: bool, start: float, deadline: float | None
    ) -> common.Steps[bool]:
        """The acquire loop: True once granted, False if not (one try, or the deadline).

        The first look queues a blocking caller at once: under contention a waiter
        needs one round trip before it blocks for its grant. Whoever drives the loop
        leaves the queue if it ends without the lock.
        """
        sent = start
        seen = yield partial(self._look, who, deadline, queue=blocking)
        bound = sent
        while True:
            if isinstance(seen, Grant):
                # A grant found by a look (not pushed) may date from any time after the
                # previous look: count the lease from that one.
                self._granted(who.value(seen.token, seen.attempt),
                              bound if seen.reentered else sent)
                return True
            bound = sent
            now = self.clock.monotonic()
            if not blocking:
                return False
            if deadline is not None and now >= deadline:
                self._log.debug(common.TIMED_OUT, waited=now - start)
                return False
            pause = lockqueue.pause_for(seen, now, deadline, self._slice)
            pushed = yield partial(self._await_grant, who, pause, deadline)
            if pushed is not None:
                # Granted after our last look (the push went to this run only).
                self._granted(who.value(*pushed), bound)
                return True
            sent = self.clock.monotonic()
            seen = yield partial(self._look, who, deadline, queue=True)

    def _look(self, who: Holder, deadline: float | None, *, queue: bool) -> Any:
        """One acquire step: a grant, the holder, or seconds until the queue's head ends."""
        raise NotImplementedError

    def _await_grant(self, who: Holder, pause: float, deadline: float | None) -> Any:
        """Block on this run's grant list: (token, attempt) if the lock was granted
        (:func:`~lockworker.primitives.lockqueue.pushed_grant`), else None."""
        raise NotImplementedError

    def _look_step(
        self, who: Holder, *, queue: bool
    ) -> common.ScriptStep[Grant | Snapshot | float]:
        return self._steps.acquire_step(
            who, self._ttl_ms, self._retention_ms, self._place_ms, queue=queue
        )

    def _granted(self, held: LockValue, sent: float) -> None:
        self._held, self._token = held, held.token
        renew = self._renewer(held) if self.auto_renew else None
        self._hold(valid_until(sent, self.ttl), sent + self.ttl / 3, renew, token=held.token)
        self._log.debug(common.ACQUIRED, token=held.token, owner=held.owner)

    def _renewer(self, held: LockValue) -> Callable[[float], Any]:
        """``renew(deadline)`` of ``held`` for the heartbeat: True if still held."""
        raise NotImplementedError

    # -- release and extend ----------------------------------------------------------

    def _take_held(self) -> LockValue:
        held, self._held = self._held, None
        if held is None:
            raise NotHeld(f"lock {self.name!r} is not held by this Lock object")
        self._unhold()
        return held

    def _released(self, held: LockValue, result: Settle) -> None:
        """Report a release step's answer; LockLost if the lock had expired."""
        if result.refused:
            self._log.warning(common.LOST, token=held.token, reason="expired before release")
            raise LockLost(
                f"lock {self.name!r} expired or was taken over before it was released "
                f"(token {held.token}); the critical section may not have been exclusive",
                key=self.keys.lock,
                token=held.token,
            )
        self._log.debug(common.RELEASED, token=held.token)

    def _extension(self, ttl: float | None) -> tuple[LockValue, float, int]:
        """What an extend asks for: the hold, seconds and milliseconds."""
        held = self._held
        if held is None:
            raise NotHeld(f"lock {self.name!r} is not held by this Lock object")
        seconds = self.ttl if ttl is None else common.lease(ttl, "ttl")
        return held, seconds, max(1, round(seconds * 1000))

    def _extended(self, held: LockValue, ok: bool, sent: float, seconds: float) -> None:
        """Apply an extend's answer: trusted anew from ``sent``, or lost (LockLost)."""
        if not ok:
            self._take_held()
            self._log.warning(common.LOST, token=held.token, reason="expired before extend")
            raise LockLost(
                f"lock {self.name!r} expired or was taken over before it was extended",
                key=self.keys.lock,
                token=held.token,
            )
        self._valid_until = valid_until(sent, seconds)
        self._log.debug(common.EXTENDED, token=held.token, ttl=seconds)

    def _timed_out(self) -> AcquireTimeout:
        return AcquireTimeout(f"could not acquire lock {self.name!r} within {self.timeout} s")

    def close(self) -> None:
        """Stop renewing. Does not release the lock; call :meth:`release` first."""
        self._unhold()

    def __repr__(self) -> str:
        return f"<Lock {self.name!r} namespace={self.keys.namespace!r} token={self.token}>"


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

    One ``Lock`` object is one holder; it is not re-entrant (acquiring it again while
    holding it raises :class:`~lockworker.primitives.common.AlreadyHeld`). Use one
    object per thread or process that competes.
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
        who, start, deadline = self._begin(blocking, timeout)
        granted = False
        try:
            granted = common.drive(self._acquire_steps(who, blocking, start, deadline))
            return granted
        finally:
            if blocking and not granted:
                self._leave(who)

    def _look(
        self, who: Holder, deadline: float | None, *, queue: bool
    ) -> Grant | Snapshot | float:
        step = self._look_step(who, queue=queue)
        return self._call(lambda: self._steps.run(step), "acquire the lock", deadline=deadline)

    def _await_grant(
        self, who: Holder, pause: float, deadline: float | None
    ) -> tuple[int, int] | None:
        key, client = self._steps.grant_key(who), self.client
        timeout, nudge_at = nudge.pop(pause, self.clock.monotonic(), deadline, lockqueue.MIN_WAIT)
        nudging = (contextlib.nullcontext() if nudge_at is None
                   else nudge.Nudger(self.clock, lambda: client.exists(key), nudge_at))
        with nudging:
            reply = self._call(
                lambda: self.client.blpop([key], timeout=timeout), "wait for the lock",
                deadline=deadline,
            )
        return lockqueue.pushed_grant(key, reply)

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
