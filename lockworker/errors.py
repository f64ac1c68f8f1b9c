"""The one exception tree of lockworker.

Every error lockworker raises on purpose derives from :class:`LockworkerError`, so
``except lockworker.LockworkerError`` catches them all. Where a stdlib base is what
callers already catch, it is mixed in (``InvalidConfig`` is also a ``ValueError``).

This module is a leaf: it imports nothing from lockworker, so every other module can
import it without a cycle.

Two kinds of failure are kept apart: misuse by the caller (:class:`InvalidConfig`,
:class:`NotHeld`) and data found in Redis that lockworker did not write
(:class:`ForeignValueError`), which lockworker never overwrites.
"""

from __future__ import annotations


class LockworkerError(Exception):
    """Root of every error lockworker raises on purpose."""


class InvalidConfig(LockworkerError, ValueError):
    """An argument has a value lockworker cannot work with (raised before any Redis call)."""


class RedisPyTooOld(InvalidConfig):
    """The client given needs a newer redis-py than the one installed (a cluster client:
    :mod:`lockworker.redispy`); the message names the release and the install line.
    ``needed`` and ``installed`` are the two releases, as text."""

    def __init__(self, message: str, *, needed: str, installed: str) -> None:
        super().__init__(message)
        self.needed = needed
        self.installed = installed


class InvalidHook(LockworkerError, TypeError):
    """A hook that is not callable was given."""


class LockLost(LockworkerError):
    """This process can no longer be sure it holds the lock (lease expired or taken over).

    Raised by :meth:`lockworker.Job.check` and by primitives whose owner lost them.
    """

    def __init__(self, message: str, *, key: str | None = None, token: int | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.token = token


class StopRequested(LockworkerError):
    """The worker was asked to stop; raised by :meth:`lockworker.Job.check`.

    Raising it (or letting it propagate) from ``on_acquired`` hands the job over at once
    without spending an attempt.
    """


class ForeignValueError(LockworkerError):
    """A key lockworker uses holds a value lockworker did not write.

    lockworker refuses to touch such a key rather than overwrite somebody else's data.
    """

    def __init__(self, key: str, value: object) -> None:
        super().__init__(
            f"key {key!r} holds a value lockworker did not write ({value!r}); "
            "refusing to overwrite it: choose another namespace or delete the key"
        )
        self.key = key
        self.value = value


class RedisUnavailable(LockworkerError):
    """Redis could not be reached within the retry budget (bounded backoff ran out)."""


class PermissionDenied(LockworkerError):
    """The connected Redis user may not run a command, or use a key or channel, that
    lockworker needs; the message names what to grant (``ACL SETUSER ...``). Raised
    before any handler runs, so no work is done that could not be recorded."""


class NotReplicated(LockworkerError):
    """A step was applied on the master but fewer replicas than asked acknowledged it
    (``durability="replicated"``); retried like a lost connection, since every step is
    safe to repeat, until the replicas have it or the retry budget ends."""


class Contended(LockworkerError):
    """An optimistic transaction kept losing its WATCH race to other clients.

    Raised after a bounded number of tries of one step; the caller's retry policy
    retries it like a connection error, within the same deadline, so a renewal under
    contention can never outlive the lease it is meant to extend.
    """


class JobNotFound(LockworkerError, KeyError):
    """The server knows no such job (never seen, or forgotten after ``retention``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class NotHeld(LockworkerError):
    """An operation that needs the lock (release, extend) was called by a non-holder."""


class AcquireTimeout(LockworkerError, TimeoutError):
    """A blocking acquire did not succeed within its timeout."""


class QuorumNotReached(RedisUnavailable):
    """Redlock could not reach a majority of its masters (the message names the failed
    ones and their errors); a :class:`RedisUnavailable`, as it is the servers' fault."""


class AlreadyHeld(LockworkerError, RuntimeError):
    """``acquire`` was called on a primitive object that already holds it.

    The primitives are not re-entrant: acquiring twice from one object would either
    deadlock with itself or hide a double release, so it is refused at once.
    """


class ConcurrentUse(LockworkerError, RuntimeError):
    """One object was used by two threads (or two asyncio tasks) at once in a way it
    cannot share: a ``Semaphore`` object holds one permit, so a second thread's
    ``acquire`` while it is acquiring or holding is refused; a ``Leader`` campaigns
    once, so a second concurrent ``run()`` is refused. Nothing was done: no run, no
    token, no place in a queue. Make one object per thread or task that competes.
    """


class ExtraNotInstalled(LockworkerError, ImportError):
    """An optional part of lockworker was used without the extra that installs what it
    needs; the message names the install line (``pip install 'lockworker[metrics]'``).

    An ``ImportError`` too, so code that treats the optional part as optional
    (``except ImportError``) keeps working.
    """


class Retry(LockworkerError):
    """Raised by ``on_acquired``: this attempt failed, and the job's next attempt may
    start ``after`` seconds from now (instead of what ``retry_delay`` says), in whichever
    process takes it. Like Celery's ``countdown``; the attempt counts as failed.

    ``after`` is checked where the worker reads it (:func:`lockworker.config.retry_after`):
    a value that is not a number of seconds >= 0 fails the attempt with that
    :class:`InvalidConfig` instead, on the ordinary schedule.
    """

    def __init__(self, after: float, reason: str = "") -> None:
        self.after = after
        self.reason = reason
        super().__init__(f"retry after {after!r}s" + (f": {reason}" if reason else ""))


class GiveUp(LockworkerError):
    """Raised by ``on_acquired``: give the job up now, whatever attempts are left; it is
    recorded GAVE_UP like a job whose last attempt failed (``on_gave_up`` runs, every
    process sees ``Outcome.GAVE_UP``). A job that can never succeed (a bad payload) need
    not spend its attempts; ``give_up_on=(...)`` does this for exception types."""

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(reason or "given up")
