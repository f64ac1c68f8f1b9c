"""asyncio workers on a Sentinel-managed master: their batches go to the master as
redis-py pipelines, and a crash of that master
mid-run is ridden out by lockworker's retries onto the promoted replica."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio.sentinel import Sentinel

from lockworker import JobStatus, RetryPolicy, aio
from lockworker.testing import SentinelGroup

pytestmark = pytest.mark.processes  # real server processes, started and crashed

JOBS = 120
RIDE_OUT = RetryPolicy(budget=30.0)
"""Longer than any failover here: these workers must never give up."""


def master_for(group: SentinelGroup) -> Any:
    sentinel = Sentinel(group.sentinels, socket_timeout=2.0)  # type: ignore[no-untyped-call]
    return sentinel.master_for(group.master_name)  # type: ignore[no-untyped-call]


def test_an_asyncio_worker_serves_batches_on_the_master_the_sentinels_name(
    redis_sentinel: SentinelGroup, namespace: str
) -> None:
    ran: list[str] = []

    async def scenario() -> list[Any]:
        client = master_for(redis_sentinel)
        worker = aio.Worker(client, namespace=namespace, handle_signals=False,
                            on_acquired=lambda job: ran.append(job.id))
        try:
            await worker.serve([(f"job-{i}", None) for i in range(40)], concurrency=16)
            return [(await worker.inspect(f"job-{i}")).status for i in range(40)]
        finally:
            await worker.close()
            await client.aclose()

    assert asyncio.run(scenario()) == [JobStatus.DONE] * 40
    assert sorted(ran) == sorted(f"job-{i}" for i in range(40))


def test_an_asyncio_worker_rides_out_a_master_crash_and_tokens_never_go_back(
    namespace: str,
) -> None:
    runs: list[tuple[str, int]] = []

    async def scenario(group: SentinelGroup) -> tuple[list[Any], tuple[str, int], tuple[str, int]]:
        client = master_for(group)
        crossed = asyncio.Event()

        async def hook(job: Any) -> None:
            runs.append((job.id, job.token))
            if len(runs) >= 30:
                crossed.set()
            await asyncio.sleep(0.01)  # the work: jobs are in flight when the master dies

        worker = aio.Worker(client, namespace=namespace, lock_timeout=2.0, handle_signals=False,
                            redis_retry=RIDE_OUT, on_acquired=hook)
        try:
            serving = asyncio.ensure_future(
                worker.serve([(f"job-{i}", None) for i in range(JOBS)], concurrency=8)
            )
            await asyncio.wait_for(crossed.wait(), 30)
            old = group.kill_master()
            new = await asyncio.to_thread(group.wait_for_failover, 30)
            await asyncio.wait_for(serving, 60)
            seen = [(await worker.inspect(f"job-{i}")).status for i in range(JOBS)]
            return seen, old, new
        finally:
            await worker.close()
            await client.aclose()

    with SentinelGroup() as group:
        seen, old, new = asyncio.run(scenario(group))
    assert new != old
    assert seen == [JobStatus.DONE] * JOBS
    assert {job for job, _ in runs} == {f"job-{i}" for i in range(JOBS)}
    last: dict[str, int] = {}
    for job, token in runs:  # a job run again (a write the crash lost) never goes back
        assert token > last.get(job, 0), (job, token, last.get(job))
        last[job] = token
