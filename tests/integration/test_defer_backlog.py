"""A backup beside a primary that works through a backlog, end to end on a real server.

Both serve the same jobs. While the primary moves through them (it resolves a job
every few milliseconds), the backup leaves the jobs it has not reached to it, however
long the backlog lasts, instead of competing for each one once it has lain free for
``backup_delay``: the two would read the same jobs in the same order and contend for
each. A primary that stops moving (every slot stuck) gets the backup's help again
``backup_delay`` after it last resolved a job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import lockworker
from lockworker.serving import rules
from tests.helpers import wait_for


def worker(
    client: redis.Redis, namespace: str, role: str, on_acquired: Callable[[Any], None],
    backup_delay: float = 0.0,
) -> lockworker.Worker:
    return lockworker.Worker(
        redis.Redis(connection_pool=client.connection_pool), namespace=namespace,
        owner=role, role=role, backup_delay=backup_delay, handle_signals=False,
        on_acquired=on_acquired,
    )


def pair(
    client: redis.Redis, namespace: str, ran: dict[str, list[str]],
    work: Callable[[Any], None], backup_delay: float,
) -> tuple[lockworker.Worker, lockworker.Worker]:
    """A primary that runs ``work`` before recording a job, and a backup that records
    its jobs (who ran each: ``ran``), both registered, the backup seeing the primary."""
    lock = threading.Lock()

    def record(owner: str) -> Callable[[Any], None]:
        def on_acquired(job: Any) -> None:
            if owner == "primary":
                work(job)
            with lock:
                ran.setdefault(job.id, []).append(owner)

        return on_acquired

    primary = worker(client, namespace, "primary", record("primary"))
    backup = worker(client, namespace, "backup", record("backup"), backup_delay=backup_delay)
    primary._presence.start()
    backup._presence.start()
    wait_for(lambda: rules.deferring(backup), timeout=10)
    return primary, backup


@pytest.fixture
def ran() -> dict[str, list[str]]:
    """Who ran each job: ``{job id: [owner, ...]}``."""
    return {}


def test_a_backup_leaves_a_moving_primarys_backlog_to_it(
    redis_client: redis.Redis, namespace: str, ran: dict[str, list[str]]
) -> None:
    """A backlog of about 2 s for the primary (one slot, 4 ms a job), a backup that lets
    a free job lie 1 s: every job is run once, all of them by the primary. Before, the
    backup competed for every job the primary had not reached 1 s after it came."""
    def slow(job: Any) -> None:
        time.sleep(0.004)  # the primary's work: a backlog it needs seconds for

    primary, backup = pair(redis_client, namespace, ran, slow, backup_delay=1.0)
    jobs = [(f"job-{i}", None) for i in range(500)]
    threads = [
        threading.Thread(target=primary.serve, args=(jobs,), kwargs={"concurrency": 1}),
        threading.Thread(target=backup.serve, args=(jobs,), kwargs={"concurrency": 4}),
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        threads[0].join(60)
        took = time.monotonic() - started
        threads[1].join(30)
    finally:
        for w in (backup, primary):
            w.stop()
            w.close()
    assert not any(t.is_alive() for t in threads)
    assert ran == {job_id: ["primary"] for job_id, _ in jobs}
    assert took > 1.5  # the backlog outlasted backup_delay


def test_a_backup_helps_a_primary_whose_every_slot_is_stuck(
    redis_client: redis.Redis, namespace: str, ran: dict[str, list[str]]
) -> None:
    """The primary's one slot hangs in its first job: nothing is resolved, so the backup
    takes the rest about ``backup_delay`` after they came, while the primary still
    serves (its registration lives, its stuck job's lease is renewed)."""
    release = threading.Event()
    primary, backup = pair(
        redis_client, namespace, ran, lambda job: release.wait(30), backup_delay=0.3
    )
    jobs = [(f"job-{i}", None) for i in range(5)]
    serving = threading.Thread(target=primary.serve, args=(jobs,), kwargs={"concurrency": 1})
    serving.start()
    wait_for(lambda: backup.inspect("job-0").holder == "primary", timeout=10)
    started = time.monotonic()
    helping = threading.Thread(target=backup.serve, args=(jobs,), kwargs={"concurrency": 4})
    helping.start()
    try:
        wait_for(lambda: len(ran) == 4, timeout=10)
        took = time.monotonic() - started
        assert rules.deferring(backup)  # the primary still serves
        release.set()
        serving.join(30)
        helping.join(30)
    finally:
        release.set()
        for w in (backup, primary):
            w.stop()
            w.close()
    assert ran == {"job-0": ["primary"], **{f"job-{i}": ["backup"] for i in range(1, 5)}}
    assert 0.3 - 0.06 <= took < 2.0
