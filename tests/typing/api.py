"""Typed usage of the public API, checked by mypy strict (never run).

If a public signature changes in a way that breaks callers, mypy fails here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import NoReturn

import redis
import redis.asyncio

import lockworker
from lockworker.aio.lock import Lock as AsyncLock
from lockworker.aio.once import compute_once as acompute_once
from lockworker.aio.semaphore import Semaphore as AsyncSemaphore
from lockworker.testing import FakeClock


class Digest(lockworker.Worker):
    def on_acquired(self, job: lockworker.Job) -> None:
        token: int = job.token
        attempt: int = job.attempt
        last: bool = job.is_last_attempt
        lost: bool = job.lost
        job.check()
        del token, attempt, last, lost

    def on_locked(self, job: lockworker.Job) -> None:
        holder: str | None = job.holder
        del holder

    def on_failed(self, job: lockworker.Job, exc: BaseException) -> None: ...

    def on_lost(self, job: lockworker.Job) -> None: ...

    def on_gave_up(self, job: lockworker.Job) -> None: ...


def use_worker(client: redis.Redis) -> lockworker.Outcome:
    worker = Digest(
        client, namespace="digest", lock_timeout=5.0, max_attempts=5, owner="a",
        retention=3600.0, clock=FakeClock(),
    )
    outcome = worker.process("2026-11-22", payload={"list": "weekly"})
    seen: lockworker.Snapshot = worker.inspect("2026-11-22")
    status: lockworker.JobStatus = seen.status
    del status
    worker.stop()
    worker.close()
    return outcome


def use_functional(client: redis.Redis) -> None:
    def work(job: lockworker.Job) -> None: ...

    with lockworker.Worker(client, namespace="x", on_acquired=work) as worker:
        worker.serve([("a", None), ("b", {"n": 1})], concurrency=2)


def use_leader(client: redis.Redis) -> None:
    class Scheduler(lockworker.Leader):
        def on_acquired(self, term: lockworker.Term) -> None:
            while not term.lost:
                term.wait(1.0)

    Scheduler(client, name="scheduler", lock_timeout=5.0, role="primary").run()
    info = lockworker.Leader.current(client, "scheduler")
    if info is not None:
        holder: str = info.holder
        del holder


def use_primitives(client: redis.Redis) -> None:
    with lockworker.Lock(client, "report", ttl=10.0) as lock:
        fencing: int | None = lock.token
        del fencing
    with lockworker.Semaphore(client, "pool", 3):
        pass
    value: object = lockworker.compute_once(client, "k", lambda: {"a": 1}, ttl=60.0)
    del value
    lockworker.submit(client, "stream", "job-1", {"a": 1})
    waiting: str = lockworker.submit(client, "stream", "job-2", delay=30.0)
    del waiting
    lockworker.submit(client, "stream", "job-3", at=datetime(2030, 1, 1, tzinfo=timezone.utc))


async def use_asyncio_primitives(client: redis.asyncio.Redis) -> None:
    async with AsyncLock(client, "report", ttl=10.0, auto_renew=True) as lock:
        fencing: int | None = lock.token
        await lock.extend(20.0)
        del fencing
    lock = AsyncLock(client, "report", timeout=1.0)
    if await lock.acquire(blocking=False):
        owned: bool = await lock.owned()
        await lock.release()
        del owned
    async with AsyncSemaphore(client, "pool", 3) as permit:
        taken: int = await permit.holders()
        del taken

    async def build() -> dict[str, int]:
        return {"a": 1}

    value: object = await acompute_once(client, "k", build, ttl=60.0, lock_timeout=5.0)
    del value


def errors() -> None:
    try:
        raise lockworker.LockLost("gone")
    except lockworker.LockworkerError:
        pass


def use_every_hook_in_functional_form(client: redis.Redis) -> str:
    """The functional form takes each hook with the same signature as the method."""

    def failed(job: lockworker.Job, exc: BaseException) -> None: ...

    def noted(job: lockworker.Job) -> None: ...

    worker = lockworker.Worker(
        client, namespace="x", lock_timeout=1.5, max_attempts=2, retry_delay=0.1,
        protocol="txn", handle_signals=False, role="backup", backup_delay=0.2,
        on_acquired=noted, on_locked=noted, on_failed=failed, on_lost=noted,
        on_gave_up=noted,
    )
    outcome = worker.process("job")
    return describe(outcome)


def assert_never(value: NoReturn) -> NoReturn:
    """typing.assert_never arrived in 3.11; this package supports 3.10."""
    raise AssertionError(f"unhandled: {value!r}")


def describe(outcome: lockworker.Outcome) -> str:
    """Outcome is an enum mypy can check exhaustively."""
    if outcome is lockworker.Outcome.DONE:
        return "done here"
    if outcome is lockworker.Outcome.DONE_ELSEWHERE:
        return "done elsewhere"
    if outcome is lockworker.Outcome.GAVE_UP:
        return "gave up"
    if outcome is lockworker.Outcome.STOPPED:
        return "stopped"
    assert_never(outcome)


def fencing_check(job: lockworker.Job, last_token_seen: int) -> bool:
    """How a downstream store rejects a stale holder: tokens only grow."""
    return job.token > last_token_seen
