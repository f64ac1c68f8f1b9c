"""What a Redlock is and decides, for clients of either kind: settings, steps and loops.

The algorithm is in :mod:`lockworker.primitives.redlock`'s docstring. Each step is a
:class:`~lockworker.primitives.common.ScriptStep` per master; each loop is a generator
yielding one *round* at a time (a step sent to every master at once, replies awaited
within a budget: :mod:`.masters`), made on pool threads by the sync ``Redlock`` and
awaited as tasks by :class:`lockworker.aio.redlock.Redlock`.

Waiting: a blocking acquisition whose attempt failed joins the wake channel of every
master that answered, one event for all (:meth:`RedlockCore._follow`); it awaits those
subscriptions' confirmations and looks again at once (a release before them would go
unseen), then pauses at most a random ``retry_delay`` unless a message sets the event.
A master that fails an attempt is left (its broken connection would wake the waiter at
every reconnection), and joined again once it answers.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, TypeVar

from lockworker.clock import Clock
from lockworker.config import number
from lockworker.errors import AcquireTimeout, InvalidConfig, LockLost, NotHeld
from lockworker.model.codec import Holder, LockValue, new_run
from lockworker.model.keys import Space
from lockworker.model.state import Grant
from lockworker.primitives import common, lua, masters
from lockworker.primitives.lock import MAX_ACQUISITIONS, RETENTION
from lockworker.protocol.decode import text
from lockworker.protocol.luacall import LuaScript
from lockworker.protocol.script import Step, acquire_step, renew_step
from lockworker.runtime import events
from lockworker.runtime.lease import DRIFT_FIXED

NAMESPACE = "redlocks"
UNREACHABLE = "redlock.unreachable"
"""Warning: masters failed in an acquisition (``masters``: name -> error, ``outcome``)."""

FENCE_RAISE = LuaScript(lua.FENCE_RAISE)
RELEASE = LuaScript(lua.REDLOCK_RELEASE)

C = TypeVar("C")


@dataclass(frozen=True)
class Held:
    owner: str
    token: int
    values: dict[int, LockValue]  # per master index: the lock value it granted
    valid_until: float


@dataclass
class Listening:
    """A blocking acquisition's wake-ups: one event, set by a message on any master."""

    event: Any
    joined: dict[int, Any] = field(default_factory=dict)  # master index -> its hub
    looked_again: bool = False


def _granted(reply: Any) -> bool:
    return isinstance(reply, Grant)


class RedlockCore(common.Primitive, Generic[C]):
    """The Redlock without its I/O. Subclasses make a round (:meth:`_round`), send a
    step to one master (:meth:`_send`), join a master's wake channel (:meth:`_join`),
    and wait (:meth:`_confirm`, :meth:`_wait`): the sync ones return their result, the
    asyncio ones a coroutine."""

    space = Space.REDLOCK
    log_name = events.REDLOCK
    label = "lock"
    clients: list[C]

    # The I/O, by side (a result on the sync one, a coroutine on the asyncio one):
    _round: Callable[..., Any]
    """``(fn, budget, *, only, ok)``: ``fn(i)`` on every master at once; a ``Round``."""
    _send: Callable[[int, common.ScriptStep[Any]], Any]
    """``(i, step)``: ``step`` on master ``i``."""
    _join: Callable[[int, Any], tuple[Any, Any]]
    """``(i, event)``: a message on master ``i``'s wake channel sets ``event`` (no I/O
    here); the master's hub, and the subscription's confirmation."""
    _confirm: Callable[[list[Any], float], Any]
    """``(confirmations, budget)``: until all are set or ``budget`` seconds passed."""
    _wait: Callable[[Any, float], Any]
    """``(event, pause)``: until ``event`` is set or ``pause`` seconds passed."""
    _renewer: Callable[[str], Callable[[float], Any]]
    """``(owner)``: ``renew(deadline)`` for the heartbeat: does ``owner``'s hold stand?"""

    def __init__(
        self,
        clients: Sequence[C],
        name: str,
        *,
        ttl: float = 10.0,
        retry_count: int = 3,
        retry_delay: float = 0.2,
        drift_factor: float = 0.01,
        auto_renew: bool = False,
        timeout: float | None = None,
        namespace: str = NAMESPACE,
        clock: Clock | None = None,
        logger: Any = None,
    ) -> None:
        kind = "redis.asyncio" if self.asyncio_client else "redis.Redis"
        if isinstance(clients, (str, bytes)) or not isinstance(clients, Sequence):
            raise InvalidConfig(f"clients must be a list of {kind} clients, got {clients!r}")
        if not clients:
            raise InvalidConfig("clients must name at least one master")
        self.clients = [
            common.check_client(c, f"clients[{i}]", asyncio=self.asyncio_client, twin="Redlock")
            for i, c in enumerate(clients)
        ]
        self._settings(
            name, namespace=namespace, ttl=ttl, auto_renew=auto_renew, timeout=timeout,
            clock=clock, logger=logger, redis_retry=None, masters=len(self.clients),
        )
        self.retry_count = common.count(retry_count, "retry_count", minimum=0)
        self.retry_delay = common.seconds(retry_delay, "retry_delay", positive=False)
        self.drift_factor = float(
            number(drift_factor, "drift_factor", maximum=1, strict_max=True, unit="") or 0.0
        )
        self.quorum = len(self.clients) // 2 + 1
        self._masters = masters.Masters(self.clients, self.quorum)
        self.unreachable: dict[str, str] = {}  # master -> error, latest acquire's last try
        self._retention_ms = round(RETENTION * 1000)
        self._held: Held | None = None
        self._token: int | None = None
        self._trying: str | None = None
        """The owner of an attempt under way: what to give back if it is cut short."""
        self._random = random.Random()

    # -- state -----------------------------------------------------------------------

    @property
    def token(self) -> int | None:
        """The fencing token of the current acquisition, or of the last one.

        As :attr:`Lock.token <lockworker.Lock.token>`: None until this object first
        acquires the lock; after :meth:`release` (or a loss) it stays the token of the
        hold that ended (a write made just before the release can still be fenced),
        until the next acquisition replaces it. Check :attr:`held` to know whether it
        is current. It grows with every acquisition of the name (as long as the
        masters keep their data; see :mod:`lockworker.primitives.redlock`).
        """
        return self._token

    @property
    def held(self) -> bool:
        return self._held is not None

    @property
    def validity(self) -> float:
        """Seconds this acquisition can still be trusted, by the local clock (0 if none)."""
        held = self._held
        if held is None:
            return 0.0
        until = self._lease.valid_until if self._lease is not None else held.valid_until
        return max(0.0, until - self.clock.monotonic())

    @property
    def lost(self) -> bool:
        if self._held is None:
            return False
        if self._lease is not None and self._lease.lost:
            return True
        return self.validity <= 0

    # -- steps and rounds ------------------------------------------------------------

    def _drift(self, ttl: float) -> float:
        return ttl * self.drift_factor + DRIFT_FIXED

    def _script(self, step: Step[Any]) -> common.ScriptStep[Any]:
        return common.ScriptStep(step.script, step.names, step.args,
                                 step.decode)

    def _each(
        self, step_of: Callable[[int], common.ScriptStep[Any]], budget: float, *,
        only: Collection[int] | None = None, ok: Callable[[Any], bool] = masters.answered,
    ) -> Callable[[], Any]:
        """The round that sends ``step_of(i)`` to every master ``i`` (or those in ``only``)."""
        return partial(self._round, lambda i: self._send(i, step_of(i)), budget, only=only, ok=ok)

    def _locked_steps(self) -> common.Steps[bool]:
        key, clients = self.keys.lock, list[Any](self.clients)
        found = yield partial(self._round, lambda i: clients[i].exists(key), self.ttl, ok=bool)
        return sum(1 for f in found.replies if f) >= self.quorum

    def _owned_steps(self) -> common.Steps[bool]:
        held = self._held
        if held is None:
            return False
        values = {v.encode() for v in held.values.values()}

        def mine(raw: Any) -> bool:
            return raw is not None and text(raw) in values

        key, clients = self.keys.lock, list[Any](self.clients)
        got = yield partial(self._round, lambda i: clients[i].get(key), self.ttl,
                            only=held.values, ok=mine)
        return sum(1 for raw in got.replies if mine(raw)) >= self.quorum

    # -- acquire ---------------------------------------------------------------------

    def _begin(self, blocking: object, timeout: object) -> float | None:
        """Check an acquisition's arguments; its deadline."""
        _, wait = common.check_acquire(blocking, timeout)
        if wait is None:
            wait = self.timeout
        return None if wait is None else self.clock.monotonic() + wait

    def _acquire_steps(
        self, blocking: bool, deadline: float | None, listening: Listening | None
    ) -> common.Steps[bool]:
        """Attempts until held, or refused (one try, the deadline, or ``retry_count``)."""
        tries = 0
        again = False  # the look right after joining the wake channels is no new try
        while True:
            tries += 0 if again else 1
            if listening is not None:
                listening.event.clear()
            held, failed = yield from self._attempt_steps()
            self.unreachable = self._masters.named(failed)
            if held:
                self._warn_unreachable("acquired")
                return True
            now = self.clock.monotonic()
            done = not blocking or (
                now >= deadline if deadline is not None else tries > self.retry_count
            )
            if done or listening is None:
                no_quorum = len(self.clients) - len(failed) < self.quorum
                self._warn_unreachable("no quorum" if no_quorum else "held elsewhere")
                if no_quorum:
                    raise self._masters.no_quorum(f"redlock {self.name!r}", failed)
                self._log.debug(common.TIMED_OUT, tries=tries)
                return False
            left = self.retry_delay if deadline is None else max(0.0, deadline - now)
            fresh = self._follow(listening, failed)
            again = fresh is not None
            if fresh is not None:
                yield partial(self._confirm, fresh, min(self.retry_delay, left))
            else:
                pause = min(self._random.uniform(0, self.retry_delay), left)
                yield partial(self._wait, listening.event, pause)

    def _attempt_steps(self) -> common.Steps[tuple[bool, dict[int, str]]]:
        """One Redlock attempt: whether it is held now, and the masters that failed, why."""
        who = Holder(self._base, new_run())
        owner = self._trying = f"{who.run}|{who.owner}"  # the tail of its lock values
        start = self.clock.monotonic()
        valid_until = start + self.ttl - self._drift(self.ttl)
        take = self._script(
            acquire_step(self.keys, who, self._ttl_ms, MAX_ACQUISITIONS, self._retention_ms)
        )
        asked = yield self._each(lambda i: take, valid_until - start, ok=_granted)
        failed = dict(asked.failures)
        values = {
            i: who.value(r.token, r.attempt) for i, r in enumerate(asked.replies) if _granted(r)
        }
        if len(values) >= self.quorum:
            token = max(v.token for v in values.values())
            raised = yield self._each(
                lambda i: common.ScriptStep(
                    FENCE_RAISE, (self.keys.lock, self.keys.state),
                    (values[i].encode(), token, self._retention_ms), lambda r: bool(int(r)),
                ),
                valid_until - self.clock.monotonic(), only=values, ok=bool,
            )
            failed.update(raised.failures)
            if sum(1 for r in raised.replies if r) >= self.quorum and (
                self.clock.monotonic() < valid_until
            ):
                self._trying = None
                self._granted(Held(owner, token, values, valid_until))
                return True, failed
        yield from self._release_all_steps(owner, publish=False)
        self._trying = None
        return False, failed

    def _granted(self, held: Held) -> None:
        self._held, self._token = held, held.token
        renew = self._renewer(held.owner) if self.auto_renew else None
        now = self.clock.monotonic()
        self._hold(held.valid_until, now + self.ttl / 3, renew, token=held.token)
        self._log.debug(common.ACQUIRED, token=held.token, granted=len(held.values))

    def _warn_unreachable(self, outcome: str) -> None:
        if self.unreachable:
            self._log.warning(UNREACHABLE, masters=self.unreachable, outcome=outcome)

    def _release_all_steps(self, owner: str, *, publish: bool) -> common.Steps[int]:
        """Release ``owner``'s lock on every master (waiting at most ``ttl``); how many had it."""
        args = (owner, self.keys.wake if publish else "")  # a failed attempt wakes nobody
        step = common.ScriptStep(RELEASE, (self.keys.lock,), args, lambda r: bool(int(r)))
        done = yield self._each(lambda i: step, self.ttl, ok=bool)
        return sum(1 for d in done.replies if d)

    # -- waiting ---------------------------------------------------------------------

    def _follow(self, listening: Listening, failed: Collection[int]) -> list[Any] | None:
        """Listen on the masters that answered the last attempt and on no other; the
        confirmations to await before looking again the first time, else None."""
        fresh = []
        for i in range(len(self.clients)):
            if i in failed and i in listening.joined:
                listening.joined.pop(i).leave(self.keys.wake, listening.event)
            elif i not in failed and i not in listening.joined:
                listening.joined[i], confirmed = self._join(i, listening.event)
                fresh.append(confirmed)
        if listening.looked_again:
            return None
        listening.looked_again = True
        return fresh

    def _stop_listening(self, listening: Listening | None) -> None:
        if listening is not None:
            for hub in listening.joined.values():
                hub.leave(self.keys.wake, listening.event)
            listening.joined.clear()

    # -- extend, renew, release ------------------------------------------------------

    def _renew_all_steps(self, held: Held, ttl: float) -> common.Steps[float | None]:
        """Extend on every granting master; the new local deadline, or None if < quorum."""
        start = self.clock.monotonic()
        ttl_ms = max(1, round(ttl * 1000))
        until = start + ttl - self._drift(ttl)
        got = yield self._each(
            lambda i: self._script(
                renew_step(self.keys, held.values[i], ttl_ms, self._retention_ms)
            ),
            min(until - start, self.validity), only=held.values, ok=bool,
        )
        if sum(1 for r in got.replies if r) >= self.quorum and self.clock.monotonic() < until:
            return until
        return None

    def _renew_steps(self, owner: str) -> common.Steps[bool]:
        current = self._held
        if current is None or current.owner != owner:
            return False
        until = yield from self._renew_all_steps(current, self.ttl)
        return until is not None

    def _extend_steps(self, ttl: float | None) -> common.Steps[None]:
        held = self._held
        if held is None:
            raise NotHeld(f"redlock {self.name!r} is not held by this object")
        seconds = self.ttl if ttl is None else common.lease(ttl, "ttl")
        until = None if self.lost else (yield from self._renew_all_steps(held, seconds))
        if until is None:
            self._take_held()
            yield from self._release_all_steps(held.owner, publish=True)
            self._log.warning(common.LOST, token=held.token, reason="extend lacked a majority")
            raise LockLost(
                f"redlock {self.name!r} could not be extended on a majority of masters",
                key=self.keys.lock, token=held.token,
            )
        self._held = Held(held.owner, held.token, held.values, until)

    def _take_held(self) -> tuple[Held, bool]:
        """Drop the hold (NotHeld if none): it, and whether it had been lost."""
        was_lost = self.lost
        held, self._held = self._held, None
        self._unhold()
        if held is None:
            raise NotHeld(f"redlock {self.name!r} is not held by this object")
        self._turns.give()  # the next thread or task of this object may acquire
        return held, was_lost

    def _release_steps(self, held: Held, was_lost: bool) -> common.Steps[None]:
        confirmed = yield from self._release_all_steps(held.owner, publish=True)
        if was_lost or confirmed < self.quorum:
            self._log.warning(
                common.LOST, token=held.token, confirmed=confirmed, expired=was_lost
            )
            raise LockLost(
                f"redlock {self.name!r} was no longer held on a majority at release "
                f"({confirmed} of {len(self.clients)} masters; validity "
                f"{'expired' if was_lost else 'left'})",
                key=self.keys.lock, token=held.token,
            )
        self._log.debug(common.RELEASED, token=held.token)

    def _timed_out(self) -> AcquireTimeout:
        return AcquireTimeout(f"could not acquire redlock {self.name!r}")

    def __repr__(self) -> str:
        return f"<Redlock {self.name!r} masters={len(self.clients)} token={self.token}>"
