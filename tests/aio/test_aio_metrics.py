"""lockworker.metrics counts the asyncio objects as it counts the sync ones."""

from __future__ import annotations

import asyncio

import redis.asyncio as aredis
from prometheus_client import CollectorRegistry

import lockworker
from lockworker import aio
from lockworker.testing.server import RedisServer


def test_an_async_hook_that_raises_once_is_one_failure_then_done(
    metrics_registry: CollectorRegistry, redis_server: RedisServer, namespace: str
) -> None:
    calls: list[int] = []

    async def flaky(job: lockworker.Job) -> None:
        calls.append(job.attempt)
        if job.attempt == 1:
            raise RuntimeError("first attempt fails")

    async def scenario() -> lockworker.Outcome:
        client = aredis.Redis(host="127.0.0.1", port=redis_server.port)
        async with aio.Worker(
            client, namespace=namespace, on_acquired=flaky, retry_delay=0, handle_signals=False
        ) as worker:
            outcome = await worker.process("invoice-1")
        await client.aclose()
        return outcome

    assert asyncio.run(scenario()) is lockworker.Outcome.DONE
    assert calls == [1, 2]

    def sample(metric: str, **labels: str) -> float | None:
        return metrics_registry.get_sample_value(metric, {"namespace": namespace, **labels})

    assert sample("lockworker_job_outcomes_total", outcome="failed") == 1
    assert sample("lockworker_job_outcomes_total", outcome="done") == 1
    assert sample("lockworker_attempt_duration_seconds_count") == 2
    assert sample("lockworker_leases_held") == 0


def test_the_leader_gauge_follows_an_async_leader(
    metrics_registry: CollectorRegistry, redis_server: RedisServer, namespace: str
) -> None:
    def leading() -> float | None:
        return metrics_registry.get_sample_value("lockworker_leader", {"name": namespace})

    async def scenario() -> list[float | None]:
        client = aredis.Redis(host="127.0.0.1", port=redis_server.port)
        seen: list[float | None] = []

        async def lead(term: aio.AsyncTerm) -> None:
            seen.append(leading())
            leader.stop()

        leader = aio.Leader(client, name=namespace, on_acquired=lead, handle_signals=False)
        await asyncio.wait_for(leader.run(), 10)
        seen.append(leading())
        await client.aclose()
        return seen

    assert asyncio.run(scenario()) == [1, 0]
