"""The asyncio Worker and Leader on a real Redis Cluster of three masters, through a
``redis.asyncio.RedisCluster``, beside sync ones on a ``redis.cluster.RedisCluster``."""

from __future__ import annotations

import asyncio
import collections
import itertools
import threading
import time

import pytest
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from test_cluster_products import job_ids, jobs_per_master

import lockworker
from lockworker import Leader, Outcome, Term, Worker, aio
from lockworker.testing import Cluster

pytestmark = pytest.mark.processes  # a real cluster: server processes


def async_client(cluster: Cluster) -> AsyncRedisCluster:
    """A new asyncio cluster client, bootstrapped from every node (first use is by many
    tasks at once, which lockworker must survive)."""
    nodes = [ClusterNode("127.0.0.1", n.port) for n in cluster.nodes if n.running]
    return AsyncRedisCluster(startup_nodes=nodes, socket_timeout=2.0)


def test_sync_and_async_workers_share_jobs_on_every_master_each_done_once(
    redis_cluster: Cluster, namespace: str
) -> None:
    ids = job_ids(30)
    runs: collections.Counter[str] = collections.Counter()
    mutex = threading.Lock()

    def count(job: lockworker.Job) -> None:
        with mutex:
            runs[job.id] += 1

    sync_client = redis_cluster.client(socket_timeout=2.0)
    sync_worker = Worker(
        sync_client, namespace=namespace, on_acquired=count, handle_signals=False,
        lock_timeout=5.0,
    )
    sync_outcomes: list[Outcome] = []

    def sync_side() -> None:
        sync_outcomes.extend(sync_worker.process(job_id) for job_id in ids)

    async def scenario() -> list[Outcome]:
        client = async_client(redis_cluster)

        async def work(job: lockworker.Job) -> None:
            count(job)
            await asyncio.sleep(0)

        workers = [
            aio.Worker(client, namespace=namespace, on_acquired=work, handle_signals=False,
                       lock_timeout=5.0)
            for _ in range(2)
        ]
        thread = threading.Thread(target=sync_side)
        thread.start()
        outcomes = await asyncio.gather(
            *(worker.process(job_id) for worker in workers for job_id in ids)
        )
        await asyncio.to_thread(thread.join, 30)
        for worker in workers:
            await worker.close()
        await client.aclose()
        return list(outcomes)

    try:
        outcomes = asyncio.run(scenario()) + sync_outcomes
    finally:
        sync_worker.close()
        sync_client.close()
    assert runs == {job_id: 1 for job_id in ids}
    assert len(outcomes) == 3 * len(ids)
    assert set(outcomes) <= {Outcome.DONE, Outcome.DONE_ELSEWHERE}
    assert outcomes.count(Outcome.DONE) == len(ids)
    assert all(jobs_per_master(redis_cluster, namespace))  # spread over all three


def test_sync_and_async_leaders_alternate_on_a_cluster(
    redis_cluster: Cluster, namespace: str
) -> None:
    terms: list[tuple[str, int, float, float]] = []
    mutex = threading.Lock()

    def sync_lead(term: Term) -> None:
        entered = time.monotonic()
        term.wait(0.02)
        with mutex:
            terms.append(("sync", term.token, entered, time.monotonic()))

    sync_client = redis_cluster.client(socket_timeout=2.0)
    sync_leader = Leader(sync_client, name=namespace, on_acquired=sync_lead,
                         handle_signals=False, lock_timeout=2.0)
    thread = threading.Thread(target=sync_leader.run, daemon=True)

    seen: list[tuple[int, int | None]] = []

    async def scenario() -> None:
        client = async_client(redis_cluster)

        async def lead(term: aio.AsyncTerm) -> None:
            entered = time.monotonic()
            current = await aio.Leader.current(client, namespace)
            seen.append((term.token, current.token if current else None))
            await term.wait(0.02)
            with mutex:
                terms.append(("async", term.token, entered, time.monotonic()))

        leader = aio.Leader(client, name=namespace, on_acquired=lead, handle_signals=False,
                            lock_timeout=2.0)
        running = asyncio.create_task(leader.run())
        thread.start()
        while len(terms) < 8:
            await asyncio.sleep(0.01)
        leader.stop()
        await asyncio.wait_for(running, 10)
        await client.aclose()

    try:
        asyncio.run(scenario())
    finally:
        sync_leader.stop()
        thread.join(10)
        sync_client.close()
    ordered = sorted(terms, key=lambda t: t[2])
    assert all(b[2] >= a[3] for a, b in itertools.pairwise(ordered))
    tokens = [t[1] for t in ordered]
    assert tokens == sorted(set(tokens))
    assert {kind for kind, *_ in terms} == {"sync", "async"}
    assert seen and all(token == current for token, current in seen)  # who leads, as read


def test_inspect_on_a_cluster_reads_the_due_time_of_a_failed_job_on_both_sides(
    redis_cluster: Cluster, namespace: str
) -> None:
    """A cluster's transaction takes no keyless command: inspect asks the job's node for
    the server's clock on its own, so a failed job's next attempt is read on both sides."""
    ids = job_ids(6)  # jobs on every master

    def fail(job: lockworker.Job) -> None:
        raise lockworker.Retry(after=120)

    async def scenario() -> list[lockworker.model.state.Snapshot]:
        client = async_client(redis_cluster)
        worker = aio.Worker(client, namespace=namespace, on_acquired=fail,
                            handle_signals=False, lock_timeout=5.0, max_attempts=2)
        tasks = [asyncio.create_task(worker.process(job_id)) for job_id in ids]
        seen: list[lockworker.model.state.Snapshot] = []
        deadline = time.monotonic() + 10.0
        for job_id in ids:
            while (snap := await worker.inspect(job_id)).due_ms is None:
                assert time.monotonic() < deadline, f"{job_id} did not fail in 10 s"
                await asyncio.sleep(0.01)
            seen.append(snap)
        worker.stop()
        await asyncio.gather(*tasks)
        await worker.close()
        await client.aclose()
        return seen

    seen = asyncio.run(scenario())
    assert all(s.attempt == 1 and 100_000 < (s.due_ms or 0) <= 120_000 for s in seen), seen
    retried = [("failed", "lockworker.errors.Retry")]
    assert all([(r.ending, r.error_type) for r in s.history] == retried for s in seen), seen
    sync_client = redis_cluster.client(socket_timeout=2.0)
    sync_worker = Worker(sync_client, namespace=namespace, on_acquired=fail,
                         handle_signals=False)
    try:
        assert all(100_000 < (sync_worker.inspect(j).due_ms or 0) <= 120_000 for j in ids)
    finally:
        sync_worker.close()
        sync_client.close()
