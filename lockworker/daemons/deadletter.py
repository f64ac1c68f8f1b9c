"""Every job of a namespace in one state, re-driven at once: ``Worker.reset_all``.

The jobs are found by SCAN over the namespace's state keys (never KEYS, which blocks
the server; a cluster client scans every master), and each is reset by the protocol's
reset step with ``expect=state``: atomically, only if it is still in that state when
its turn comes (a pending job finished meanwhile is left DONE), and, as a single
reset, never under a live holder unless ``force``. One round trip per job of the
namespace. The asyncio twin (:meth:`lockworker.aio.Worker.reset_all`) uses the same
pieces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import redis

from lockworker.model.keys import JobKeys, Space, parse_state_key, state_pattern
from lockworker.model.state import Reset
from lockworker.protocol import LockProtocol, text

T = TypeVar("T")


class Resetter(Protocol):
    """What :func:`reset_all` needs of a worker."""

    client: redis.Redis
    namespace: str
    protocol: LockProtocol
    _retention_ms: int

    def _call(
        self, fn: Callable[[], T], what: str, deadline: float | None = None,
        log: Any = None,
    ) -> T: ...


def pattern(namespace: str) -> str:
    """The SCAN pattern of ``namespace``'s job state keys."""
    return state_pattern(Space.JOB, namespace)


def job_keys(raw_key: Any, namespace: str) -> JobKeys | None:
    """The keys of the job whose state key SCAN found (None if it is not one of
    ``namespace``'s jobs)."""
    found = parse_state_key(text(raw_key), Space.JOB)
    if found is None or found[0] != namespace:
        return None
    return JobKeys(namespace, found[1])


def reset_all(worker: Resetter, state: str, *, force: bool = False) -> dict[str, Reset]:
    """Reset every job of ``worker``'s namespace that is in ``state`` (validated by
    the caller); the result of each reset by job id (``Reset.RESET``, or ``HELD``
    for one under a live holder, unless ``force``). Jobs in another state are left
    out."""
    results: dict[str, Reset] = {}
    for raw in worker.client.scan_iter(match=pattern(worker.namespace), count=1000):
        keys = job_keys(raw, worker.namespace)
        if keys is None or keys.job_id in results:
            continue
        result = worker._call(
            lambda k=keys: worker.protocol.reset(  # type: ignore[misc]
                k, worker._retention_ms, force=force, expect=state
            ),
            f"reset job {keys.job_id!r}",
        )
        if reported(result):
            results[keys.job_id] = result
    return results


def reported(result: Reset) -> bool:
    """Whether a reset of ``reset_all`` (either side's) is reported: not a job that left
    the state since the scan found it (CHANGED), nor one gone meanwhile (ABSENT)."""
    return result is not Reset.CHANGED and result is not Reset.ABSENT
