"""Bounded retries of Redis steps after connection errors, in one place.

Every protocol step is safe to retry after a lost reply (see :mod:`lockworker.protocol`),
so a broken connection is retried with exponential backoff and jitter (tenacity) until a
deadline, then reported as :class:`~lockworker.errors.RedisUnavailable`. The deadline is
what makes it safe: a holder's renewals are retried only until its lease would end,
never past it, so retrying can never keep two holders alive at once.

Only connection-level failures are retried, and the refusals of a failover under way
(:data:`FAILING_OVER`), which the next try may find over. Errors in the reply (a script
error, a foreign value) are raised at once: retrying would not change them.

Retrying is never silent: the first failure and every backoff are logged at WARNING
(event ``redis.retry``, with the step, the try and the error), so an operator sees a
Redis outage as it happens, not only when the budget runs out; running out is logged at
ERROR (``redis.unavailable``, with the step, the tries and the last error).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
import tenacity
from redis.exceptions import (
    ClusterDownError,
    ReadOnlyError,
    SlotNotCoveredError,
    TryAgainError,
)

from lockworker.clock import Clock
from lockworker.config import JitterWait, seconds
from lockworker.errors import Contended, NotReplicated, RedisUnavailable
from lockworker.runtime import events

T = TypeVar("T")

FAILING_OVER = (ClusterDownError, TryAgainError, ReadOnlyError, SlotNotCoveredError)
"""What a server or a cluster client answers while masters change: ``CLUSTERDOWN`` (and
``MASTERDOWN``, a subclass), ``TRYAGAIN``, ``READONLY`` from a master demoted to replica,
and a slot the client's map does not cover. Each refuses the step before it changes
anything (on a replica a script's first write fails, so it wrote nothing), and every
step is safe to retry after a lost reply anyway: retried as a lost connection is."""

RETRYABLE = (
    redis.ConnectionError, redis.TimeoutError, *FAILING_OVER, Contended, NotReplicated
)
"""Connection refused or reset, socket timeouts, a server still loading its data, a
failover under way (:data:`FAILING_OVER`), a transaction that kept losing its WATCH
race (:class:`~lockworker.errors.Contended`), and a step the replicas did not
acknowledge in time (:class:`~lockworker.errors.NotReplicated`)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often to retry a step after a connection error.

    ``budget``: seconds after the first try at which to give up (a caller may pass a
    shorter deadline, such as the end of a lease). ``initial``/``maximum``: the backoff
    between tries, doubling with jitter from ``initial`` up to ``maximum`` seconds.
    """

    budget: float = 10.0
    initial: float = 0.01
    maximum: float = 0.5

    def __post_init__(self) -> None:
        for name in ("budget", "initial", "maximum"):
            object.__setattr__(self, name, seconds(getattr(self, name), f"retry {name}"))


DEFAULT = RetryPolicy()
"""The policy of every object not given one (immutable, so shared)."""


def call(
    fn: Callable[[], T],
    *,
    clock: Clock,
    policy: RetryPolicy,
    what: str,
    deadline: float | None = None,
    log: events.EventLog | None = None,
) -> T:
    """Run ``fn``, retrying connection errors until ``policy.budget`` or ``deadline``.

    ``what`` names the step (and its job or lock) in logs and errors; ``log`` gets a
    ``redis.retry`` warning for the first failure and each backoff. ``deadline`` is a
    time on ``clock.monotonic()``; no new try starts after it. Raises
    :class:`RedisUnavailable` (chained to the last connection error, naming ``what``)
    when the retries run out.
    """
    try:
        return fn()  # the common case costs no retry machinery
    except RETRYABLE as exc:
        if log is not None:
            log.warning(events.REDIS_RETRY, step=what, tries=1, error=_brief(exc))
    retrying = tenacity.Retrying(sleep=clock.sleep, **_tenacity(clock, policy, what, deadline, log))
    try:
        return retrying(fn)
    except tenacity.RetryError as exc:
        raise _unavailable(exc, what, log) from exc.last_attempt.exception()


async def acall(
    fn: Callable[[], Awaitable[T]],
    *,
    clock: Clock,
    policy: RetryPolicy,
    what: str,
    deadline: float | None = None,
    log: events.EventLog | None = None,
) -> T:
    """:func:`call` for a coroutine function: the same policy, deadline, logs and error;
    the backoff is an ``asyncio.sleep`` (time is still read from ``clock``)."""
    try:
        return await fn()
    except RETRYABLE as exc:
        if log is not None:
            log.warning(events.REDIS_RETRY, step=what, tries=1, error=_brief(exc))
    retrying = tenacity.AsyncRetrying(
        sleep=asyncio.sleep, **_tenacity(clock, policy, what, deadline, log)
    )

    async def attempt() -> T:
        # tenacity awaits only a coroutine function, not a function returning a
        # coroutine (our lambdas): without this the retry would return it unawaited.
        return await fn()

    try:
        return await retrying(attempt)
    except tenacity.RetryError as exc:
        raise _unavailable(exc, what, log) from exc.last_attempt.exception()


def _tenacity(
    clock: Clock, policy: RetryPolicy, what: str, deadline: float | None,
    log: events.EventLog | None,
) -> dict[str, Any]:
    """The retrying rules shared by :func:`call` and :func:`acall` (after a first failure)."""
    start = clock.monotonic()
    end = start + policy.budget if deadline is None else min(deadline, start + policy.budget)

    def out_of_time(state: tenacity.RetryCallState) -> bool:
        return clock.monotonic() >= end

    return {
        "retry": tenacity.retry_if_exception_type(RETRYABLE),
        "stop": out_of_time,
        "wait": tenacity.wait_exponential(multiplier=policy.initial, max=policy.maximum)
        + JitterWait(0, policy.initial),
        "before_sleep": None if log is None else _report_backoff(log, what),
        "reraise": False,
    }


def _unavailable(
    exc: tenacity.RetryError, what: str, log: events.EventLog | None
) -> RedisUnavailable:
    """The error raised once the retries ran out, logged as ``redis.unavailable``."""
    last = exc.last_attempt.exception()
    if log is not None:
        log.error(
            events.REDIS_UNAVAILABLE, step=what, tries=exc.last_attempt.attempt_number + 1,
            error=_brief(last),
        )
    return RedisUnavailable(
        f"Redis unreachable while trying to {what}: gave up after "
        f"{exc.last_attempt.attempt_number + 1} tries ({last})"
    )


def _brief(exc: BaseException | None) -> str:
    return f"{type(exc).__name__}: {exc}" if exc is not None else "unknown"


def _report_backoff(
    log: events.EventLog, what: str
) -> Callable[[tenacity.RetryCallState], None]:
    def report(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            events.REDIS_RETRY, step=what, tries=state.attempt_number + 1,
            retry_in=round(wait, 3), error=_brief(error),
        )

    return report


class Caller:
    """How one object runs its Redis steps: through :func:`call`, with its clock, its
    retry policy and its log, and a label naming it in messages (`` 'report'``).

    The one path every Worker, Leader, Lock, Semaphore and compute_once takes to Redis.
    """

    __slots__ = ("clock", "label", "log", "policy")

    def __init__(
        self, clock: Clock, policy: RetryPolicy, log: events.EventLog | None, label: str = ""
    ) -> None:
        self.clock = clock
        self.policy = policy
        self.log = log
        self.label = label

    def __call__(
        self, fn: Callable[[], T], what: str, deadline: float | None = None,
        log: events.EventLog | None = None,
    ) -> T:
        return call(
            fn, clock=self.clock, policy=self.policy, what=what + self.label,
            deadline=deadline, log=self.log if log is None else log,
        )


class AsyncCaller(Caller):
    """:class:`Caller` for coroutine functions: the one path of the ``lockworker.aio``
    objects to Redis."""

    __slots__ = ()

    async def __call__(  # type: ignore[override]
        self, fn: Callable[[], Awaitable[T]], what: str, deadline: float | None = None,
        log: events.EventLog | None = None,
    ) -> T:
        return await acall(
            fn, clock=self.clock, policy=self.policy, what=what + self.label,
            deadline=deadline, log=self.log if log is None else log,
        )
