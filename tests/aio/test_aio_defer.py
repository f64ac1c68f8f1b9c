"""asyncio serving holds a backup's deliveries back as the sync side does
(lockworker.aio.defer): behind a fast primary, every job is seen DONE elsewhere through
``process``, in a few batched looks, without listening on any job's channel."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

import lockworker
from lockworker import aio
from lockworker.aio import batcher as aio_batcher
from lockworker.aio.jobrun import AsyncJobRun
from lockworker.model.state import Outcome
from lockworker.runtime import events
from lockworker.serving import rules
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


def primary_and_backup(
    url: str, namespace: str
) -> tuple[aredis.Redis, aredis.Redis, aio.Worker, aio.Worker]:
    """A primary and a backup (``backup_delay`` 0.3 s), each on a client of its own."""
    client = aredis.Redis.from_url(url)
    backup_client = aredis.Redis.from_url(url)
    primary = aio.Worker(client, namespace=namespace, owner="primary",
                         on_acquired=lambda job: None, handle_signals=False)
    backup = aio.Worker(backup_client, namespace=namespace, owner="backup",
                        role="backup", backup_delay=0.3, on_acquired=lambda job: None,
                        handle_signals=False)
    return client, backup_client, primary, backup


def calls_of(method: str, worker: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The job ids of ``worker``'s runs that call ``AsyncJobRun.<method>``, as they do."""
    called: list[str] = []
    real = getattr(AsyncJobRun, method)

    async def counted(run: AsyncJobRun) -> Any:
        if run.w is worker:
            called.append(run.keys.job_id)
        return await real(run)

    monkeypatch.setattr(AsyncJobRun, method, counted)
    return called


def test_an_asyncio_backup_behind_a_fast_primary_resolves_every_job_in_batched_looks(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [(f"job-{i}", None) for i in range(40)]
    looks: list[int] = []
    real_send = aio_batcher.send

    async def scenario() -> tuple[list[tuple[str, Outcome]], list[str]]:
        client, backup_client, primary, backup = primary_and_backup(
            redis_server.url, namespace
        )
        subscribed = calls_of("subscribe", backup, monkeypatch)

        async def counted(c: Any, steps: Any) -> list[Any]:
            if c is backup_client:
                looks.append(len(steps))
            return await real_send(c, steps)

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
        await until(lambda: rules.deferring(backup), timeout=10)
        await asyncio.wait_for(backup.serve(jobs, concurrency=8), 30)
        await close(backup, primary, client, backup_client)
        return seen, subscribed

    seen, subscribed = asyncio.run(scenario())
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
        await until(lambda: rules.deferring(backup), timeout=10)
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


def test_an_asyncio_backup_settles_a_fast_primarys_stream_jobs_without_a_contest(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No override of process: the jobs its looks saw DONE are settled there (no run),
    each reported ``job.done_elsewhere``, and resolved to the stream, whose saved
    position moves past them all."""
    stream = f"{namespace}-s"
    sync = redis.Redis.from_url(redis_server.url)
    ids = [lockworker.submit(sync, stream, f"job-{i}") for i in range(40)]
    reported: list[str] = []

    def observe(logger: str, event: str, fields: dict[str, Any]) -> None:
        if event == events.DONE_ELSEWHERE and fields.get("owner") == "backup":
            reported.append(fields["job_id"])

    async def scenario() -> list[str]:
        client, backup_client, primary, backup = primary_and_backup(
            redis_server.url, namespace
        )
        runs = calls_of("run", backup, monkeypatch)  # a contest per job run
        await primary._presence.start()
        await primary.serve([(f"job-{i}", None) for i in range(40)], concurrency=8)
        await backup._presence.start()
        await until(lambda: rules.deferring(backup), timeout=10)
        source = lockworker.StreamSource(sync, stream, owner="backup", block=0.05)
        serving = asyncio.ensure_future(backup.serve(source, concurrency=8))
        await until(lambda: source.position() == ids[-1], timeout=20)
        backup.stop()
        await asyncio.wait_for(serving, 10)
        await close(backup, primary, client, backup_client)
        return runs

    events.add_observer(observe)
    try:
        runs = asyncio.run(scenario())
    finally:
        events.remove_observer(observe)
        sync.close()
    assert runs == []
    assert sorted(reported) == sorted(f"job-{i}" for i in range(40))
