"""The one reset every path uses: make the job pending again, and re-drive it.

``lockworker reset`` (one job, or ``--state``), the dashboard's buttons,
:meth:`lockworker.Worker.reset` and :meth:`~lockworker.Worker.reset_all` (and their
asyncio twins) all call :func:`reset_job` (or
:func:`lockworker.aio.redrive.reset_job_async`; what both decide is
:mod:`lockworker.serving.redrive`'s):

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

from lockworker.errors import ForeignValueError
from lockworker.model.keys import JobKeys
from lockworker.model.redrive import Redrive, decode_origin, origin_key
from lockworker.model.state import Reset
from lockworker.protocol import text
from lockworker.runtime import events
from lockworker.serving.delivery import Delivery, stream_keys
from lockworker.serving.redrive import KEEP_FAILED, entry_fields, expected, origin_of, resolved


def reset_job(
    client: redis.Redis, protocol: Any, keys: JobKeys, retention_ms: int, *,
    force: bool = False, expect: str | None = None,
) -> Redrive:
    """Reset the job of ``keys`` and re-drive it if it was resolved (module docstring).

    ``expect`` (pending, held, done, gave_up) tells the state the caller listed it in;
    without it the job is read first. Raises what the reset step raises
    (:class:`~lockworker.ForeignValueError` for foreign values, unless ``force``)."""
    was = expected(expect)
    if was is None:
        try:
            was = resolved(protocol.inspect(keys))
        except ForeignValueError:
            if not force:
                raise
            was = True  # replaced by force: whatever it was, nobody runs it
    result: Reset = protocol.reset(keys, retention_ms, force=force, expect=expect)
    if result is not Reset.RESET or not was:
        return Redrive(keys.job_id, result, was)
    origin = decode_origin(client.get(origin_key(keys)))
    if origin is None:
        return Redrive(keys.job_id, result, was)
    entry = text(client.xadd(
        stream_keys(origin.stream).extra("entries"), entry_fields(keys.job_id, origin)
    ))
    return Redrive(keys.job_id, result, was, origin.stream, entry)


def keep(worker: Any, delivery: Delivery, log: events.EventLog) -> None:
    """``serve``: keep the origin of a stream's job that gave up in ``worker``'s hands
    (one SET in the job's slot, as long as its state), for a reset to re-drive it."""
    found = origin_of(worker, delivery)
    if found is None:
        return
    try:
        worker.client.set(found[0], found[1], px=worker._retention_ms)
    except (redis.RedisError, OSError) as exc:
        log.warning(KEEP_FAILED, job_id=delivery.job_id, error=events.describe(exc))
