"""A delayed job in front of a stream of ordinary ones, served by an asyncio Worker with
one slot (fan-out and consumer group): the ordinary jobs all finish before the delayed
one is due, and it starts no earlier than due by the server's clock (TIME, read in the
hook), and promptly though the reader's block is longer than its delay."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio
from helpers import until

import lockworker
from lockworker import Job, StreamSource, aio
from lockworker.daemons.sources import stream_keys
from lockworker.daemons.submit import submit_job
from lockworker.protocol.delayed import delayed_key
from lockworker.testing import RedisServer

DELAY = 1.5
BLOCK = 2.5
"""Past DELAY: a reader that did not shorten its block would start the job late."""
PROMPT_MS = 700


def _ms(reply: tuple[int, int]) -> int:
    return int(reply[0]) * 1000 + int(reply[1]) // 1000


@pytest.mark.parametrize("group", [None, "g"], ids=["fan-out", "group"])
def test_an_asyncio_worker_runs_the_jobs_behind_a_delayed_one_first_holding_no_slot(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, group: str | None
) -> None:
    stream = f"{namespace}-jobs"
    late = submit_job(redis_client, stream, "late", delay=DELAY)
    assert late.entry is None and late.due_ms is not None
    ids = [f"j{i}" for i in range(10)]
    for job_id in ids:
        lockworker.submit(redis_client, stream, job_id)
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}

    async def run() -> None:
        aclient = redis.asyncio.Redis.from_url(redis_server.url)

        async def hook(job: Job) -> None:
            starts[job.id] = _ms(await aclient.time())
            ends[job.id] = _ms(await aclient.time())

        worker = aio.Worker(aclient, namespace=namespace, owner="a", lock_timeout=5.0,
                            on_acquired=hook)
        source = StreamSource(redis_client, stream, owner="a", group=group, block=BLOCK)
        serving = asyncio.ensure_future(worker.serve(source, concurrency=1))
        await until(lambda: "late" in ends or serving.done(), timeout=DELAY + BLOCK + 15)
        worker.stop()
        # the reader notices the stop when its XREAD returns: an entry ends the block now
        lockworker.submit(redis_client, stream, "end-of-test")
        await asyncio.wait_for(serving, BLOCK + 10)
        await worker.close()
        await aclient.aclose()

    asyncio.run(run())
    assert sorted(starts) == sorted([*ids, "late"])
    assert max(ends[j] for j in ids) < late.due_ms
    assert late.due_ms <= starts["late"] < late.due_ms + PROMPT_MS
    assert redis_client.zcard(delayed_key(stream_keys(stream))) == 0
