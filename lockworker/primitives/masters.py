"""Redlock's calls to its masters: all at once, none waited for past a deadline.

A master that is down, slow or black-holed must cost a step no more than the time the
step can still use, whatever the client's own timeouts and retries are (redis-py's
defaults: no socket timeout, and retries with backoff that make a refused connection
cost seconds). So :meth:`Masters.call` asks every master at once, each call on a thread
of one shared pool, and waits for the replies only until the step's budget runs out
(for an acquisition: the validity it would have left). A master that has not answered
by then counts as failed for that step; its call goes on in the background until the
client returns.

Once the outcome is decided (a majority said yes, or can no longer say yes), the step
waits for the remaining masters only a little longer (:data:`GRACE`, as long again as
the decision took, or :data:`GRACE_SHARE` of the budget, whichever is longest), so one
silent master does not hold up an answer a majority has given.

What keeps stuck calls from piling up:

- a master with a call still running past its step's deadline is sent no further call
  until that one returns; meanwhile it counts as failed at once, so a black-holed
  master costs one deadline, not one per attempt;
- the pool is bounded (:data:`POOL_SIZE` threads); calls beyond it queue (a call
  still queued at its deadline runs later, so a release is never lost);
- the threads are daemons, so a call that never returns (a client without a socket
  timeout talking to a black hole) cannot keep the process from exiting.

Replies arrive in real time, so the waits here are real (:class:`SystemClock`); the
budget is measured by the caller on its own clock.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from lockworker.clock import SystemClock
from lockworker.errors import QuorumNotReached

FAILURES = (redis.RedisError, OSError)
"""What counts as "this master failed": unreachable, timed out, or refused."""

POOL_SIZE = 64
"""Threads shared by every Redlock of the process: at most this many calls at once."""

GRACE = 0.005
"""Seconds (at least) a decided step still waits for the masters that have not answered."""

GRACE_SHARE = 0.01
"""...or this share of the step's budget, if longer (100 ms of a 10 s acquisition)."""


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def address(client: object) -> str | None:
    """``host:port`` (``/db`` if not 0) or the socket path of a redis-py client."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return None
    if kwargs.get("path"):
        where = str(kwargs["path"])
    elif kwargs.get("host"):
        where = f"{kwargs['host']}:{kwargs.get('port', 6379)}"
    else:
        return None
    db = kwargs.get("db") or 0
    return f"{where}/{db}" if db else where


class _Call:
    """One master's part of one step, run on a pool thread."""

    def __init__(
        self, shared: _Shared, fn: Callable[[], Any], where: str, wake: threading.Event | None
    ) -> None:
        self.shared = shared
        self.fn = fn
        self.where = where
        self.wake = wake
        self.state = "queued"  # -> running -> done
        self.value: Any = None
        self.error: BaseException | None = None
        self.late = False
        """The step stopped waiting while this call ran: the master counts as busy."""

    def run(self) -> None:
        self._started()
        try:
            value, error = self.fn(), None
        except BaseException as exc:  # handed to the waiting step, never lost
            value, error = None, exc
        self._finished(value, error)

    async def arun(self) -> None:
        """:meth:`run` for a ``fn`` that returns an awaitable (a task of the loop)."""
        self._started()
        try:
            value, error = await self.fn(), None
        except BaseException as exc:  # a cancellation included: the step sees it failed
            value, error = None, exc
        self._finished(value, error)

    def _started(self) -> None:
        with self.shared.lock:
            self.state = "running"

    def _finished(self, value: Any, error: BaseException | None) -> None:
        shared = self.shared
        with shared.lock:
            self.value, self.error, self.state = value, error, "done"
            if error is None:
                shared.last_error.pop(self.where, None)
            elif isinstance(error, FAILURES):
                shared.last_error[self.where] = describe(error)
            if self.late:
                shared.busy[self.where] -= 1
                if not shared.busy[self.where]:
                    del shared.busy[self.where]
        if self.wake is not None:
            self.wake.set()


class _Pool:
    """At most ``size`` daemon threads, started when needed and kept for later calls."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._queue: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._backlog = 0

    def submit(self, call: _Call) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif self._threads < self._size:
                self._threads += 1
                threading.Thread(
                    target=self._work, name="lockworker-redlock", daemon=True
                ).start()
            else:
                self._backlog += 1
        self._queue.put(call)

    def pending(self) -> int:
        """Calls submitted and not finished yet (running or queued)."""
        with self._lock:
            return self._threads - self._idle + self._backlog

    def _work(self) -> None:
        while True:
            self._queue.get().run()
            with self._lock:
                if self._backlog:
                    self._backlog -= 1
                else:
                    self._idle += 1


class _Shared:
    """The process's pool and what it knows of each master (by address)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pool = _Pool(POOL_SIZE)
        self.busy: dict[str, int] = {}
        """Calls still running past their step's deadline, per master address."""
        self.last_error: dict[str, str] = {}
        """The last connection error of each master whose last call failed."""


_shared = _Shared()


def pending() -> int:
    """Calls of this process's Redlocks to their masters not finished yet, including
    those a step stopped waiting for (a master down or silent): tests end only once
    none is left, so none retries a server that test stopped while later ones run."""
    return _shared.pool.pending()


def _after_fork_in_child() -> None:
    global _shared  # noqa: PLW0603 - the parent's threads and locks do not exist here
    _shared = _Shared()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(frozen=True)
class Round:
    """What one step got from the masters it asked."""

    replies: list[Any]
    """Per master index: its reply, or None if it failed or was not asked."""
    failures: dict[int, str]
    """Per master index that failed: why (its error, no reply in time, or no reply yet
    to an earlier call)."""


def answered(_reply: Any) -> bool:
    return True


class Masters:
    """The masters of one Redlock: names for messages, and :meth:`call`."""

    def __init__(self, clients: Sequence[Any], quorum: int) -> None:
        self.clients = list(clients)
        self.quorum = quorum
        found = [address(c) for c in self.clients]
        self._where = [w or f"client-{id(c):x}" for w, c in zip(found, self.clients, strict=True)]
        names = [w or f"clients[{i}]" for i, w in enumerate(found)]
        if len(set(names)) < len(names):  # one server twice: tell them apart by index
            names = [f"clients[{i}]={n}" for i, n in enumerate(names)]
        self.names = names

    def call(
        self,
        fn: Callable[[int], Any],
        budget: float,
        *,
        only: Collection[int] | None = None,
        ok: Callable[[Any], bool] = answered,
    ) -> Round:
        """``fn(i)`` for every master ``i`` (or those in ``only``), all at once.

        Waits until every call returned, or ``budget`` seconds passed, or the outcome is
        decided (``ok`` replies from a majority, or too few left to make one) and the
        rest had their grace. An error other than a connection error is raised here.
        """
        wake = threading.Event()
        step = self.start(fn, budget, only=only, ok=ok, wake=wake)
        for call in step.calls.values():
            step.shared.pool.submit(call)
        while True:
            wake.clear()
            left = step.left()
            if left is None:
                return step.collect()
            wake.wait(left)

    def start(
        self, fn: Callable[[int], Any], budget: float, *, only: Collection[int] | None = None,
        ok: Callable[[Any], bool] = answered, wake: threading.Event | None = None,
    ) -> Step:
        """The calls of one step, not yet sent: the same bookkeeping and decisions for
        a pool thread per call (:meth:`call`) or a task per call (``lockworker.aio``)."""
        shared = _shared
        step = Step(self, shared, budget, ok)
        for i in range(len(self.clients)) if only is None else sorted(only):
            where = self._where[i]
            if budget <= 0:
                step.failures[i] = "not asked: no time left"
                continue
            with shared.lock:
                busy = shared.busy.get(where, 0)
                hint = shared.last_error.get(where)
            if busy:
                step.failures[i] = unanswered(f"no reply yet to {busy} earlier request(s)", hint)
                continue
            step.calls[i] = _Call(shared, functools.partial(fn, i), where, wake)
        return step

    def named(self, failures: dict[int, str]) -> dict[str, str]:
        """``failures`` keyed by master name instead of index."""
        return {self.names[i]: why for i, why in failures.items()}

    def no_quorum(self, what: str, failures: dict[int, str]) -> QuorumNotReached:
        """The error for an attempt that fewer than a majority answered, naming why."""
        reached = len(self.clients) - len(failures)
        return QuorumNotReached(
            f"{what}: only {reached} of {len(self.clients)} masters reachable, "
            f"{self.quorum} needed; unreachable: "
            + "; ".join(f"{name} ({why})" for name, why in self.named(failures).items())
        )


def unanswered(what: str, hint: str | None) -> str:
    return f"{what} (last error: {hint})" if hint else what


class Step:
    """One step's calls and what it decides: when to stop waiting, and the :class:`Round`."""

    def __init__(
        self, masters: Masters, shared: _Shared, budget: float, ok: Callable[[Any], bool]
    ) -> None:
        self.masters = masters
        self.shared = shared
        self.calls: dict[int, _Call] = {}
        self.failures: dict[int, str] = {}
        self._ok = ok
        self._budget = budget
        self._clock = SystemClock()
        self._start = self._clock.monotonic()
        self._end = self._start + max(0.0, budget)
        self._decided = False

    def left(self) -> float | None:
        """Seconds to wait for more replies, or None: every call returned, the budget
        ran out, or the outcome is decided and the rest had their grace."""
        with self.shared.lock:
            finished = [c for c in self.calls.values() if c.state == "done"]
        pending = len(self.calls) - len(finished)
        if not pending:
            return None
        good = sum(1 for c in finished if c.error is None and self._ok(c.value))
        now = self._clock.monotonic()
        quorum = self.masters.quorum
        if not self._decided and (good >= quorum or good + pending < quorum):
            self._decided = True
            grace = max(GRACE, now - self._start, self._budget * GRACE_SHARE)
            self._end = min(self._end, now + grace)
        return None if now >= self._end else self._end - now

    def collect(self) -> Round:
        """The replies and failures; a call still running keeps its master busy. An
        error other than a connection error is raised here."""
        shared, failures = self.shared, self.failures
        waited = self._clock.monotonic() - self._start
        replies: list[Any] = [None] * len(self.masters.clients)
        unexpected: BaseException | None = None
        for i, c in self.calls.items():
            with shared.lock:
                state = c.state
                if state != "done":  # it still runs (or will): its master is busy until then
                    c.late = True
                    shared.busy[c.where] = shared.busy.get(c.where, 0) + 1
                hint = shared.last_error.get(c.where)
            if state == "queued":
                failures[i] = f"not sent within {waited:.3g} s: all {POOL_SIZE} threads busy"
            elif state == "running":
                failures[i] = unanswered(f"no reply within {waited:.3g} s", hint)
            elif c.error is None:
                replies[i] = c.value
            elif isinstance(c.error, FAILURES):
                failures[i] = describe(c.error)
            elif unexpected is None:
                unexpected = c.error
        if unexpected is not None:
            raise unexpected
        return Round(replies, dict(sorted(failures.items())))
