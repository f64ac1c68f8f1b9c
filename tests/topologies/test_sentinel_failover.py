"""Workers on a Sentinel-managed master: its crash mid-run is ridden out, no job is lost.

The workers' client is ``Sentinel([...]).master_for(name)``: after a connection error
it asks the sentinels for the master again, so a worker's retries land on the promoted
replica. Replication is asynchronous: what the crashed master acknowledged but had not
sent on may be lost, so a job may run twice; tokens must never go backwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from failover_runs import Runs, retried_errors, serve_in_thread
from helpers import wait_for

import lockworker
from lockworker import JobStatus, Lock, Outcome, RedisUnavailable, RetryPolicy, Worker
from lockworker.testing import SentinelGroup, capture_events

pytestmark = pytest.mark.processes  # real server processes, started and crashed

JOBS = 120
CONCURRENCY = 4
BEFORE_CRASH = 30
RIDE_OUT = RetryPolicy(budget=30.0)
"""Longer than any failover here: these workers must never give up."""
GIVE_UP = RetryPolicy(budget=0.3)
"""Shorter than any failover (the sentinels wait 1 s before they even call a master
down): this worker must give up, with RedisUnavailable."""


def test_a_worker_and_a_lock_use_the_master_the_sentinels_name(
    redis_sentinel: SentinelGroup, sentinel_master: redis.Redis, namespace: str
) -> None:
    assert sentinel_master.info("replication")["role"] == "master"
    ran: list[int] = []
    with Worker(sentinel_master, namespace=namespace, handle_signals=False,
                on_acquired=lambda job: ran.append(job.token)) as worker:
        assert worker.process("job") is Outcome.DONE
        assert worker.inspect("job").token == ran[0]
    with Lock(sentinel_master, "lock", namespace=namespace) as lock:
        assert lock.token is not None
    pool: Any = sentinel_master.connection_pool
    assert pool.get_master_address() == redis_sentinel.master_address()


@pytest.mark.parametrize("protocol", ["script", "txn"])
def test_a_master_crash_mid_stream_loses_no_job_and_tokens_never_go_back(
    namespace: str, protocol: str, record_property: Callable[[str, Any], None]
) -> None:
    runs = Runs(gate_after=BEFORE_CRASH)
    with SentinelGroup() as group, capture_events() as logged:
        producer = group.master_client(decode_responses=True, socket_timeout=2.0)
        for i in range(JOBS):
            lockworker.submit(producer, namespace, f"job-{i}", {"n": i})
        assert producer.wait(group.replica_count, 5000) == group.replica_count  # on every replica
        made = []
        for owner, policy in (("steady-1", RIDE_OUT), ("steady-2", RIDE_OUT), ("brief", GIVE_UP)):
            client = group.master_client(decode_responses=True, socket_timeout=2.0)
            worker = Worker(
                client, namespace=namespace, owner=owner, protocol=protocol,
                lock_timeout=2.0, redis_retry=policy, handle_signals=False,
                on_acquired=runs.hook,
            )
            source = lockworker.StreamSource(
                client, namespace, owner=owner, block=0.1, redis_retry=policy
            )
            made.append((worker, client, *serve_in_thread(worker, source, CONCURRENCY)))
        try:
            wait_for(runs.holding(len(made) * CONCURRENCY), timeout=30)
            crashed = time.monotonic()
            old = group.kill_master()
            runs.open()
            new = group.wait_for_failover(timeout=30)
            failover = time.monotonic() - crashed
            wait_for(lambda: all_done(made[0][0], JOBS), timeout=60, interval=0.05)
            finished = time.monotonic() - crashed
        finally:
            runs.open()
            for worker, *_ in made:
                worker.stop()
            for _, _, thread, _ in made:
                thread.join(timeout=30)
        raised = {worker.owner: errors for worker, _, _, errors in made}
        for worker, client, *_ in made:
            worker.close()
            client.close()
        producer.close()

    assert new != old
    assert raised["steady-1"] == raised["steady-2"] == []
    (gave_up,) = raised["brief"]
    assert isinstance(gave_up, RedisUnavailable)
    assert isinstance(gave_up.__cause__, redis.ConnectionError)
    assert set(runs.tokens) == {f"job-{i}" for i in range(JOBS)}
    assert runs.went_backwards() == []
    retried = retried_errors(logged)
    assert retried["ConnectionError"] + retried["MasterNotFoundError"] > 0
    figures = {
        "failover_s": round(failover, 2), "finished_after_crash_s": round(finished, 2),
        "ran_twice": len(runs.ran_twice()), "retried": dict(retried),
    }
    for name, value in figures.items():
        record_property(name, value)
    print(f"sentinel failover [{protocol}]: {figures}")


def all_done(worker: Worker, jobs: int) -> bool:
    return all(worker.inspect(f"job-{i}").status is JobStatus.DONE for i in range(jobs))
