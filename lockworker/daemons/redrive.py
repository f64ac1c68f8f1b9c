"""The one reset every path uses: make the job pending again, and re-drive it.

``lockworker reset`` (one job, or ``--state``), the dashboard's buttons,
:meth:`lockworker.Worker.reset` and :meth:`~lockworker.Worker.reset_all` (and their
asyncio twins) all call :func:`reset_job` (or :func:`reset_job_async`):

1. the protocol's reset step (atomic; with ``expect``, only if the job is still in
   that state; never under a live holder unless ``force``);
2. for a job that was resolved before it (DONE, GAVE_UP: no process has it in hand),
   the job's origin record (:mod:`lockworker.model.redrive`): if one was kept, the job
   is added to its stream again (XADD, the same job id and payload), so the daemons
   serving that stream run it, as they run any new job. If none was kept, the result
   says so (:attr:`~lockworker.model.redrive.Redrive.stranded`), and its caller prints
   or logs the command that submits the job again.

The reset comes first: an entry added before it could be read, found GAVE_UP, and
resolved without a run. The origin record is written by the serving worker when its
stream's job ends GAVE_UP (:func:`keep`).
"""

from __future__ import annotations

from typing import Any

import redis

from lockworker.daemons.delivery import Delivery
from lockworker.daemons.sources import stream_keys
from lockworker.errors import ForeignValueError, InvalidConfig
from lockworker.model.codec import check_payload
from lockworker.model.keys import JobKeys
from lockworker.model.redrive import RESOLVED_STATES, Origin, Redrive, decode_origin, origin_key
from lockworker.model.state import JobStatus, Reset, Snapshot
from lockworker.protocol import text
from lockworker.runtime import events


def _resolved(seen: Snapshot) -> bool:
    return seen.holder is None and seen.status is not JobStatus.PENDING


def _entry_fields(job_id: str, origin: Origin) -> Any:
    """The new entry's fields: what :func:`lockworker.submit` writes."""
    return {"job_id": job_id, "payload": origin.payload}


def reset_job(
    client: redis.Redis, protocol: Any, keys: JobKeys, retention_ms: int, *,
    force: bool = False, expect: str | None = None,
) -> Redrive:
    """Reset the job of ``keys`` and re-drive it if it was resolved (module docstring).

    ``expect`` (pending, held, done, gave_up) tells the state the caller listed it in;
    without it the job is read first. Raises what the reset step raises
    (:class:`~lockworker.ForeignValueError` for foreign values, unless ``force``)."""
    if expect is not None:
        resolved = expect in RESOLVED_STATES
    else:
        try:
            resolved = _resolved(protocol.inspect(keys))
        except ForeignValueError:
            if not force:
                raise
            resolved = True  # replaced by force: whatever it was, nobody runs it
    result: Reset = protocol.reset(keys, retention_ms, force=force, expect=expect)
    if result is not Reset.RESET or not resolved:
        return Redrive(keys.job_id, result, resolved)
    origin = decode_origin(client.get(origin_key(keys)))
    if origin is None:
        return Redrive(keys.job_id, result, resolved)
    entry = text(client.xadd(
        stream_keys(origin.stream).extra("entries"), _entry_fields(keys.job_id, origin)
    ))
    return Redrive(keys.job_id, result, resolved, origin.stream, entry)


async def reset_job_async(
    client: Any, protocol: Any, keys: JobKeys, retention_ms: int, *,
    force: bool = False, expect: str | None = None,
) -> Redrive:
    """:func:`reset_job` on a ``redis.asyncio`` client and the asyncio protocol."""
    if expect is not None:
        resolved = expect in RESOLVED_STATES
    else:
        try:
            resolved = _resolved(await protocol.inspect(keys))
        except ForeignValueError:
            if not force:
                raise
            resolved = True
    result: Reset = await protocol.reset(keys, retention_ms, force=force, expect=expect)
    if result is not Reset.RESET or not resolved:
        return Redrive(keys.job_id, result, resolved)
    origin = decode_origin(await client.get(origin_key(keys)))
    if origin is None:
        return Redrive(keys.job_id, result, resolved)
    entry = text(await client.xadd(
        stream_keys(origin.stream).extra("entries"), _entry_fields(keys.job_id, origin)
    ))
    return Redrive(keys.job_id, result, resolved, origin.stream, entry)


KEEP_FAILED = "serve.keep_failed"
"""The origin of a job that gave up could not be written (logged as a WARNING; the
serving goes on, and a reset of that job says it cannot re-drive it)."""


def _origin_of(worker: Any, delivery: Delivery) -> tuple[str, str] | None:
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


def keep(worker: Any, delivery: Delivery, log: events.EventLog) -> None:
    """``serve``: keep the origin of a stream's job that gave up in ``worker``'s hands
    (one SET in the job's slot, as long as its state), for a reset to re-drive it."""
    found = _origin_of(worker, delivery)
    if found is None:
        return
    try:
        worker.client.set(found[0], found[1], px=worker._retention_ms)
    except (redis.RedisError, OSError) as exc:
        log.warning(KEEP_FAILED, job_id=delivery.job_id, error=events.describe(exc))


async def keep_async(worker: Any, delivery: Delivery, log: events.EventLog) -> None:
    """:func:`keep` for the asyncio ``serve`` (a ``redis.asyncio`` client)."""
    found = _origin_of(worker, delivery)
    if found is None:
        return
    try:
        await worker.client.set(found[0], found[1], px=worker._retention_ms)
    except (redis.RedisError, OSError) as exc:
        log.warning(KEEP_FAILED, job_id=delivery.job_id, error=events.describe(exc))
