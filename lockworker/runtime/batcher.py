"""Group commit for the protocol steps of many threads on one client.

Under ``Worker.serve`` many job threads of a process send protocol steps at once: the
grants of new jobs, the DONE of finished ones, renewals, backups' looks. Sent one by
one, each step pays a round trip, and the process pays a send and a receive system
call, a reply parse and a thread switch per step. A :class:`Batcher` sends them
together (:mod:`lockworker.protocol.batch`: the very per-job steps, those of one script
looped in one command).

The rule is group commit, as a database commits its log: a step that finds no batch
in flight is sent at once, alone, by the calling thread (a lone job pays nothing
extra); a step that arrives while a batch is in flight waits for it to come back, then
goes out with every other step that arrived meanwhile, sent by the first of them. No
step therefore waits longer than one round trip beyond its own, and the more steps are
in flight, the fewer round trips they take.

One batcher per client object (:func:`batcher_for`), shared by every worker on it:
sharing costs nothing per worker and lets their steps share round trips too.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import redis

from lockworker.protocol import batch
from lockworker.protocol.script import Step


class _Entry:
    """One step waiting for its batch: its result, or the signal to lead the next.

    ``done`` is a plain lock made held: the waiting thread blocks acquiring it, and
    whoever has the result releases it, once. A bare lock, not an ``Event``: an
    ``Event`` builds a ``Condition`` and a waiters' list per step, which a busy stream
    pays on every grant and completion."""

    __slots__ = ("done", "lead", "result", "step")

    def __init__(self, step: Step[Any]) -> None:
        self.step = step
        self.done = threading.Lock()
        self.done.acquire()
        self.lead = False
        self.result: Any = None

    def wait(self) -> None:
        self.done.acquire()

    def set(self) -> None:
        self.done.release()


class Batcher:
    """Send protocol steps of many threads in shared round trips (see the module)."""

    def __init__(self, client: redis.Redis, max_batch: int = batch.MAX_BATCH) -> None:
        self.client = client
        self.max_batch = max_batch
        self._mutex = threading.Lock()
        self._queue: deque[_Entry] = deque()
        self._busy = False

    def __call__(self, step: Step[Any]) -> Any:
        """Send ``step`` (alone or in a batch); its result or the exception it stands
        for (returned, not raised: :func:`lockworker.protocol.batch.outcome`). An error of
        the whole round trip (the connection) is raised."""
        with self._mutex:
            if not self._busy:
                self._busy = True
                entry = None
            else:
                entry = _Entry(step)
                self._queue.append(entry)
        if entry is None:
            return self._lead(step)
        entry.wait()
        if entry.lead:
            return self._lead(step)
        if isinstance(entry.result, _Failed):
            raise entry.result.error
        return entry.result

    def _lead(self, step: Step[Any]) -> Any:
        """Send ``step`` and whatever is queued; hand the lead to the next in line."""
        with self._mutex:
            taken = [self._queue.popleft() for _ in range(
                min(len(self._queue), self.max_batch - 1)
            )]
        try:
            if taken:
                results = batch.send(self.client, [step, *(e.step for e in taken)])
            else:
                results = [self._alone(step)]
        except BaseException as exc:
            for e in taken:
                e.result = _Failed(exc)
                e.set()
            self._pass_lead()
            raise
        for e, result in zip(taken, results[1:], strict=True):
            e.result = result
            e.set()
        self._pass_lead()
        return results[0]

    def _alone(self, step: Step[Any]) -> Any:
        """One step, sent as a single command (no pipeline to build)."""
        try:
            reply = step.script(self.client, step.names, step.args)
        except redis.ResponseError as exc:
            return batch.outcome(step, exc)
        return batch.outcome(step, reply)

    def _pass_lead(self) -> None:
        """Let the next queued step lead the next batch, or mark the batcher idle."""
        with self._mutex:
            if not self._queue:
                self._busy = False
                return
            nxt = self._queue.popleft()
        nxt.lead = True
        nxt.set()


class _Failed:
    """The round trip of a batch failed: every step in it raises this error."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_BATCHERS: weakref.WeakKeyDictionary[Any, Batcher] = weakref.WeakKeyDictionary()
_REGISTRY = threading.Lock()


def batcher_for(client: redis.Redis) -> Batcher:
    """The batcher of ``client`` (one per client object, made on first use)."""
    found = _BATCHERS.get(client)
    if found is None:
        with _REGISTRY:
            found = _BATCHERS.get(client)
            if found is None:
                found = _BATCHERS[client] = Batcher(client)
    return found


def renewals(worker: Any) -> Callable[[list[Step[Any]], float], list[Any]] | None:
    """For a worker's heartbeat: send many renewal steps in one round trip, retried by
    the worker's policy until the deadline; None unless its protocol batches (the
    script protocol with a batcher: a WATCH/MULTI/EXEC or replicated step is its own)."""
    protocol = worker.protocol
    if getattr(protocol, "sender", None) is None:
        return None

    def send_many(steps: list[Step[Any]], deadline: float) -> list[Any]:
        return list(worker._call(
            lambda: batch.send(worker.client, steps), "renew leases", deadline
        ))

    return send_many
