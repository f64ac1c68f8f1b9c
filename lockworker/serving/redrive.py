"""What a reset decides, on either side: whether the job was resolved, the entry that
re-drives it, the origin a stream's job keeps, and which results ``reset_all`` reports.

The calls are the sides' own: :mod:`lockworker.daemons.redrive` and
:mod:`lockworker.daemons.deadletter` (sync), :mod:`lockworker.aio.redrive` (asyncio).
"""

from __future__ import annotations

from typing import Any

from lockworker.errors import InvalidConfig
from lockworker.model.codec import check_payload
from lockworker.model.keys import JobKeys, Space, parse_state_key, state_pattern
from lockworker.model.redrive import RESOLVED_STATES, Origin, origin_key
from lockworker.model.state import JobStatus, Reset, Snapshot
from lockworker.protocol import text
from lockworker.serving.delivery import Delivery

KEEP_FAILED = "serve.keep_failed"
"""The origin of a job that gave up could not be written (logged as a WARNING; the
serving goes on, and a reset of that job says it cannot re-drive it)."""


def resolved(seen: Snapshot) -> bool:
    """Whether a job seen so was resolved (DONE, GAVE_UP: no process has it in hand)."""
    return seen.holder is None and seen.status is not JobStatus.PENDING


def expected(expect: str | None) -> bool | None:
    """Whether a job listed in state ``expect`` was resolved (None: not listed, read
    it first)."""
    return None if expect is None else expect in RESOLVED_STATES


def entry_fields(job_id: str, origin: Origin) -> Any:
    """The re-driven entry's fields: what :func:`lockworker.submit` writes."""
    return {"job_id": job_id, "payload": origin.payload}


def origin_of(worker: Any, delivery: Delivery) -> tuple[str, str] | None:
    """The origin key and value for ``delivery``'s job (None: not a stream's, or an
    id or payload the job itself refused: nothing to keep)."""
    if delivery.stream is None:
        return None
    try:
        keys = JobKeys.of(worker.namespace, delivery.job_id)
        data = check_payload(delivery.payload)
    except InvalidConfig:
        return None
    return origin_key(keys), Origin(delivery.stream, data).encode()


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


def reported(result: Reset) -> bool:
    """Whether a reset of ``reset_all`` (either side's) is reported: not a job that left
    the state since the scan found it (CHANGED), nor one gone meanwhile (ABSENT)."""
    return result is not Reset.CHANGED and result is not Reset.ABSENT
