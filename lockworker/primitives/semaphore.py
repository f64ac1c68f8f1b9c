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
heartbeat stopped (the process died) expires after ``ttl`` and is purged by the next
script to run, which wakes the queue. A release of a permit never held is refused
(:class:`~lockworker.NotHeld` when this object holds none, :class:`~lockworker.LockLost`
when its permit had already expired).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from typing import Any, TypeVar

import redis
from redis.commands.core import Script

from lockworker.clock import Clock
from lockworker.errors import AcquireTimeout, InvalidConfig, LockLost, LockworkerError, NotHeld
from lockworker.model.keys import Space
from lockworker.primitives import common, lua
from lockworker.protocol import text
from lockworker.runtime import events, retry
from lockworker.runtime.lease import valid_until
from lockworker.runtime.wake import Waits

NAMESPACE = "semaphores"
ACQUIRED = "semaphore.acquired"
RELEASED = "semaphore.released"
LOST = "semaphore.lost"
MIN_WAIT = 0.001

T = TypeVar("T")


class Semaphore(common.Primitive):
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

    One ``Semaphore`` object holds at most one permit; use one object per holder.
    """

    space = Space.SEMAPHORE
    log_name = events.SEMAPHORE
    label = "semaphore"

    def __init__(
        self,
        client: redis.Redis,
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
        self.limit = int(common.positive(limit, "limit", integer=True))
        self._acquire: Script = client.register_script(lua.SEM_ACQUIRE)
        self._renew: Script = client.register_script(lua.SEM_RENEW)
        self._leave: Script = client.register_script(lua.SEM_LEAVE)
        self._zsets = [self.keys.extra(k) for k in ("holders", "queue", "waiting")]
        self._all_keys = [*self._zsets, self.keys.extra("tickets"), self.keys.extra("limit")]
        self._held: str | None = None
        self._hub = Waits(client)

    @property
    def held(self) -> bool:
        """True between a successful :meth:`acquire` and :meth:`release` (local view)."""
        return self._held is not None

    @property
    def lost(self) -> bool:
        """True if this object holds a permit it can no longer trust (local clock)."""
        return self._held is not None and self._lost()

    def holders(self) -> int:
        """How many permits are taken now (including any not yet purged after expiry)."""
        return int(self._call(lambda: self.client.zcard(self._zsets[0]), "read holders"))

    # -- acquire ---------------------------------------------------------------------

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take a permit; True if taken, False if not within ``timeout``.

        ``blocking=False`` takes a free permit only if nobody is queued (it never jumps
        the queue). ``timeout`` None means the constructor's ``timeout``.
        """
        common.check_bool(blocking, "blocking")
        wait = common.check_timeout(timeout)
        if wait is None:
            wait = self.timeout
        if self._held is not None:
            raise common.AlreadyHeld(f"semaphore {self.name!r} is already held by this object")
        member = f"{self._base}:{uuid.uuid4().hex[:12]}"
        start = self.clock.monotonic()
        if not blocking:
            return self._step(member, queue=False, deadline=None) is None
        deadline = None if wait is None else start + wait
        granted = False
        try:
            with self._hub.listen(self.keys.wake) as event:
                while True:
                    event.clear()
                    left = self._step(member, queue=True, deadline=deadline)
                    if left is None:
                        granted = True
                        return True
                    now = self.clock.monotonic()
                    if deadline is not None and now >= deadline:
                        return False
                    # Wake on a release, when the first holder's permit would expire, or
                    # in time to refresh this waiter's own place in the queue.
                    pause = min(self.ttl / 3, left + MIN_WAIT if left >= 0 else self.ttl / 3)
                    if deadline is not None:
                        pause = min(pause, deadline - now)
                    self.clock.wait(event, max(MIN_WAIT, pause))
        finally:
            if not granted:
                # Leave the queue (even on KeyboardInterrupt), so nobody waits behind us.
                # If Redis is unreachable the entry expires after ttl anyway; do not let
                # that hide the error already on its way out.
                with contextlib.suppress(LockworkerError, redis.RedisError):
                    self._call(
                        lambda: self._run(self._leave, (member, self.keys.wake)), "leave"
                    )

    def _run(self, script: Script, args: Sequence[str | int]) -> Any:
        keys = self._all_keys if script is self._acquire else self._zsets
        return script(keys=keys, args=list(args), client=self.client)

    def _step(self, member: str, *, queue: bool, deadline: float | None) -> float | None:
        """One acquire step: None if granted, else seconds until the first permit expires."""
        sent = self.clock.monotonic()
        reply = self._call(
            lambda: self._run(
                self._acquire,
                (member, self.limit, self._ttl_ms, self._ttl_ms, self.keys.wake,
                 "1" if queue else "0"),
            ),
            "acquire a permit",
            deadline=deadline,
        )
        kind = text(reply[0])
        if kind == "granted":
            self._granted(member, sent)
            return None
        if kind == "limit":
            raise InvalidConfig(
                f"limit={self.limit} but semaphore {self.name!r} exists with "
                f"limit={text(reply[1])}; every process must pass the same limit"
            )
        if kind == "busy":
            return -1.0
        return int(reply[2]) / 1000.0

    def _granted(self, member: str, sent: float) -> None:
        self._held = member
        renew = None
        if self.auto_renew:
            def renew(deadline: float) -> bool:
                return bool(
                    self._call(
                        lambda: int(self._run(self._renew, (member, self._ttl_ms))) == 1,
                        "renew a permit",
                        deadline=deadline,
                    )
                )
        self._hold(valid_until(sent, self.ttl), sent + self.ttl / 3, renew, holder=member)
        self._log.debug(ACQUIRED, holder=member)

    # -- release ---------------------------------------------------------------------

    def release(self) -> None:
        """Give the permit back and wake the queue.

        Raises :class:`~lockworker.NotHeld` if this object holds no permit (a release
        without an acquire never creates one) and :class:`~lockworker.LockLost` if the
        permit had expired before the release (another holder may have used it).
        """
        member, self._held = self._held, None
        if member is None:
            raise NotHeld(f"semaphore {self.name!r}: release without a held permit")
        self._unhold()
        removed = self._call(lambda: self._run(self._leave, (member, self.keys.wake)), "release")
        if int(removed) != 1:
            self._log.warning(LOST, holder=member, reason="expired before release")
            raise LockLost(
                f"semaphore {self.name!r}: the permit expired before it was released",
                key=self._zsets[0],
            )
        self._log.debug(RELEASED, holder=member)

    def close(self) -> None:
        """Wake this object's waits (does not release; the shared hub stays)."""
        self._hub.close()

    def __enter__(self) -> Semaphore:
        if not self.acquire(timeout=self.timeout):
            raise AcquireTimeout(
                f"no permit of semaphore {self.name!r} within {self.timeout} s"
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<Semaphore {self.name!r} limit={self.limit} held={self.held}>"


