"""``serve`` says at its start when the client's pool may run out (``serve.pool_small``).

Against a real server, sync and asyncio: a worker on a pool that lends fewer
connections than ``concurrency`` hooks and the serving's own need logs the warning
once, with the figures and the advice, and still serves every job; a pool large
enough, or one that waits for a free connection, logs nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio

from lockworker import Job, Worker
from lockworker.aio.worker import Worker as AsyncWorker
from lockworker.model.state import JobStatus
from lockworker.runtime import pools
from lockworker.testing import RedisServer
from lockworker.testing.events import capture_events

JOBS = 30


def _pool_warnings(events: list[Any]) -> list[Any]:
    return [e for e in events if e["event"] == pools.POOL_SMALL]


def _sync_client(server: RedisServer, pool: str) -> redis.Redis:
    if pool == "blocking":
        return redis.Redis(connection_pool=redis.BlockingConnectionPool(
            host=server.connect_host, port=server.port, max_connections=20
        ))
    return redis.Redis(host=server.connect_host, port=server.port,
                       max_connections=20 if pool == "small" else 200)


@pytest.mark.parametrize("pool", ["small", "large", "blocking"])
def test_serve_warns_at_its_start_about_a_pool_that_may_run_out(
    redis_server: RedisServer, namespace: str, pool: str
) -> None:
    client = _sync_client(redis_server, pool)
    worker = Worker(client, namespace=namespace, on_acquired=lambda job: None,
                    handle_signals=False)
    with capture_events() as events:
        worker.serve([(f"job-{i}", None) for i in range(JOBS)], concurrency=16)
    assert {worker.inspect(f"job-{i}").status for i in range(JOBS)} == {JobStatus.DONE}
    worker.close()
    client.close()
    warned = _pool_warnings(events)
    if pool == "small":
        assert len(warned) == 1
        assert warned[0]["log_level"] == "warning"
        assert {k: warned[0][k] for k in ("max_connections", "concurrency",
                                         "advice_max_connections")} == {
            "max_connections": 20, "concurrency": 16, "advice_max_connections": 48,
        }
    else:
        assert warned == []


@pytest.mark.parametrize("pool", ["small", "large", "blocking"])
def test_asyncio_serve_warns_at_its_start_about_a_pool_that_may_run_out(
    redis_server: RedisServer, namespace: str, pool: str
) -> None:
    async def nothing(job: Job) -> None:
        await asyncio.sleep(0)

    async def scenario() -> list[Any]:
        if pool == "blocking":
            client = redis.asyncio.Redis(connection_pool=redis.asyncio.BlockingConnectionPool(
                host=redis_server.connect_host, port=redis_server.port, max_connections=20
            ))
        else:
            client = redis.asyncio.Redis(
                host=redis_server.connect_host, port=redis_server.port,
                max_connections=20 if pool == "small" else 200,
            )
        worker = AsyncWorker(client, namespace=namespace, on_acquired=nothing,
                             handle_signals=False)
        with capture_events() as events:
            await worker.serve([(f"job-{i}", None) for i in range(JOBS)], concurrency=16)
        statuses = await asyncio.gather(*(worker.inspect(f"job-{i}") for i in range(JOBS)))
        assert {s.status for s in statuses} == {JobStatus.DONE}
        await worker.close()
        await client.aclose()
        return events

    warned = _pool_warnings(asyncio.run(scenario()))
    if pool == "small":
        assert [(w["max_connections"], w["concurrency"], w["advice_max_connections"])
                for w in warned] == [(20, 16, 48)]
    else:
        assert warned == []
