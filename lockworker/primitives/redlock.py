"""``Redlock``: one lock over N independent Redis masters, held while a majority agrees.

Each master runs the job-lock protocol of :mod:`lockworker.protocol` on its own keys
(the same keys a :class:`~lockworker.primitives.lock.Lock` would use there), so one
acquisition is, per master, one Lua script that takes the lock if free and counts a
token. An attempt:

1. note the local monotonic time; ask every master at once (:mod:`.masters`); one
   that fails, or has not answered while the validity could last, counts as "no";
2. with grants from a majority, take ``token = max(per-master tokens)`` and raise the
   token counter of every granting master to it (:data:`~lockworker.primitives.lua.FENCE_RAISE`),
   so any later majority, which shares at least one master with this one, hands out a
   larger token;
3. the lock is held if a majority granted and raised, and the *validity*
   ``ttl - elapsed - (ttl * drift_factor + 2 ms)`` is still positive;
4. otherwise release on every master (a grant whose reply was lost included) and,
   if retrying, wait a random delay in ``[0, retry_delay]`` so competing clients do
   not collide in lockstep.

A waiter is woken by a release: a release publishes on every master, and a waiter
listens on each master that answered its attempt, through the process's one wake-up
connection per connection pool (:mod:`lockworker.runtime.wake`). The random delay
remains the fallback, for a message lost and for the losers of a split vote (a
failed attempt gives its grants back without waking anyone).

What this rests on (docs/primitives.md says more): bounded clock drift between the
machines (TTLs run on each master's clock), no process pause longer than the
validity going unnoticed, and masters that keep their keys across a restart
(``appendfsync always``) or stay down for at least ``ttl`` after a crash. Fencing
tokens (:attr:`Redlock.token`) are the defence when these assumptions fail.

:class:`~lockworker.primitives.redlockcore.RedlockCore` is all of it but the I/O;
:class:`Redlock` makes its calls on ``redis.Redis`` clients (a thread per master
call), :class:`lockworker.aio.redlock.Redlock` awaits them on ``redis.asyncio`` ones,
so the two take the same steps on the same keys and exclude each other.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection
from typing import Any

import redis

from lockworker.clock import SystemClock
from lockworker.errors import LockworkerError
from lockworker.primitives import common, masters
from lockworker.primitives.redlockcore import NAMESPACE, UNREACHABLE, Held, Listening, RedlockCore
from lockworker.protocol.decode import foreign_on_wrongtype
from lockworker.runtime.wake import WakeHub, hub_for

__all__ = ["NAMESPACE", "UNREACHABLE", "Held", "Redlock", "RedlockCore"]


class Redlock(RedlockCore[redis.Redis]):
    """A lock held on a majority of independent masters; same interface as ``Lock``.

    :param clients: one ``redis.Redis`` client per master (independent servers, not
        replicas). Ordinary clients work: masters are asked at once, and one that has
        not answered within the validity the step could still give counts as failed.
        Short socket timeouts still help: a call stuck past its deadline keeps its
        master out of later steps until it returns.
    :param ttl: seconds the lock lives on each master.
    :param retry_count: further attempts a blocking :meth:`acquire` without a timeout
        makes after the first.
    :param retry_delay: the upper bound of the random pause between attempts (a
        release ends the pause at once).
    :param drift_factor: share of ``ttl`` allowed for clock drift between machines.

    :meth:`acquire` returns False only when a majority of masters answered and too few
    granted: the lock is held elsewhere. It raises :class:`~lockworker.QuorumNotReached`
    (a :class:`~lockworker.RedisUnavailable`) when fewer than a majority answered,
    naming each failed master and its error. Whenever its last attempt met failed
    masters it logs the warning ``redlock.unreachable`` and leaves them in
    :attr:`unreachable`.

    One object is one holder, not re-entrant; threads sharing one object take turns,
    as with :class:`lockworker.Lock` (:mod:`lockworker.primitives.turns`).
    """

    def locked(self) -> bool:
        """True if a majority of the reachable masters show the lock held (anyone's)."""
        return common.drive(self._locked_steps())

    def owned(self) -> bool:
        """True if this object holds the lock on a majority of masters now."""
        return common.drive(self._owned_steps())

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take the lock on a majority of masters.

        Non-blocking: one attempt. Blocking: attempts until ``timeout`` (None: the
        constructor's; if that is None too, ``1 + retry_count`` attempts), a random
        pause of at most ``retry_delay`` between them, ended at once by a release on
        any master. Each attempt lasts at most the validity it could give (``ttl``,
        less the drift allowance). Returns False if the lock is held elsewhere (a
        majority answered, too few granted); raises
        :class:`~lockworker.QuorumNotReached` if, in the last attempt, fewer than a
        majority of masters answered. See :attr:`unreachable`.
        """
        deadline = self._begin(blocking, timeout)
        if not self._turns.take(self.clock, blocking, deadline):
            return False  # another thread of this object kept it until the deadline
        listening = Listening(threading.Event()) if blocking else None
        held = False
        try:
            held = common.drive(self._acquire_steps(blocking, deadline, listening))
            return held
        finally:
            try:
                self._stop_listening(listening)
                owner, self._trying = self._trying, None
                if owner is not None:  # an attempt cut short (an error, an interrupt)
                    with contextlib.suppress(LockworkerError, redis.RedisError):
                        common.drive(self._release_all_steps(owner, publish=False))
            finally:
                if not held:
                    self._turns.give()

    # -- the I/O of RedlockCore's loops ------------------------------------------------

    def _round(
        self, fn: Callable[[int], Any], budget: float, *,
        only: Collection[int] | None = None, ok: Callable[[Any], bool] = masters.answered,
    ) -> masters.Round:
        return self._masters.call(fn, budget, only=only, ok=ok)

    def _send(self, i: int, step: common.ScriptStep[Any]) -> Any:
        try:
            return step.run(self.clients[i])
        except redis.ResponseError as exc:
            raise foreign_on_wrongtype(self.keys, exc) from exc

    def _join(self, i: int, event: Any) -> tuple[WakeHub, threading.Event]:
        hub = hub_for(self.clients[i])
        return hub, hub.join(self.clients[i], self.keys.wake, event)

    def _confirm(self, confirmations: list[threading.Event], budget: float) -> None:
        clock = SystemClock()  # confirmations arrive in real time
        end = clock.monotonic() + budget
        for confirmed in confirmations:
            confirmed.wait(max(0.0, end - clock.monotonic()))

    def _wait(self, event: threading.Event, pause: float) -> None:
        self.clock.wait(event, pause)

    def _renewer(self, owner: str) -> Callable[[float], bool]:
        return lambda _deadline: common.drive(self._renew_steps(owner))

    # -- extend, release -------------------------------------------------------------

    def extend(self, ttl: float | None = None) -> None:
        """Reset the remaining time to ``ttl`` on a majority; else :class:`LockLost`."""
        common.drive(self._extend_steps(ttl))

    def release(self) -> None:
        """Release on every master (waking the waiters).

        Raises :class:`~lockworker.NotHeld` if not held by this object, and
        :class:`~lockworker.LockLost` if the validity had run out or fewer than a
        majority still held this acquisition: mutual exclusion may have been broken.
        """
        held, was_lost = self._take_held()
        common.drive(self._release_steps(held, was_lost))

    def close(self) -> None:
        """Stop renewing (does not release)."""
        self._unhold()

    def __enter__(self) -> Redlock:
        if not self.acquire(timeout=self.timeout):
            raise self._timed_out()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
