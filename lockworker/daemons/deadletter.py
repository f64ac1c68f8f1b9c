"""Every job of a namespace in one state, re-driven at once: ``Worker.reset_all``.

The jobs are found in the namespace's index (:mod:`lockworker.model.index`: one call
per server, whatever the number of finished jobs); DONE jobs, which have no entry, by
SCAN over the namespace's state keys (never KEYS, which blocks the server; a cluster
client scans every master). Each is reset by
:func:`lockworker.daemons.redrive.reset_job` with ``expect=state``: atomically, only if
it is still in that state when its turn comes (a pending job finished meanwhile is left
DONE), as a single reset never under a live holder unless ``force``, and re-driven
(added to its stream again) where it was resolved and its origin was kept. One round
trip per job of the namespace, two more per job re-driven. The asyncio twin
(:meth:`lockworker.aio.Worker.reset_all`, with :mod:`lockworker.aio.redrive`) uses
the same decisions (:mod:`lockworker.serving.redrive`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import redis

from lockworker.daemons.redrive import reset_job
from lockworker.errors import JobNotFound
from lockworker.model.index import STATES
from lockworker.model.keys import JobKeys
from lockworker.model.redrive import Redrive
from lockworker.model.state import Reset
from lockworker.protocol import LockProtocol, index
from lockworker.runtime import events
from lockworker.serving.redrive import job_keys, pattern, reported

T = TypeVar("T")


class Resetter(Protocol):
    """What :func:`reset_all` needs of a worker."""

    client: redis.Redis
    namespace: str
    protocol: LockProtocol
    _retention_ms: int
    _log: events.EventLog

    def _call(
        self, fn: Callable[[], T], what: str, deadline: float | None = None,
        log: Any = None,
    ) -> T: ...


def candidates(client: redis.Redis, namespace: str, state: str) -> Iterator[JobKeys]:
    """The jobs of ``namespace`` that may be in ``state``: its index's entries of that
    state, or for ``done`` a walk of its state keys (each reset checks the state)."""
    if state == "done":
        for raw in client.scan_iter(match=pattern(namespace), count=1000):
            keys = job_keys(raw, namespace)
            if keys is not None:
                yield keys
        return
    for kind in STATES[state]:
        for e in index.listed(client, namespace, kind):
            yield JobKeys(namespace, e.job_id)


def reset_one(worker: Resetter, job_id: str, *, force: bool = False) -> bool:
    """``Worker.reset``: reset (and re-drive) one job; logged as ``job.reset``."""
    keys = JobKeys.of(worker.namespace, job_id)
    done: Redrive = worker._call(
        lambda: reset_job(worker.client, worker.protocol, keys, worker._retention_ms,
                          force=force),
        "reset job",
    )
    if done.result is Reset.ABSENT:
        raise JobNotFound(f"no job {job_id!r} in namespace {worker.namespace!r}")
    events.reset(worker._log, done)
    return done.reset


def reset_all(worker: Resetter, state: str, *, force: bool = False) -> dict[str, Reset]:
    """Reset every job of ``worker``'s namespace that is in ``state`` (validated by
    the caller); the result of each reset by job id (``Reset.RESET``, or ``HELD``
    for one under a live holder, unless ``force``). Jobs in another state are left
    out. Each reset is logged (``job.reset``: re-driven, or the command that submits
    it again)."""
    results: dict[str, Reset] = {}
    for keys in candidates(worker.client, worker.namespace, state):
        if keys.job_id in results:
            continue
        done: Redrive = worker._call(
            lambda k=keys: reset_job(  # type: ignore[misc]
                worker.client, worker.protocol, k, worker._retention_ms, force=force,
                expect=state,
            ),
            f"reset job {keys.job_id!r}",
        )
        events.reset(worker._log, done)
        if reported(done.result):
            results[keys.job_id] = done.result
    return results
