"""One contender process for the mixed-holder test of test_aio_worker.py.

    python contender_proc.py URL NAMESPACE OWNER SIDE JOB [JOB ...]

SIDE: ``sync`` (:class:`lockworker.Worker`) or ``async`` (:class:`lockworker.aio.Worker`).
The process says ``ready``, waits for the key ``NAMESPACE:go``, then processes the jobs
one after another with :func:`should_fail`'s rule, as the test's own contenders do.
Each hook entry and exit is appended as JSON (:func:`record`) to the Redis list
``NAMESPACE:events`` with ``time.monotonic()``, which is system-wide on Linux, so the
test compares the times of every process; the outcome of each job is recorded too.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import redis
import redis.asyncio

import lockworker
from lockworker.aio.worker import Worker as AsyncWorker

HOLD = 0.02
"""Seconds each attempt holds its job: long enough for others to contend meanwhile."""
LOCK_TIMEOUT = 5.0
RETRY_DELAY = 0.05


def should_fail(job: lockworker.Job) -> bool:
    """A job named ``fail-*`` fails its first attempt, so another holder takes it over."""
    return job.id.startswith("fail-") and job.attempt == 1


def record(owner: str, event: str, held: lockworker.Job | None = None, **extra: Any) -> str:
    """One event as JSON: who, what, when, and the attempt ``held``, if any."""
    entry: dict[str, Any] = {"owner": owner, "event": event, "t": time.monotonic(), **extra}
    if held is not None:
        entry.update(job=held.id, attempt=held.attempt, token=held.token)
    return json.dumps(entry)


def run_sync(client: redis.Redis, namespace: str, owner: str, jobs: list[str]) -> None:
    key = f"{namespace}:events"

    def on_acquired(job: lockworker.Job) -> None:
        client.rpush(key, record(owner, "enter", job))
        time.sleep(HOLD)  # the work
        failing = should_fail(job)
        client.rpush(key, record(owner, "exit", job, ok=not failing))
        if failing:
            raise RuntimeError("first attempt fails on purpose")

    worker = lockworker.Worker(
        client, namespace=namespace, owner=owner, lock_timeout=LOCK_TIMEOUT,
        retry_delay=RETRY_DELAY, on_acquired=on_acquired,
    )
    with worker:
        for job_id in jobs:
            outcome = worker.process(job_id)
            client.rpush(key, record(owner, "outcome", job=job_id, outcome=outcome.value))


async def run_async(url: str, namespace: str, owner: str, jobs: list[str]) -> None:
    client = redis.asyncio.Redis.from_url(url, socket_timeout=5.0)
    key = f"{namespace}:events"

    async def on_acquired(job: lockworker.Job) -> None:
        await client.rpush(key, record(owner, "enter", job))
        await asyncio.sleep(HOLD)  # the work
        failing = should_fail(job)
        await client.rpush(key, record(owner, "exit", job, ok=not failing))
        if failing:
            raise RuntimeError("first attempt fails on purpose")

    async with AsyncWorker(
        client, namespace=namespace, owner=owner, lock_timeout=LOCK_TIMEOUT,
        retry_delay=RETRY_DELAY, on_acquired=on_acquired,
    ) as worker:
        for job_id in jobs:
            outcome = await worker.process(job_id)
            await client.rpush(key, record(owner, "outcome", job=job_id, outcome=outcome.value))
    await client.aclose()


def main() -> int:
    url, namespace, owner, side, *jobs = sys.argv[1:]
    client = redis.Redis.from_url(url, socket_timeout=5.0)
    client.rpush(f"{namespace}:events", record(owner, "ready"))
    deadline = time.monotonic() + 30
    while not client.exists(f"{namespace}:go"):
        if time.monotonic() > deadline:
            return 3
        time.sleep(0.005)
    if side == "sync":
        run_sync(client, namespace, owner, jobs)
    else:
        asyncio.run(run_async(url, namespace, owner, jobs))
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
