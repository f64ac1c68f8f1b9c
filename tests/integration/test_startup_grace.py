"""A backup's start-up grace: started at the same moment as its primary (before the
primary registered), it leaves the first jobs to the primary; alone, it competes once
the grace (its ``backup_delay``) is over, never before."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio
from helpers import in_thread, present, wait_for

import lockworker
import lockworker.aio
from lockworker import Job, Outcome, StreamSource, submit
from lockworker.testing import RedisServer

JOBS = 12
GRACE = 5.0
"""The backups' ``backup_delay``: far longer than a primary needs to start, so the
primary below always registers within it."""
LATE = 0.5
"""How long after the backup's first reading the primary starts: a backup without the
grace takes the jobs meanwhile (they are on the stream before either starts)."""


def _worker(client: redis.Redis, namespace: str, owner: str, ran: dict[str, str],
            **kwargs: Any) -> lockworker.Worker:
    def hook(job: Job) -> None:
        ran.setdefault(job.id, owner)

    return lockworker.Worker(client, namespace=namespace, owner=owner, lock_timeout=5.0,
                             handle_signals=False, on_acquired=hook, **kwargs)


def _backlog(client: redis.Redis, namespace: str) -> None:
    for n in range(JOBS):
        submit(client, namespace, f"job-{n}")


@pytest.mark.parametrize("group", [None, "g"], ids=["fan-out", "group"])
def test_a_backup_started_before_its_primary_registers_leaves_it_the_first_jobs(
    redis_client: redis.Redis, namespace: str, group: str | None
) -> None:
    """Fan-out: it holds its deliveries back; through a group it reads no entry, which
    would be its own and nobody else's."""
    _backlog(redis_client, namespace)
    ran: dict[str, str] = {}
    workers = {
        "backup": _worker(redis_client, namespace, "backup", ran, role="backup",
                          backup_delay=GRACE),
        "primary": _worker(redis_client, namespace, "primary", ran),
    }
    extra = {} if group is None else {"group": group}

    def serve(owner: str) -> tuple[threading.Thread, dict[str, Any]]:
        return in_thread(lambda: workers[owner].serve(
            StreamSource(redis_client, namespace, owner=owner, **extra), concurrency=4))

    threads = [serve("backup")]
    try:
        # The backup has read the registrations, and found no primary: the race.
        wait_for(lambda: present(redis_client, namespace, "backup"))
        time.sleep(LATE)  # the scenario: the primary's process starts later
        threads.append(serve("primary"))
        wait_for(lambda: len(ran) == JOBS or None)
    finally:
        for w in workers.values():
            w.stop()
    for thread, box in threads:
        thread.join(timeout=10)
        assert "error" not in box
    assert ran == {f"job-{n}": "primary" for n in range(JOBS)}
    for w in workers.values():
        w.close()


def test_a_backup_alone_competes_at_its_grace_end_not_before(
    redis_client: redis.Redis, namespace: str
) -> None:
    grace = 0.4
    did: list[float] = []
    backup = lockworker.Worker(
        redis_client, namespace=namespace, owner="backup", role="backup",
        backup_delay=grace, handle_signals=False,
        on_acquired=lambda job: did.append(time.monotonic()),
    )
    started = time.monotonic()
    assert backup.process("job") is Outcome.DONE
    assert did[0] - started >= grace
    # Once: a later job, with still no primary, is competed for at once.
    again = time.monotonic()
    assert backup.process("job-2") is Outcome.DONE
    assert did[1] - again < grace
    backup.close()


def test_an_asyncio_backup_started_before_its_primary_registers_leaves_it_the_first_jobs(
    redis_client: redis.Redis, namespace: str, redis_server: RedisServer
) -> None:
    _backlog(redis_client, namespace)
    ran: dict[str, str] = {}
    primary = _worker(redis_client, namespace, "primary", ran)
    started = threading.Event()

    async def backup_side() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)

        async def hook(job: Job) -> None:
            ran.setdefault(job.id, "backup")

        backup = lockworker.aio.Worker(
            client, namespace=namespace, owner="backup", role="backup",
            backup_delay=GRACE, lock_timeout=5.0, handle_signals=False, on_acquired=hook,
        )
        serving = asyncio.ensure_future(backup.serve(
            StreamSource(redis_client, namespace, owner="backup"), concurrency=4))
        await asyncio.to_thread(wait_for, lambda: present(redis_client, namespace, "backup"))
        started.set()
        await asyncio.to_thread(wait_for, lambda: len(ran) == JOBS or None)
        backup.stop()
        await serving
        await backup.close()
        await client.aclose()

    backup_thread, backup_box = in_thread(lambda: asyncio.run(backup_side()))
    wait_for(started.is_set)
    time.sleep(LATE)  # the scenario: the primary's process starts later
    primary_thread, primary_box = in_thread(lambda: primary.serve(
        StreamSource(redis_client, namespace, owner="primary"), concurrency=4))
    wait_for(lambda: len(ran) == JOBS or None)
    primary.stop()
    for thread in (backup_thread, primary_thread):
        thread.join(timeout=10)
    assert "error" not in backup_box and "error" not in primary_box
    assert ran == {f"job-{n}": "primary" for n in range(JOBS)}
    primary.close()
