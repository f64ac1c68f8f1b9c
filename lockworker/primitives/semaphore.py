"""``Semaphore``: a fair blocking semaphore whose dead holders' permits come back.

The recipe it fixes keeps a list of permit tokens and BLPOPs it: a holder that dies
never pushes its token back (the permit is lost for good), a release without an
acquire pushes a new one (a permit created from nothing), and two processes that
initialise the list at once create ``2 * limit`` permits. Here no permit is ever
stored. For semaphore ``pool`` in namespace ``semaphores``::

    lw:semaphore:semaphores:{pool}:holders   zset: holder id -> expiry (server ms)
    lw:semaphore:semaphores:{pool}:queue     zset: waiter id -> ticket (arrival order)
    lw:semaphore:semaphores:{pool}:waiting   zset: waiter id -> expiry (server ms)
    lw:semaphore:semaphores:{pool}:tickets   the ticket counter
    lw:semaphore:semaphores:{pool}:limit     the limit, set once by whoever comes first
    lw:semaphore:semaphores:{pool}:wake      pub/sub channel: a permit came back

Free permits are ``limit - |holders|``, computed inside one script, so initialisation
needs no step of its own and cannot race. A waiter takes a ticket and gets a permit
only when fewer waiters are ahead of it than permits are free: first come, first
served. Holders and waiters keep their entries alive with a heartbeat; an entry whose
heartbeat stopped (the process died) expires and is purged by the next script to run,
which wakes the queue: a holder's after ``ttl``, a waiter's after one waiter heartbeat
(``min(ttl / 3, 1 s)``) and a margin, so a dead waiter does not hold the queue up long.
A release of a permit never held is refused (:class:`~lockworker.NotHeld` when this
object holds none, :class:`~lockworker.LockLost` when its permit had already expired).

:class:`SemaphoreCore` is the semaphore without its I/O (settings, state, the steps,
the acquire loop as a generator, every decision); :class:`Semaphore` runs it on a
``redis.Redis`` client and :class:`lockworker.aio.semaphore.Semaphore` on a
``redis.asyncio`` one, so sync and asyncio holders share one limit.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from functools import cached_property, partial
from typing import Any, Generic, TypeVar

import redis

from lockworker.clock import Clock
from lockworker.errors import AcquireTimeout, InvalidConfig, LockLost, LockworkerError, NotHeld
from lockworker.model.keys import Space
from lockworker.primitives import common, lockqueue, lua
from lockworker.protocol import text
from lockworker.protocol.luacall import LuaScript
from lockworker.runtime import events, retry
from lockworker.runtime.lease import valid_until
from lockworker.runtime.wake import Waits

NAMESPACE = "semaphores"
ACQUIRED = "semaphore.acquired"
RELEASED = "semaphore.released"
LOST = "semaphore.lost"
DROPPED = "semaphore.dropped"
MIN_WAIT = 0.001

SEM_ACQUIRE = LuaScript(lua.SEM_ACQUIRE)
SEM_RENEW = LuaScript(lua.SEM_RENEW)
SEM_LEAVE = LuaScript(lua.SEM_LEAVE)

C = TypeVar("C")


class SemaphoreCore(common.Primitive, Generic[C]):
    """What a semaphore is and decides, for a client of either kind (``C``). Subclasses
    supply the I/O (:meth:`_ask`, :meth:`_wait`, :meth:`_renewer`): the sync ones
    return their result, the asyncio ones a coroutine."""

    space = Space.SEMAPHORE
    log_name = events.SEMAPHORE
    label = "semaphore"
    dropped_event = DROPPED
    shares = False  # one permit per object: a second thread (task) is refused
    client: C

    def __init__(
        self,
        client: C,
        name: str,
        limit: int,
        *,
        ttl: float = 10.0,
        auto_renew: bool = True,
        timeout: float | None = None,
        namespace: str = NAMESPACE,
        clock: Clock | None = None,
        logger: Any = None,
        redis_retry: retry.RetryPolicy | None = None,
    ) -> None:
        self._configure(
            client, name, namespace=namespace, ttl=ttl, auto_renew=auto_renew,
            timeout=timeout, clock=clock, logger=logger, redis_retry=redis_retry,
        )
        self.client = client
        self.limit = int(common.positive(limit, "limit", integer=True))
        self._zsets = [self.keys.extra(k) for k in ("holders", "queue", "waiting")]
        self._all_keys = [*self._zsets, self.keys.extra("tickets"), self.keys.extra("limit")]
        self._held: str | None = None
        self._heartbeat_every = min(lockqueue.SLICE, self.ttl / 3)
        """A waiter looks again at least this often, which keeps its place alive."""
        self._place_ms = lockqueue.place_ms(self._heartbeat_every)
        self._trips = common.round_trips(client)

    @property
    def held(self) -> bool:
        """True between a successful :meth:`acquire` and :meth:`release` (local view)."""
        return self._held is not None

    def _holding(self) -> dict[str, Any] | None:
        return None if self._held is None else {"holder": self._held}

    @property
    def lost(self) -> bool:
        """True if this object holds a permit it can no longer trust (local clock)."""
        return self._held is not None and self._lost()

    # -- acquire ---------------------------------------------------------------------

    def _begin(self, blocking: object, timeout: object) -> tuple[str, float | None]:
        """Check an acquisition's arguments; its member id and deadline."""
        _, wait = common.check_acquire(blocking, timeout)
        if wait is None:
            wait = self.timeout
        start = self.clock.monotonic()
        member = f"{self._base}:{uuid.uuid4().hex[:12]}"
        return member, None if wait is None or not blocking else start + wait

    def _acquire_steps(
        self, member: str, deadline: float | None, event: Any = None
    ) -> common.Steps[bool]:
        """The acquire loop: True once a permit is held, False if not (one try, without
        ``event``; else by the deadline). ``event`` is set by a wake message."""
        end = self._trips.end(deadline)  # waits stop here: the deadline less the way back
        while True:
            if event is not None:
                event.clear()
            sent = self.clock.monotonic()
            left = yield partial(self._ask, member, event is not None, deadline)
            now = self.clock.monotonic()
            self._trips.measured(sent, now)
            if left is None:
                self._granted(member, sent)
                return True
            if event is None or (end is not None and now >= end):
                return False
            # Wake on a release, when the first holder's permit (or waiter's place)
            # would expire, or in time to refresh this waiter's own place in the queue.
            beat = self._heartbeat_every
            pause = min(beat, left + MIN_WAIT if left >= 0 else beat)
            if end is not None:
                pause = min(pause, end - now)
            yield partial(self._wait, event, max(MIN_WAIT, pause))
            if end is not None and self.clock.monotonic() >= end:
                return False  # an ask now would end past the deadline

    def _ask(self, member: str, queue: bool, deadline: float | None) -> Any:
        """One acquire step (:meth:`_acquire_step`)."""
        raise NotImplementedError

    def _wait(self, event: Any, pause: float) -> Any:
        """Until ``event`` is set or ``pause`` seconds passed."""
        raise NotImplementedError

    def _acquire_step(self, member: str, *, queue: bool) -> common.ScriptStep[float | None]:
        """None if granted, else seconds until the first permit expires (-1: unknown)."""
        args = (member, self.limit, self._ttl_ms, self._place_ms, self.keys.wake,
                "1" if queue else "0")
        return common.ScriptStep(SEM_ACQUIRE, self._all_keys, args, self._left)

    def _left(self, reply: Any) -> float | None:
        kind = text(reply[0])
        if kind == "granted":
            return None
        if kind == "limit":
            raise InvalidConfig(
                f"limit={self.limit} but semaphore {self.name!r} exists with "
                f"limit={text(reply[1])}; every process must pass the same limit"
            )
        if kind == "busy":
            return -1.0
        return int(reply[2]) / 1000.0

    def _renew_step(self, member: str) -> common.ScriptStep[bool]:
        return common.ScriptStep(
            SEM_RENEW, self._zsets, (member, self._ttl_ms), lambda reply: int(reply) == 1
        )

    def _leave_step(self, member: str) -> common.ScriptStep[int]:
        """Give the permit back, or leave the queue: 1 if a permit was given back."""
        return common.ScriptStep(SEM_LEAVE, self._zsets, (member, self.keys.wake), int)

    def _granted(self, member: str, sent: float) -> None:
        self._held = member
        renew = self._renewer(member) if self.auto_renew else None
        self._hold(valid_until(sent, self.ttl), sent + self.ttl / 3, renew, holder=member)
        self._log.debug(ACQUIRED, holder=member)

    def _renewer(self, member: str) -> Callable[[float], Any]:
        """``renew(deadline)`` of ``member``'s permit for the heartbeat."""
        raise NotImplementedError

    # -- release ---------------------------------------------------------------------

    def _take_held(self) -> str:
        member, self._held = self._held, None
        if member is None:
            raise NotHeld(f"semaphore {self.name!r}: release without a held permit")
        self._unhold()
        self._turns.give()
        return member

    def _released(self, member: str, removed: int) -> None:
        """Report a release's answer; LockLost if the permit had expired."""
        if removed != 1:
            self._log.warning(LOST, holder=member, reason="expired before release")
            raise LockLost(
                f"semaphore {self.name!r}: the permit expired before it was released",
                key=self._zsets[0],
            )
        self._log.debug(RELEASED, holder=member)

    def _timed_out(self) -> AcquireTimeout:
        return AcquireTimeout(f"no permit of semaphore {self.name!r} within {self.timeout} s")

    def __repr__(self) -> str:
        return f"<Semaphore {self.name!r} limit={self.limit} held={self.held}>"


class Semaphore(SemaphoreCore[redis.Redis]):
    """At most ``limit`` holders at once across processes; waiters served in arrival order.

    :param client: a ``redis.Redis`` client.
    :param name: the semaphore's name.
    :param limit: permits; every process must pass the same value (the first one to
        use the name fixes it; a different value raises
        :class:`~lockworker.InvalidConfig`). ``limit=1`` is a mutex.
    :param ttl: seconds after which a dead holder's (or dead waiter's) entry expires.
    :param auto_renew: renew the permit every ``ttl / 3`` while held (default True:
        a live holder keeps its permit however long it works, a dead one loses it
        after ``ttl``). With False the permit simply expires after ``ttl``.
    :param timeout: default for :meth:`acquire` and ``with`` (None: for ever).

    One ``Semaphore`` object holds at most one permit; use one object per holder. The
    thread holding it that acquires again gets :class:`~lockworker.AlreadyHeld`;
    another thread acquiring while it acquires or holds gets
    :class:`~lockworker.ConcurrentUse` (:mod:`lockworker.primitives.turns`).
    """

    @cached_property
    def _hub(self) -> Waits:
        return Waits(self.client)

    def holders(self) -> int:
        """How many permits are taken now (including any not yet purged after expiry)."""
        return int(self._call(lambda: self.client.zcard(self._zsets[0]), "read holders"))

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take a permit; True if taken, False if not within ``timeout``.

        ``blocking=False`` takes a free permit only if nobody is queued (it never jumps
        the queue). ``timeout`` None means the constructor's ``timeout``.
        """
        member, deadline = self._begin(blocking, timeout)
        self._turns.take(self.clock, blocking, deadline)  # refused if in use elsewhere
        granted = False
        try:
            if not blocking:
                granted = common.drive(self._acquire_steps(member, None))
                return granted
            with self._hub.listen(self.keys.wake) as event:
                granted = common.drive(self._acquire_steps(member, deadline, event))
                return granted
        finally:
            if not granted:
                try:
                    if blocking:
                        # Leave the queue (even on KeyboardInterrupt), so nobody waits
                        # behind us. If Redis is unreachable the entry expires after
                        # ttl anyway; do not let that hide the error on its way out.
                        step = self._leave_step(member)
                        with contextlib.suppress(LockworkerError, redis.RedisError):
                            self._call(lambda: step.run(self.client), "leave")
                finally:
                    self._turns.give()

    def _ask(self, member: str, queue: bool, deadline: float | None) -> float | None:
        step = self._acquire_step(member, queue=queue)
        return self._call(lambda: step.run(self.client), "acquire a permit", deadline=deadline)

    def _wait(self, event: Any, pause: float) -> bool:
        return self.clock.wait(event, pause)

    def _renewer(self, member: str) -> Callable[[float], bool]:
        step, call, client = self._renew_step(member), self._call, self.client  # not self

        def renew(deadline: float) -> bool:
            return call(lambda: step.run(client), "renew a permit", deadline=deadline)

        return renew

    def release(self) -> None:
        """Give the permit back and wake the queue.

        Raises :class:`~lockworker.NotHeld` if this object holds no permit (a release
        without an acquire never creates one) and :class:`~lockworker.LockLost` if the
        permit had expired before the release (another holder may have used it).
        """
        member = self._take_held()
        step = self._leave_step(member)
        self._released(member, self._call(lambda: step.run(self.client), "release"))

    def close(self) -> None:
        """Wake this object's waits (does not release; the shared hub stays)."""
        self._hub.close()

    def __enter__(self) -> Semaphore:
        if not self.acquire(timeout=self.timeout):
            raise self._timed_out()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
