"""A failing holder hands its lease back before it logs ``job.failed``.

A backup waiting for the job should not also wait for the application's log handlers
to render a warning and its traceback: the failure's record is on the server, and the
lease free, by the time the event is logged, sync and asyncio alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio
import structlog

import lockworker
from lockworker import aio
from lockworker.model.keys import JobKeys
from lockworker.runtime import events
from lockworker.testing import RedisServer


class LeaseAtFailed(logging.Handler):
    """Whether the job's lease was still on the server each time ``job.failed`` was
    logged (read from the handler, as the event is emitted)."""

    def __init__(self, client: redis.Redis, keys: JobKeys) -> None:
        super().__init__(logging.WARNING)
        self.client = client
        self.keys = keys
        self.lease_there: list[bool] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == events.FAILED:
            self.lease_there.append(bool(self.client.exists(self.keys.lock)))


@pytest.fixture
def lease_at_failed(redis_client: redis.Redis, namespace: str) -> Iterator[LeaseAtFailed]:
    """The handler on lockworker's logger, structlog as an application that never
    configured it (events go to ``logging``)."""
    was_configured, saved = structlog.is_configured(), structlog.get_config()
    structlog.reset_defaults()
    handler = LeaseAtFailed(redis_client, JobKeys.of(namespace, "j"))
    logger = logging.getLogger("lockworker")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        if was_configured:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()


def boom(job: lockworker.Job) -> None:
    raise RuntimeError(f"attempt {job.attempt} fails")


def test_a_worker_logs_job_failed_once_its_lease_is_handed_back(
    redis_client: redis.Redis, namespace: str, lease_at_failed: LeaseAtFailed
) -> None:
    worker = lockworker.Worker(
        redis_client, namespace=namespace, on_acquired=boom, max_attempts=1,
        retry_delay=0.0, handle_signals=False,
    )
    try:
        assert worker.process("j") is lockworker.Outcome.GAVE_UP
    finally:
        worker.close()
    assert lease_at_failed.lease_there == [False]


def test_an_asyncio_worker_logs_job_failed_once_its_lease_is_handed_back(
    redis_server: RedisServer, namespace: str, lease_at_failed: LeaseAtFailed
) -> None:
    async def scenario() -> lockworker.Outcome:
        client = redis.asyncio.Redis(port=redis_server.port)
        worker = aio.Worker(
            client, namespace=namespace, on_acquired=boom, max_attempts=1,
            retry_delay=0.0, handle_signals=False,
        )
        try:
            return await worker.process("j")
        finally:
            await worker.close()
            await client.aclose()

    assert asyncio.run(scenario()) is lockworker.Outcome.GAVE_UP
    assert lease_at_failed.lease_there == [False]
