"""asyncio serving holds a backup's deliveries back as the sync side does
(lockworker.aio.defer): behind a fast primary, every job is seen DONE elsewhere through
``process``, in a few batched looks, without listening on any job's channel."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aredis

from lockworker import aio
from lockworker.aio import batcher as aio_batcher
from lockworker.aio.jobrun import AsyncJobRun
from lockworker.daemons import defer
from lockworker.model.state import Outcome
from lockworker.testing.server import RedisServer
from tests.helpers import until


async def close(*objects: Any) -> None:
    """Stop and close the workers, then close the clients, in that order."""
    for w in objects:
        if isinstance(w, aio.Worker):
            w.stop()
            await w.close()
    for c in objects:
        if isinstance(c, aredis.Redis):
            await c.aclose()


def test_an_asyncio_backup_behind_a_fast_primary_resolves_every_job_in_batched_looks(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [(f"job-{i}", None) for i in range(40)]
    subscribed: list[str] = []
    real_subscribe = AsyncJobRun.subscribe
    looks: list[int] = []
    real_send = aio_batcher.send

    async def scenario() -> list[tuple[str, Outcome]]:
        client = aredis.Redis.from_url(redis_server.url)
        backup_client = aredis.Redis.from_url(redis_server.url)
        primary = aio.Worker(client, namespace=namespace, owner="primary",
                             on_acquired=lambda job: None, handle_signals=False)
        backup = aio.Worker(backup_client, namespace=namespace, owner="backup",
                            role="backup", backup_delay=0.3, on_acquired=lambda job: None,
                            handle_signals=False)

        async def subscribe(run: AsyncJobRun) -> bool:
            if run.w is backup:
                subscribed.append(run.keys.job_id)
            return await real_subscribe(run)

        async def counted(c: Any, steps: Any) -> list[Any]:
            if c is backup_client:
                looks.append(len(steps))
            return await real_send(c, steps)

        monkeypatch.setattr(AsyncJobRun, "subscribe", subscribe)
        monkeypatch.setattr(aio_batcher, "send", counted)
        monkeypatch.setattr("lockworker.aio.defer.send", counted)
        seen: list[tuple[str, Outcome]] = []
        real_process = backup.process

        async def process(job_id: str, payload: Any = None) -> Outcome:
            outcome = await real_process(job_id, payload)
            seen.append((job_id, outcome))
            return outcome

        backup.process = process  # type: ignore[method-assign]
        await primary._presence.start()
        await primary.serve(jobs, concurrency=8)
        await backup._presence.start()
        await until(lambda: defer.deferring(backup), timeout=10)
        await asyncio.wait_for(backup.serve(jobs, concurrency=8), 30)
        await close(backup, primary, client, backup_client)
        return seen

    seen = asyncio.run(scenario())
    assert sorted(seen) == sorted((j, Outcome.DONE_ELSEWHERE) for j, _ in jobs)
    assert subscribed == []
    assert sum(looks) == 40 and len(looks) <= 6


def test_an_asyncio_backup_leaves_a_moving_primarys_backlog_to_it(
    redis_server: RedisServer, namespace: str
) -> None:
    """As on the sync side (tests/integration/test_defer_backlog.py): a backlog of about
    2 s for the primary, a backup that lets a free job lie 1 s: the primary runs every
    job, the backup none."""
    jobs = [(f"job-{i}", None) for i in range(500)]
    ran: dict[str, list[str]] = {}

    async def scenario() -> float:
        client = aredis.Redis.from_url(redis_server.url)
        backup_client = aredis.Redis.from_url(redis_server.url)

        async def slow(job: Any) -> None:
            await asyncio.sleep(0.004)  # the primary's work: a backlog of seconds
            ran.setdefault(job.id, []).append("primary")

        primary = aio.Worker(client, namespace=namespace, owner="primary",
                             on_acquired=slow, handle_signals=False)
        backup = aio.Worker(backup_client, namespace=namespace, owner="backup",
                            role="backup", backup_delay=1.0,
                            on_acquired=lambda job: ran.setdefault(job.id, []).append("backup"),
                            handle_signals=False)
        await primary._presence.start()
        await backup._presence.start()
        await until(lambda: defer.deferring(backup), timeout=10)
        loop = asyncio.get_running_loop()
        started = loop.time()
        helping = asyncio.ensure_future(backup.serve(jobs, concurrency=4))
        await asyncio.wait_for(primary.serve(jobs, concurrency=1), 60)
        took = loop.time() - started
        await asyncio.wait_for(helping, 30)
        await close(backup, primary, client, backup_client)
        return took

    took = asyncio.run(scenario())
    assert ran == {job_id: ["primary"] for job_id, _ in jobs}
    assert took > 1.5  # the backlog outlasted backup_delay
