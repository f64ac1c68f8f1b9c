"""The asyncio retry path: connection errors are retried, then reported, as in a thread."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from lockworker import RedisUnavailable
from lockworker.clock import SystemClock
from lockworker.runtime.retry import RetryPolicy, acall


def test_a_step_that_fails_then_succeeds_returns_the_awaited_result() -> None:
    tries: list[int] = []

    async def step() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise redis.ConnectionError("reset")
        return "ok"

    result = asyncio.run(
        acall(
            lambda: step(),  # noqa: PLW0108 (the library's form: a lambda returning a coroutine)
            clock=SystemClock(), policy=RetryPolicy(budget=5.0), what="read",
        )
    )
    assert result == "ok"
    assert len(tries) == 3


def test_a_step_that_keeps_failing_is_reported_as_redis_unavailable() -> None:
    async def step() -> Any:
        raise redis.ConnectionError("refused")

    with pytest.raises(RedisUnavailable, match="acquire job"):
        asyncio.run(
            acall(
                lambda: step(),  # noqa: PLW0108 (the library's form: a lambda returning a coroutine)
                clock=SystemClock(),
                policy=RetryPolicy(budget=0.2, initial=0.01, maximum=0.02),
                what="acquire job",
            )
        )


def test_an_unreachable_server_makes_an_asyncio_worker_raise_redis_unavailable() -> None:
    import redis.asyncio as aredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    from lockworker import aio
    from lockworker.testing.server import free_port

    async def scenario() -> None:
        client = aredis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
        worker = aio.Worker(
            client, namespace="n", on_acquired=lambda job: None, handle_signals=False,
            redis_retry=RetryPolicy(budget=0.3, initial=0.01, maximum=0.05),
        )
        try:
            with pytest.raises(RedisUnavailable, match="acquire job"):
                await worker.process("a")
        finally:
            await worker.close()
            await client.aclose()

    asyncio.run(scenario())
