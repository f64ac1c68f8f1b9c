"""A master of a real cluster SIGKILLed mid-run: its replica takes over and no job is lost.

Replication is asynchronous, so the crash may take acknowledged writes with it (a
DONE, a lease, a token): a job may run twice. What must hold is that every job ends
DONE, that the workers retry through the failover (and say so), and that the fencing
tokens a job's hooks see never go backwards. The figures (jobs run twice, errors
retried, failover time) are recorded as test properties.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from failover_runs import Runs, retried_errors, serve_in_thread
from helpers import wait_for
from redis.backoff import NoBackoff
from redis.exceptions import ClusterDownError
from redis.retry import Retry

from lockworker import JobStatus, RedisUnavailable, RetryPolicy, Worker
from lockworker.model.keys import JobKeys
from lockworker.testing import Cluster, capture_events

pytestmark = pytest.mark.processes  # real server processes, started and crashed

JOBS = 150
CONCURRENCY = 4
WORKERS = 2
BEFORE_CRASH = 30
"""Jobs that run before the crash; the next ones hold in their hooks until it happened."""
RIDE_OUT = RetryPolicy(budget=30.0)
"""Longer than any failover here: a worker must never give up (RedisUnavailable)."""


@pytest.mark.parametrize(
    ("protocol", "lease"),
    [("script", 2.0), ("txn", 2.0), ("script", 10.0)],
    ids=["script-lease-2s", "txn-lease-2s", "script-lease-10s"],
)
def test_a_master_crash_mid_run_loses_no_job_and_tokens_never_go_back(
    namespace: str, protocol: str, lease: float, record_property: Callable[[str, Any], None]
) -> None:
    """A 2 s lease runs out during the failover (about 2.5 s here), a 10 s one does not:
    the figures show what each costs in jobs run twice."""
    runs = Runs(gate_after=BEFORE_CRASH)
    jobs = [(f"job-{i}", i) for i in range(JOBS)]
    with Cluster(masters=3, replicas=1) as cluster, capture_events() as logged:
        nodes = list(cluster.nodes)
        clients = [
            cluster.client(decode_responses=True, socket_timeout=2.0) for _ in range(WORKERS)
        ]
        workers = [
            Worker(
                client, namespace=namespace, protocol=protocol, lock_timeout=lease,
                redis_retry=RIDE_OUT, handle_signals=False, on_acquired=runs.hook,
            )
            for client in clients
        ]
        serving = [serve_in_thread(w, jobs, CONCURRENCY) for w in workers]
        try:
            # Every slot of every worker holds a job: the crash falls mid-run.
            wait_for(runs.holding(WORKERS * CONCURRENCY), timeout=30)
            with runs.mutex:
                running = next(job for job, _ in reversed(jobs) if job in runs.tokens)
            victim = cluster.node_of(JobKeys.of(namespace, running).lock)
            (replica,) = cluster.replicas_of(victim)
            crashed = time.monotonic()
            cluster.kill(victim)
            runs.open()
            assert cluster.wait_for_failover(victim, timeout=30) is replica
            failover = time.monotonic() - crashed
            for thread, _ in serving:
                thread.join(timeout=60)
            finished = time.monotonic() - crashed
        finally:
            runs.open()
            for worker in workers:
                worker.stop()
        assert [raised for _, raised in serving] == [[]] * WORKERS
        with cluster.client(decode_responses=True, socket_timeout=2.0) as reader:
            checker = Worker(reader, namespace=namespace, handle_signals=False,
                             on_acquired=runs.hook)
            statuses = {job: checker.inspect(job).status for job, _ in jobs}
            checker.close()
        for worker, client in zip(workers, clients, strict=True):
            worker.close()
            client.close()

    assert not any(node.running for node in nodes)  # stop() left no process behind
    assert set(statuses.values()) == {JobStatus.DONE}
    assert set(runs.tokens) == {job for job, _ in jobs}
    assert runs.went_backwards() == []
    retried = retried_errors(logged)
    assert retried["ConnectionError"] > 0  # the failover was seen, retried and reported
    assert not [e for e in logged if isinstance(e.get("error"), str)
                and "RedisUnavailable" in e["error"]]
    for name, value in {
        "failover_s": round(failover, 2), "finished_after_crash_s": round(finished, 2),
        "ran_twice": len(runs.ran_twice()), "retried": dict(retried),
    }.items():
        record_property(name, value)
    print(f"cluster failover [{protocol}, lease {lease} s]: failover {failover:.2f} s, all done "
          f"{finished:.2f} s after the crash, {len(runs.ran_twice())} of {JOBS} jobs ran "
          f"twice, retried {dict(retried)}")



@pytest.mark.parametrize("protocol", ["script", "txn"])
def test_steps_on_a_cluster_that_stays_down_end_in_redis_unavailable(
    namespace: str, protocol: str
) -> None:
    """A master with no replica dies: every node refuses (CLUSTERDOWN) for good. The
    steps retry that as a lost connection, by lockworker's policy (the client's own
    retries are off here; the WATCH/MULTI/EXEC steps talk to one node and never had
    them), and give up at the end of the retry budget, naming the cause."""
    with Cluster(masters=3) as cluster:
        victim = cluster.masters[0]
        survivor = next(n for n in cluster.masters if n is not victim)
        job = next(
            f"job-{i}" for i in range(1000)
            if cluster.node_of(JobKeys.of(namespace, f"job-{i}").lock) is survivor
        )
        with cluster.client(
            decode_responses=True, socket_timeout=2.0, retry=Retry(NoBackoff(), 0)
        ) as client, capture_events() as logged:
            cluster.kill(victim)
            wait_for(lambda: set(cluster.states().values()) == {"fail"}, timeout=30)
            worker = Worker(
                client, namespace=namespace, protocol=protocol, handle_signals=False,
                redis_retry=RetryPolicy(budget=0.5), on_acquired=lambda job: None,
            )
            with pytest.raises(RedisUnavailable) as raised:
                worker.process(job)
            worker.close()
    assert "cluster is down" in str(raised.value)
    assert isinstance(raised.value.__cause__, ClusterDownError)
    assert retried_errors(logged)["ClusterDownError"] >= 2
