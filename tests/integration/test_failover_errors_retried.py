"""The errors a server answers during a failover are retried by lockworker's own retry
policy, with its ``redis.retry`` warnings and its ``lockworker_redis_retries_total``
count, as a lost connection is, in a thread and in a task.

Each is refused before the step runs (CLUSTERDOWN, TRYAGAIN, MASTERDOWN: the server
does not serve the slot or has no master; READONLY: a demoted master refuses the
step's first write, so nothing was written; a slot the client's map does not cover is
never sent), and every step is safe to retry after a lost reply anyway. The client
below answers the job's first step with the error, then passes every call to a real
server.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from prometheus_client import CollectorRegistry
from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    ReadOnlyError,
    SlotNotCoveredError,
    TryAgainError,
)

from lockworker import Outcome, Worker, aio
from lockworker.testing import RedisServer, capture_events

ERRORS = [
    ClusterDownError("CLUSTERDOWN The cluster is down"),
    TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
    MasterDownError("MASTERDOWN Link with MASTER is down"),
    ReadOnlyError("READONLY You can't write against a read only replica."),
    SlotNotCoveredError("Slot 866 is not covered by the cluster."),
]
IDS = [type(e).__name__ for e in ERRORS]


class FailsOnce:
    """Raise ``error`` for the first EVALSHA on job ``j``'s keys (its acquire), then pass
    through (the worker's own steps before it, on other keys, are left alone)."""

    def __init__(self, error: Exception) -> None:
        self.error: Exception | None = error

    def check(self, args: tuple[Any, ...]) -> None:
        on_the_job = any(isinstance(a, str) and ":{j}:" in a for a in args)
        if args[0] == "EVALSHA" and on_the_job and self.error is not None:
            error, self.error = self.error, None
            raise error


class SyncClient(redis.Redis):
    fault: FailsOnce

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.fault.check(args)
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


class AsyncClient(aredis.Redis):
    fault: FailsOnce

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.fault.check(args)
        return await super().execute_command(*args, **options)


def retried(logged: list[Any], error: Exception) -> list[Any]:
    return [
        e for e in logged
        if e["event"] == "redis.retry" and str(e["error"]).startswith(type(error).__name__)
    ]


def count(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("lockworker_redis_retries_total", {"step": "acquire job"})


@pytest.mark.parametrize("error", ERRORS, ids=IDS)
def test_a_thread_retries_a_failover_error_logs_it_and_counts_it(
    redis_server: RedisServer, namespace: str, metrics_registry: CollectorRegistry,
    error: Exception,
) -> None:
    client = SyncClient(host="127.0.0.1", port=redis_server.port)
    client.fault = FailsOnce(error)
    done: list[int] = []
    worker = Worker(client, namespace=namespace, handle_signals=False,
                    on_acquired=lambda job: done.append(job.attempt))
    try:
        with capture_events() as logged:
            assert worker.process("j") is Outcome.DONE
    finally:
        worker.close()
        client.close()
    assert done == [1]
    (warning,) = retried(logged, error)
    assert warning["log_level"] == "warning"
    assert warning["step"].startswith("acquire job")
    assert count(metrics_registry) == 1


@pytest.mark.parametrize("error", ERRORS, ids=IDS)
def test_a_task_retries_a_failover_error_logs_it_and_counts_it(
    redis_server: RedisServer, namespace: str, metrics_registry: CollectorRegistry,
    error: Exception,
) -> None:
    done: list[int] = []

    async def scenario() -> Outcome:
        client = AsyncClient(host="127.0.0.1", port=redis_server.port)
        client.fault = FailsOnce(error)

        async def hook(job: Any) -> None:
            done.append(job.attempt)

        try:
            async with aio.Worker(client, namespace=namespace, handle_signals=False,
                                  on_acquired=hook) as worker:
                return await worker.process("j")
        finally:
            await client.aclose()

    with capture_events() as logged:
        assert asyncio.run(scenario()) is Outcome.DONE
    assert done == [1]
    (warning,) = retried(logged, error)
    assert warning["log_level"] == "warning"
    assert warning["step"].startswith("acquire job")
    assert count(metrics_registry) == 1
