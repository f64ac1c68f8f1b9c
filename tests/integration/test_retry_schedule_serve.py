"""A job waiting for its next attempt under ``serve``: it holds no slot, the other jobs
are served meanwhile, it is retried when due with no new entries arriving, and its due
time outlives every process (it is on the server)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from helpers import wait_for

import lockworker
from lockworker import Job, Outcome, aio
from lockworker.testing import RedisServer

BACK_OFF = 1.5
OTHERS = [f"other-{i}" for i in range(5)]


class Record:
    """What the hooks saw: each attempt's start, and when the flaky job failed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: list[tuple[str, int, float]] = []
        self.failed_at = 0.0
        self.flaky_done = threading.Event()

    def hook(self, job: Job) -> None:
        with self.lock:
            self.starts.append((job.id, job.attempt, time.monotonic()))
        if job.id == "flaky":
            if job.attempt == 1:
                self.failed_at = time.monotonic()
                raise lockworker.Retry(after=BACK_OFF)
            self.flaky_done.set()

    def check(self) -> None:
        flaky = [s for s in self.starts if s[0] == "flaky"]
        assert [s[1] for s in flaky] == [1, 2], self.starts
        second = flaky[1][2]
        others = [s for s in self.starts if s[0] in OTHERS]
        assert sorted(s[0] for s in others) == OTHERS
        # Every other job ran while the flaky one waited, in the one slot there is ...
        assert all(s[2] < second for s in others), self.starts
        # ... and the flaky one ran again when due, not sooner.
        assert second - self.failed_at >= BACK_OFF - 0.002, (second, self.failed_at)
        assert second - self.failed_at < BACK_OFF + 3.0


def test_a_job_backing_off_holds_no_slot_and_is_retried_when_due(
    redis_client: redis.Redis, namespace: str
) -> None:
    record = Record()

    def source() -> Iterator[tuple[str, Any]]:
        yield "flaky", None
        yield from ((job_id, None) for job_id in OTHERS)
        # No new entries until the flaky job is done: its retry comes from its timer.
        record.flaky_done.wait(15)

    with lockworker.Worker(
        redis_client, namespace=namespace, handle_signals=False, lock_timeout=2.0,
        on_acquired=record.hook,
    ) as worker:
        worker.serve(source(), concurrency=1)
    record.check()


def test_an_asyncio_job_backing_off_holds_no_slot_and_is_retried_when_due(
    redis_server: RedisServer, namespace: str
) -> None:
    record = Record()

    async def source() -> AsyncIterator[tuple[str, Any]]:
        yield "flaky", None
        for job_id in OTHERS:
            yield job_id, None
        await asyncio.to_thread(record.flaky_done.wait, 15)

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        async with aio.Worker(
            client, namespace=namespace, handle_signals=False, lock_timeout=2.0,
            on_acquired=record.hook,
        ) as worker:
            await worker.serve(source(), concurrency=1)
        await client.aclose()

    asyncio.run(main())
    record.check()


@pytest.mark.parametrize("protocol", ["script", "txn"])
def test_the_due_time_outlives_every_process(
    redis_client: redis.Redis, namespace: str, protocol: str
) -> None:
    """The process that failed the job is gone, and so is every other: a new one (new
    run, new owner) still waits until the job is due, and ``inspect`` says how long."""
    failed_at: list[float] = []

    def fail(job: Job) -> None:
        failed_at.append(time.monotonic())
        raise lockworker.Retry(after=BACK_OFF)

    first = lockworker.Worker(
        redis_client, namespace=namespace, handle_signals=False, owner="first",
        on_acquired=fail, protocol=protocol,
    )
    thread = threading.Thread(target=first.process, args=("job",), daemon=True)
    thread.start()
    wait_for(lambda: failed_at and first.inspect("job").due_ms is not None, timeout=10)
    first.stop()
    thread.join(10)
    first.close()

    started: list[float] = []
    second = lockworker.Worker(
        redis_client, namespace=namespace, handle_signals=False, owner="second",
        on_acquired=lambda job: started.append(time.monotonic()), protocol=protocol,
    )
    seen = second.inspect("job")
    assert seen.due_ms is not None and 0 < seen.due_ms <= BACK_OFF * 1000, seen
    assert second.process("job") is Outcome.DONE
    second.close()
    assert started[0] - failed_at[0] >= BACK_OFF - 0.002
