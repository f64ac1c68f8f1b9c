"""A failing holder hands its lease back before it logs ``job.failed``.

A backup waiting for the job should not also wait for the application's log handlers
to render a warning and its traceback: the failure's record is on the server, and the
lease free, by the time the event is logged, sync and asyncio alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from collections.abc import Iterator
from typing import TypeVar

import pytest
import redis
import redis.asyncio
import structlog

import lockworker
from lockworker import aio
from lockworker.cli import logs
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
        if getattr(record, "event", None) == events.FAILED:
            self.lease_there.append(bool(self.client.exists(self.keys.lock)))


@pytest.fixture
def lease_at_failed(redis_client: redis.Redis, namespace: str) -> Iterator[LeaseAtFailed]:
    """The handler on lockworker's logger, structlog as an application that never
    configured it (events go to ``logging``)."""
    with on_lockworker_logger(LeaseAtFailed(redis_client, JobKeys.of(namespace, "j"))) as h:
        yield h


H = TypeVar("H", bound=logging.Handler)


@contextlib.contextmanager
def on_lockworker_logger(handler: H) -> Iterator[H]:
    """``handler`` on lockworker's logger while structlog is unconfigured, as in an
    application that never configured it; both put back as they were."""
    was_configured, saved = structlog.is_configured(), structlog.get_config()
    structlog.reset_defaults()
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


class Kept(logging.Handler):
    """Every record reaching the handler's logger."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> Iterator[Kept]:
    """A handler on lockworker's logger, structlog unconfigured (events go to ``logging``)."""
    with on_lockworker_logger(Kept()) as handler:
        yield handler


def failed_shown(kept: Kept) -> str:
    """The ``job.failed`` record as ``logging.basicConfig`` shows it."""
    (record,) = [r for r in kept.records if getattr(r, "event", None) == events.FAILED]
    return logging.Formatter(logging.BASIC_FORMAT).format(record)


def test_job_failed_shows_the_failure_and_its_traceback_under_plain_logging(
    redis_client: redis.Redis, namespace: str, kept: Kept
) -> None:
    worker = lockworker.Worker(
        redis_client, namespace=namespace, on_acquired=boom, max_attempts=1,
        retry_delay=0.0, handle_signals=False,
    )
    try:
        worker.process("j")
    finally:
        worker.close()
    shown = failed_shown(kept)
    first, *trace = shown.splitlines()
    assert first.startswith(
        "WARNING:lockworker.daemons.worker:job.failed job_id=j namespace="
    )
    assert " attempt=1 " in first and "error=\"RuntimeError('attempt 1 fails')\"" in first
    assert trace[0] == "Traceback (most recent call last):"
    assert any(line.endswith(", in boom") for line in trace)
    assert trace[-1] == "RuntimeError: attempt 1 fails"


def test_an_asyncio_worker_s_job_failed_carries_the_traceback(
    redis_server: RedisServer, namespace: str, kept: Kept
) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        worker = aio.Worker(
            client, namespace=namespace, on_acquired=boom, max_attempts=1,
            retry_delay=0.0, handle_signals=False,
        )
        try:
            await worker.process("j")
        finally:
            await worker.close()
            await client.aclose()

    asyncio.run(scenario())
    shown = failed_shown(kept)
    assert "job.failed job_id=j " in shown and ", in boom\n" in shown
    assert shown.endswith("RuntimeError: attempt 1 fails")


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_the_command_s_logs_show_job_failed_s_traceback(
    redis_client: redis.Redis, namespace: str, fmt: str
) -> None:
    was_configured, saved = structlog.is_configured(), structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out = io.StringIO()
    try:
        logs.configure(fmt, "info", out)
        worker = lockworker.Worker(
            redis_client, namespace=namespace, on_acquired=boom, max_attempts=1,
            retry_delay=0.0, handle_signals=False,
        )
        try:
            worker.process("j")
        finally:
            worker.close()
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        if was_configured:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()
    if fmt == "json":
        lines = [json.loads(line) for line in out.getvalue().splitlines()]
        (failed,) = [line for line in lines if line["event"] == events.FAILED]
        assert failed["error"] == "RuntimeError('attempt 1 fails')"
        assert ", in boom\n" in failed["exception"]
        assert failed["exception"].endswith("RuntimeError: attempt 1 fails")
    else:
        text = out.getvalue()
        assert "job.failed" in text and "in boom" in text.split("job.failed", 1)[1]
