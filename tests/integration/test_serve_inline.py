"""``serve`` at concurrency 1 in the serving thread (lockworker.daemons.inline).

Against a real server: the serving thread claims the deliveries a stream has read
already in one round trip and runs each granted job's hook itself; a DONE never
waits for the hook after it; a stop releases the granted jobs whose hooks did not
start without spending their attempts; a granted job whose lease was lost while it
waited for its turn does not run its hook on that lease.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import pytest
import redis
from helpers import wait_for

import lockworker
from lockworker import Job, Worker
from lockworker.daemons import inline, lane
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus
from lockworker.protocol import script


def stream_of(client: redis.Redis, namespace: str, jobs: list[str]) -> lockworker.StreamSource:
    stream = f"{namespace}-jobs"
    for job_id in jobs:
        lockworker.submit(client, stream, job_id, {"id": job_id})
    return lockworker.StreamSource(client, stream, owner="reader", block=0.05)


def stop_when_done(worker: Worker, jobs: list[str]) -> threading.Thread:
    """Stop ``worker`` once every one of ``jobs`` is DONE on the server (or after 10 s:
    the test's assertions then say what is missing)."""
    def watch() -> None:
        try:
            wait_for(lambda: all(worker.inspect(j).status is JobStatus.DONE for j in jobs), 10)
        finally:
            worker.stop()
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


class Claims:
    """The acquire steps of each round trip the serving sends."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.per_trip: list[int] = []
        real = lane.send

        def send(client: Any, steps: list[Any]) -> list[Any]:
            self.per_trip.append(sum(step.script is script._ACQUIRE for step in steps))
            return real(client, steps)

        monkeypatch.setattr(lane, "send", send)


def test_the_serving_thread_claims_what_was_read_together_and_runs_each_hook_once(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [f"job-{i}" for i in range(40)]
    claims = Claims(monkeypatch)
    ran: collections.Counter[str] = collections.Counter()
    threads: set[str] = set()

    def work(job: Job) -> None:
        ran[job.id] += 1
        threads.add(threading.current_thread().name)

    worker = Worker(redis_client, namespace=namespace, on_acquired=work, handle_signals=False)
    watcher = stop_when_done(worker, jobs)
    worker.serve(stream_of(redis_client, namespace, jobs), concurrency=1)
    watcher.join()
    statuses = {worker.inspect(j).status for j in jobs}
    worker.close()
    assert ran == collections.Counter({j: 1 for j in jobs})
    assert statuses == {JobStatus.DONE}
    assert threads == {threading.current_thread().name}  # no pool thread ran a hook
    assert sum(claims.per_trip) == len(jobs)
    assert max(claims.per_trip) == inline.CLAIM_AHEAD  # read ahead: claimed together
    assert len([n for n in claims.per_trip if n]) <= len(jobs) // 4


def test_a_done_is_on_the_server_while_the_next_hook_still_runs(
    redis_client: redis.Redis, namespace: str
) -> None:
    """The second hook waits for the first job's DONE: were it held for the claims'
    next round trip, which comes only after this hook, the wait would time out."""
    seen: dict[str, Any] = {}

    def work(job: Job) -> None:
        if job.id == "second":
            seen["first"] = wait_for(
                lambda: worker.inspect("first").status is JobStatus.DONE or None, 5
            )

    worker = Worker(redis_client, namespace=namespace, on_acquired=work, handle_signals=False)
    watcher = stop_when_done(worker, ["first", "second"])
    worker.serve(stream_of(redis_client, namespace, ["first", "second"]), concurrency=1)
    watcher.join()
    worker.close()
    assert seen == {"first": True}


def test_a_stop_releases_the_granted_jobs_whose_hooks_did_not_start(
    redis_client: redis.Redis, namespace: str
) -> None:
    jobs = [f"job-{i}" for i in range(6)]
    ran: list[tuple[str, int]] = []

    def work(job: Job) -> None:
        ran.append((job.id, job.attempt))
        worker.stop()  # the jobs claimed with this one are granted and waiting

    worker = Worker(redis_client, namespace=namespace, on_acquired=work, handle_signals=False)
    worker.serve(stream_of(redis_client, namespace, jobs), concurrency=1)
    left = {j: worker.inspect(j) for j in jobs[1:]}
    worker.close()
    assert ran == [("job-0", 1)]
    assert worker.inspect("job-0").status is JobStatus.DONE
    assert {(s.status, s.holder) for s in left.values()} == {(JobStatus.PENDING, None)}

    again: list[tuple[str, int]] = []
    after = Worker(redis_client, namespace=namespace, handle_signals=False,
                   on_acquired=lambda job: again.append((job.id, job.attempt)))
    after.serve([(j, None) for j in jobs], concurrency=1)
    after.close()
    assert sorted(again) == [(j, 1) for j in jobs[1:]]  # no attempt was spent


def test_a_granted_job_whose_lease_was_lost_while_it_waited_does_not_run_on_it(
    redis_client: redis.Redis, namespace: str
) -> None:
    """``second`` is granted with ``first`` and waits for its turn; meanwhile its lock
    is deleted, so the heartbeat's renewal finds it lost (``on_lost``). Its hook must
    not run on that attempt; its contest takes the next attempt and runs it there."""
    ran: list[tuple[str, int]] = []
    lost: list[tuple[str, int]] = []

    def work(job: Job) -> None:
        ran.append((job.id, job.attempt))
        if job.id == "first":
            redis_client.delete(JobKeys.of(namespace, "second").lock)
            wait_for(lambda: lost or None, 5)

    worker = Worker(redis_client, namespace=namespace, on_acquired=work, handle_signals=False,
                    lock_timeout=0.6, on_lost=lambda job: lost.append((job.id, job.attempt)))
    watcher = stop_when_done(worker, ["first", "second"])
    worker.serve(stream_of(redis_client, namespace, ["first", "second"]), concurrency=1)
    watcher.join()
    statuses = {j: worker.inspect(j) for j in ("first", "second")}
    worker.close()
    assert lost == [("second", 1)]
    assert ran == [("first", 1), ("second", 2)]
    assert (statuses["second"].status, statuses["second"].attempt) == (JobStatus.DONE, 2)
