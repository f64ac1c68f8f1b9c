"""``LockCore``: everything a ``Lock`` is and decides, but its I/O.

The settings, the state, the acquire loop (a generator yielding its calls to Redis) and
every decision of :class:`lockworker.primitives.lock.Lock` (which makes those calls on
a ``redis.Redis`` client) and :class:`lockworker.aio.lock.Lock` (which awaits them on a
``redis.asyncio`` one). See :mod:`lockworker.primitives.lock` for the lock itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar, Generic, TypeVar

from lockworker.clock import Clock
from lockworker.config import local_durability
from lockworker.errors import AcquireTimeout, LockLost, NotHeld
from lockworker.model.codec import Holder, LockValue, new_run
from lockworker.model.keys import Space
from lockworker.model.state import Grant, Settle, Snapshot
from lockworker.primitives import common, lockqueue, lockwait
from lockworker.runtime import events, retry
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
        self._pipelines = lockwait.pipelines(client)
        self._trips = common.round_trips(client)

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
        start = self.clock.monotonic()
        return Holder(self._base, new_run()), start, None if wait is None else start + wait

    def _acquire_steps(
        self, who: Holder, blocking: bool, start: float, deadline: float | None
    ) -> common.Steps[bool]:
        """The acquire loop: True once granted, False if not (one try, or the deadline).

        The first look queues a blocking caller at once; for a lock its last
        acquisition here found held, the wait goes out behind it in the same round
        trip (:mod:`~lockworker.primitives.lockwait`). Whoever drives the loop leaves
        the queue if it ends without the lock.
        """
        sent = bound = start
        end = self._trips.end(deadline)  # waits stop here: the deadline less the way back
        call, paired = self._looking(who, blocking, sent, end)
        reply = yield call
        seen, pushed, waited = self._seen(reply, paired, sent)
        if self._pipelines:
            lockwait.note(self.client, self.keys.lock, not isinstance(seen, Grant))
        while True:
            if isinstance(seen, Grant):
                # A grant found by a look (not pushed) may date from any time after the
                # previous look: count the lease from that one.
                self._granted(who.value(seen.token, seen.attempt),
                              bound if seen.reentered else sent)
                return True
            if pushed is not None:  # pushed after the look sent at ``sent``, to us only
                self._granted(who.value(*pushed), sent)
                return True
            bound = sent
            now = self.clock.monotonic()
            if not blocking:
                return False
            end = self._trips.end(deadline)  # with the round trip just measured
            if end is not None and now >= end:
                self._log.debug(common.TIMED_OUT, waited=now - start)
                return False
            if not waited:
                pause = lockqueue.pause_for(seen, now, end, self._slice)
                pushed = yield partial(self._await_grant, who, pause, end)
                if pushed is not None:
                    self._granted(who.value(*pushed), bound)
                    return True
                if end is not None and now + pause >= end:  # how late its answer came
                    self._trips.measured(end, self.clock.monotonic())
            sent = self.clock.monotonic()
            if end is not None and sent >= end:  # a look now would end past the deadline
                self._log.debug(common.TIMED_OUT, waited=sent - start)
                return False
            call, paired = self._looking(who, True, sent, end)
            reply = yield call
            seen, pushed, waited = self._seen(reply, paired, sent)

    def _seen(self, reply: Any, paired: bool, sent: float) -> lockwait.Looked:
        """A look's reply as (seen, pushed grant, waited); a look alone, sent at
        ``sent``, is a round trip measured for the deadline's reserve."""
        if paired:
            return reply  # type: ignore[no-any-return]
        self._trips.measured(sent, self.clock.monotonic())
        return reply, None, False

    def _looking(
        self, who: Holder, queue: bool, now: float, deadline: float | None
    ) -> tuple[Callable[[], Any], bool]:
        """The next look, and whether the wait goes with it (a queued look at a lock
        likely held: the call then answers :data:`~.lockwait.Looked`)."""
        if queue and self._pipelines and lockwait.likely_held(self.client, self.keys.lock):
            pause = self._slice if deadline is None else min(self._slice, deadline - now)
            if pause > lockqueue.MIN_WAIT:
                return partial(self._look_wait, who, pause, deadline), True
        return partial(self._look, who, deadline, queue=queue), False

    def _look(self, who: Holder, deadline: float | None, *, queue: bool) -> Any:
        """One acquire step: a grant, the holder, or seconds until the queue's head ends."""
        raise NotImplementedError

    def _look_wait(self, who: Holder, pause: float, deadline: float | None) -> Any:
        """A queued look and, behind it, a wait of ``pause`` for a grant, in one round
        trip (:func:`~lockworker.primitives.lockwait.look_and_pop`)."""
        raise NotImplementedError

    def _await_grant(self, who: Holder, pause: float, deadline: float | None) -> Any:
        """Block on this run's grant list: (token, attempt) if the lock was granted
        (:func:`~lockworker.primitives.lockqueue.pushed_grant`), else None."""
        raise NotImplementedError

    def _look_step(
        self, who: Holder, *, queue: bool, pause: float = 0.0
    ) -> common.ScriptStep[Grant | Snapshot | float]:
        return self._steps.acquire_step(
            who, self._ttl_ms, self._retention_ms, self._place_ms, queue=queue,
            pop_ms=math.ceil(pause * 1000),
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
        """End the hold (NotHeld if none); the next thread or task may acquire."""
        held, self._held = self._held, None
        if held is None:
            raise NotHeld(f"lock {self.name!r} is not held by this Lock object")
        self._unhold()
        self._turns.give()
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
