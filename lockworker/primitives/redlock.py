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

What this rests on (docs/primitives.md says more): bounded clock drift between the
machines (TTLs run on each master's clock), no process pause longer than the
validity going unnoticed, and masters that keep their keys across a restart
(``appendfsync always``) or stay down for at least ``ttl`` after a crash. Fencing
tokens (:attr:`Redlock.token`) are the defence when these assumptions fail.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from lockworker.clock import Clock
from lockworker.config import number
from lockworker.errors import (
    AcquireTimeout,
    InvalidConfig,
    LockLost,
    NotHeld,
)
from lockworker.model.codec import Holder, LockValue, new_run
from lockworker.model.keys import Space
from lockworker.model.state import Grant
from lockworker.primitives import common, lua, masters
from lockworker.primitives.lock import MAX_ACQUISITIONS, RETENTION
from lockworker.protocol import ScriptProtocol
from lockworker.runtime import events
from lockworker.runtime.lease import DRIFT_FIXED

NAMESPACE = "redlocks"
UNREACHABLE = "redlock.unreachable"
"""Warning: masters failed in an acquisition (``masters``: name -> error, ``outcome``)."""


@dataclass(frozen=True)
class _Held:
    owner: str
    token: int
    values: dict[int, LockValue]
    """Per master index: the lock value it granted."""
    valid_until: float


class Redlock(common.Primitive):
    """A lock held on a majority of independent masters; same interface as ``Lock``.

    :param clients: one ``redis.Redis`` client per master (independent servers, not
        replicas). Ordinary clients work: masters are asked at once, and one that has
        not answered within the validity the step could still give counts as failed.
        Short socket timeouts still help: a call stuck past its deadline keeps its
        master out of later steps until it returns.
    :param ttl: seconds the lock lives on each master.
    :param retry_count: further attempts a blocking :meth:`acquire` without a timeout
        makes after the first.
    :param retry_delay: the upper bound of the random pause between attempts.
    :param drift_factor: share of ``ttl`` allowed for clock drift between machines.

    :meth:`acquire` returns False only when a majority of masters answered and too few
    granted: the lock is held elsewhere. It raises :class:`~lockworker.QuorumNotReached`
    (a :class:`~lockworker.RedisUnavailable`) when fewer than a majority answered,
    naming each failed master and its error. Whenever its last attempt met failed
    masters it logs the warning ``redlock.unreachable`` and leaves them in
    :attr:`unreachable`.
    """

    space = Space.REDLOCK
    log_name = events.REDLOCK
    label = "lock"

    def __init__(
        self,
        clients: Sequence[redis.Redis],
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
        if isinstance(clients, (str, bytes)) or not isinstance(clients, Sequence):
            raise InvalidConfig(f"clients must be a list of redis.Redis clients, got {clients!r}")
        if not clients:
            raise InvalidConfig("clients must name at least one master")
        self.clients = [common.check_client(c, f"clients[{i}]") for i, c in enumerate(clients)]
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
        self._each = self._masters.call
        self.unreachable: dict[str, str] = {}  # master -> error, latest acquire's last try
        self._protocols = [ScriptProtocol(c) for c in self.clients]
        self._raise: list[Script] = [c.register_script(lua.FENCE_RAISE) for c in self.clients]
        self._release: list[Script] = [
            c.register_script(lua.REDLOCK_RELEASE) for c in self.clients
        ]
        self._retention_ms = round(RETENTION * 1000)
        self._held: _Held | None = None
        self._token: int | None = None
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
        masters keep their data; see the module docstring).
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

    def locked(self) -> bool:
        """True if a majority of the reachable masters show the lock held (anyone's)."""
        found = self._each(lambda i: self.clients[i].exists(self.keys.lock), self.ttl, ok=bool)
        return sum(1 for f in found.replies if f) >= self.quorum

    def owned(self) -> bool:
        """True if this object holds the lock on a majority of masters now."""
        held = self._held
        if held is None:
            return False

        def check(i: int) -> bool:
            raw = self.clients[i].get(self.keys.lock)
            if isinstance(raw, bytes):
                raw = raw.decode("utf-8", "replace")
            return i in held.values and raw == held.values[i].encode()

        return sum(1 for ok in self._each(check, self.ttl, ok=bool).replies if ok) >= self.quorum

    # -- acquire ---------------------------------------------------------------------

    def _drift(self, ttl: float) -> float:
        return ttl * self.drift_factor + DRIFT_FIXED

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take the lock on a majority of masters.

        Non-blocking: one attempt. Blocking: attempts until ``timeout`` (None: the
        constructor's; if that is None too, ``1 + retry_count`` attempts), a random
        pause of at most ``retry_delay`` between them. Each attempt lasts at most the
        validity it could give (``ttl``, less the drift allowance). Returns False if the
        lock is held elsewhere (a majority answered, too few granted); raises
        :class:`~lockworker.QuorumNotReached` if, in the last attempt, fewer than a
        majority of masters answered. See :attr:`unreachable`.
        """
        common.check_bool(blocking, "blocking")
        wait = common.check_timeout(timeout)
        if wait is None:
            wait = self.timeout
        if self._held is not None:
            raise common.AlreadyHeld(f"redlock {self.name!r} is already held by this object")
        deadline = None if wait is None else self.clock.monotonic() + wait
        tries = 0
        while True:
            tries += 1
            held, failed = self._attempt()
            self.unreachable = self._masters.named(failed)
            if held:
                self._warn_unreachable("acquired")
                return True
            now = self.clock.monotonic()
            done = not blocking or (
                now >= deadline if deadline is not None else tries > self.retry_count
            )
            if done:
                no_quorum = len(self.clients) - len(failed) < self.quorum
                self._warn_unreachable("no quorum" if no_quorum else "held elsewhere")
                if no_quorum:
                    raise self._masters.no_quorum(f"redlock {self.name!r}", failed)
                self._log.debug(common.TIMED_OUT, tries=tries)
                return False
            pause = self._random.uniform(0, self.retry_delay)
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - now))
            self.clock.sleep(pause)

    def _attempt(self) -> tuple[bool, dict[int, str]]:
        """One Redlock attempt: whether it is held now, and the masters that failed, why."""
        who = Holder(self._base, new_run())
        owner = f"{who.run}|{who.owner}"  # the tail of every lock value it writes
        start = self.clock.monotonic()
        valid_until = start + self.ttl - self._drift(self.ttl)
        asked = self._each(
            lambda i: self._protocols[i].acquire(
                self.keys, who, self._ttl_ms, MAX_ACQUISITIONS, self._retention_ms
            ),
            valid_until - start, ok=lambda r: isinstance(r, Grant),
        )
        failed = dict(asked.failures)
        values = {
            i: who.value(r.token, r.attempt)
            for i, r in enumerate(asked.replies)
            if isinstance(r, Grant)
        }
        if len(values) >= self.quorum:
            token = max(v.token for v in values.values())
            raised = self._each(
                lambda i: int(
                    self._raise[i](
                        keys=[self.keys.lock, self.keys.state],
                        args=[values[i].encode(), token, self._retention_ms],
                        client=self.clients[i],
                    )
                ),
                valid_until - self.clock.monotonic(), only=values, ok=bool,
            )
            failed.update(raised.failures)
            confirmed = sum(1 for r in raised.replies if r)
            if confirmed >= self.quorum and self.clock.monotonic() < valid_until:
                self._held = _Held(owner, token, values, valid_until)
                self._token = token
                if self.auto_renew:
                    self._start_renewing()
                self._log.debug(common.ACQUIRED, token=token, granted=len(values))
                return True, failed
        self._release_all(owner)
        return False, failed

    def _warn_unreachable(self, outcome: str) -> None:
        if self.unreachable:
            self._log.warning(UNREACHABLE, masters=self.unreachable, outcome=outcome)

    def _release_all(self, owner: str) -> int:
        """Release ``owner``'s lock on every master (waiting at most ``ttl``); how many had it."""
        done = self._each(
            lambda i: int(
                self._release[i](
                    keys=[self.keys.lock], args=[owner, self.keys.wake], client=self.clients[i]
                )
            ),
            self.ttl, ok=bool,
        )
        return sum(1 for d in done.replies if d)

    # -- extend, renew, release ------------------------------------------------------

    def _renew_all(self, held: _Held, ttl: float) -> float | None:
        """Extend on every granting master; the new local deadline, or None if < quorum."""
        start = self.clock.monotonic()
        ttl_ms = max(1, round(ttl * 1000))
        until = start + ttl - self._drift(ttl)
        ok = self._each(
            lambda i: self._protocols[i].renew(
                self.keys, held.values[i], ttl_ms, self._retention_ms
            ),
            min(until - start, self.validity), only=held.values, ok=bool,
        ).replies
        if sum(1 for r in ok if r) >= self.quorum and self.clock.monotonic() < until:
            return until
        return None

    def extend(self, ttl: float | None = None) -> None:
        """Reset the remaining time to ``ttl`` on a majority; else :class:`LockLost`."""
        held = self._held
        if held is None:
            raise NotHeld(f"redlock {self.name!r} is not held by this object")
        seconds = self.ttl if ttl is None else common.lease(ttl, "ttl")
        until = self._renew_all(held, seconds) if not self.lost else None
        if until is None:
            self._drop()
            self._release_all(held.owner)
            self._log.warning(common.LOST, token=held.token, reason="extend lacked a majority")
            raise LockLost(
                f"redlock {self.name!r} could not be extended on a majority of masters",
                key=self.keys.lock, token=held.token,
            )
        self._held = _Held(held.owner, held.token, held.values, until)

    def _start_renewing(self) -> None:
        held = self._held
        assert held is not None

        def renew(_deadline: float) -> bool:
            current = self._held
            if current is None or current.owner != held.owner:
                return False
            return self._renew_all(current, self.ttl) is not None

        now = self.clock.monotonic()
        self._hold(held.valid_until, now + self.ttl / 3, renew, token=held.token)

    def _drop(self) -> _Held | None:
        held, self._held = self._held, None
        self._unhold()
        return held

    def release(self) -> None:
        """Release on every master.

        Raises :class:`~lockworker.NotHeld` if not held by this object, and
        :class:`~lockworker.LockLost` if the validity had run out or fewer than a
        majority still held this acquisition: mutual exclusion may have been broken.
        """
        was_lost = self.lost
        held = self._drop()
        if held is None:
            raise NotHeld(f"redlock {self.name!r} is not held by this object")
        confirmed = self._release_all(held.owner)
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

    def close(self) -> None:
        """Stop renewing (does not release)."""
        self._unhold()

    def __enter__(self) -> Redlock:
        if not self.acquire(timeout=self.timeout):
            raise AcquireTimeout(f"could not acquire redlock {self.name!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<Redlock {self.name!r} masters={len(self.clients)} token={self.token}>"
