"""A reset on the asyncio side: :mod:`lockworker.daemons.redrive` and
:mod:`lockworker.daemons.deadletter`'s calls, awaited on a ``redis.asyncio`` client
and the asyncio protocol. What they decide is :mod:`lockworker.serving.redrive`'s."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import redis

from lockworker.errors import ForeignValueError
from lockworker.model.index import STATES
from lockworker.model.keys import JobKeys
from lockworker.model.redrive import Redrive, decode_origin, origin_key
from lockworker.model.state import Reset
from lockworker.protocol import index, text
from lockworker.runtime import events
from lockworker.serving.delivery import Delivery, stream_keys
from lockworker.serving.redrive import (
    KEEP_FAILED,
    entry_fields,
    expected,
    job_keys,
    origin_of,
    pattern,
    resolved,
)


async def reset_job_async(
    client: Any, protocol: Any, keys: JobKeys, retention_ms: int, *,
    force: bool = False, expect: str | None = None,
) -> Redrive:
    """:func:`lockworker.daemons.redrive.reset_job` on a ``redis.asyncio`` client and
    the asyncio protocol."""
    was = expected(expect)
    if was is None:
        try:
            was = resolved(await protocol.inspect(keys))
        except ForeignValueError:
            if not force:
                raise
            was = True
    result: Reset = await protocol.reset(keys, retention_ms, force=force, expect=expect)
    if result is not Reset.RESET or not was:
        return Redrive(keys.job_id, result, was)
    origin = decode_origin(await client.get(origin_key(keys)))
    if origin is None:
        return Redrive(keys.job_id, result, was)
    entry = text(await client.xadd(
        stream_keys(origin.stream).extra("entries"), entry_fields(keys.job_id, origin)
    ))
    return Redrive(keys.job_id, result, was, origin.stream, entry)


async def keep_async(worker: Any, delivery: Delivery, log: events.EventLog) -> None:
    """:func:`lockworker.daemons.redrive.keep` for the asyncio ``serve``."""
    found = origin_of(worker, delivery)
    if found is None:
        return
    try:
        await worker.client.set(found[0], found[1], px=worker._retention_ms)
    except (redis.RedisError, OSError) as exc:
        log.warning(KEEP_FAILED, job_id=delivery.job_id, error=events.describe(exc))


async def acandidates(client: Any, namespace: str, state: str) -> AsyncIterator[JobKeys]:
    """:func:`lockworker.daemons.deadletter.candidates` on a ``redis.asyncio`` client."""
    if state == "done":
        async for raw in client.scan_iter(match=pattern(namespace), count=1000):
            keys = job_keys(raw, namespace)
            if keys is not None:
                yield keys
        return
    for kind in STATES[state]:
        for e in await index.alisted(client, namespace, kind):
            yield JobKeys(namespace, e.job_id)
