"""Wake-ups across a master's failover: a waiter that was listening when the master of
its job's slot died listens again on a live node, and is woken by the next release as
fast as before the failover.

One cluster of three masters with a replica each serves the module; each test fails
over a master that still has its replica (the sync test one, the asyncio test another).
The lease is long (30 s): a waiter that waits it out instead of being woken fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import in_thread, until, wait_for
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

import lockworker
from lockworker import Outcome, Worker, aio
from lockworker.model.keys import JobKeys
from lockworker.runtime.wake import hub_for
from lockworker.testing import Cluster, RedisServer

pytestmark = pytest.mark.processes  # a real cluster, whose masters are SIGKILLed

LEASE = 30.0
WOKEN_WITHIN = 3.0
"""Seconds from the holder's failure to the waiter's attempt: a round trip and the
reader's move to the new master, with a loaded machine's margin; a tenth of the lease,
and below the 5 s after which an unconfirmed subscription makes a waiter look anyway."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(masters=3, replicas=1) as started:
        yield started


def victim_and_job(cluster: Cluster, namespace: str) -> tuple[RedisServer, str]:
    """A master that still has a replica, and a job id whose slot it serves."""
    victim = next(m for m in cluster.masters if cluster.replicas_of(m))
    job = next(
        f"job-{i}" for i in range(10_000)
        if cluster.node_of(JobKeys.of(namespace, f"job-{i}").lock) is victim
    )
    return victim, job


def replicated(cluster: Cluster, victim: RedisServer, key: str) -> bool:
    """True once ``victim``'s replica holds ``key`` (so the failover keeps the lease)."""
    (replica,) = cluster.replicas_of(victim)
    with contextlib.closing(replica.client(single_connection_client=True)) as client:
        client.execute_command("READONLY")  # type: ignore[no-untyped-call]
        return bool(client.exists(key))


def subscriptions(cluster: Cluster, channel: str) -> int:
    """The subscriptions to ``channel`` on the running nodes (PUBSUB NUMSUB of each)."""
    count = 0
    for node in cluster.nodes:
        if node.running:
            with contextlib.closing(node.client()) as client:
                count += int(dict(client.pubsub_numsub(channel)).get(channel.encode(), 0))
    return count


class Replies:
    """A worker's protocol that notes when each of its acquire calls was answered."""

    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.times: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.protocol, name)

    def acquire(self, *args: Any, **kwargs: Any) -> Any:
        reply = self.protocol.acquire(*args, **kwargs)
        self.times.append(time.monotonic())
        return reply

    def since(self, moment: float) -> bool:
        """True once an acquire was answered after ``moment``."""
        return bool(self.times) and self.times[-1] > moment


class AsyncReplies(Replies):
    async def acquire(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        reply = await self.protocol.acquire(*args, **kwargs)
        self.times.append(time.monotonic())
        return reply


def fail_over(
    cluster: Cluster, victim: RedisServer, keys: JobKeys, replies: Replies
) -> None:
    """Kill ``victim`` once its replica has the job's lease; wait until the replica
    serves, the waiter listens on the job's channel again, on a live node, and has
    read the job since the crash (woken by the break, it reads through its retries:
    until the read is answered, by the new master, it is not waiting to be woken)."""
    assert subscriptions(cluster, keys.wake) == 1
    wait_for(lambda: replicated(cluster, victim, keys.lock), timeout=10)
    killed = time.monotonic()
    cluster.kill(victim)
    cluster.wait_for_failover(victim, timeout=30)
    wait_for(lambda: subscriptions(cluster, keys.wake) == 1, timeout=10)
    wait_for(lambda: replies.since(killed), timeout=20)


def test_a_waiter_listening_through_a_failover_is_woken_by_the_next_failure(
    cluster: Cluster, namespace: str
) -> None:
    victim, job = victim_and_job(cluster, namespace)
    keys = JobKeys.of(namespace, job)
    fail = threading.Event()
    acquired: list[tuple[str, int, float]] = []

    def holder(j: lockworker.Job) -> None:
        acquired.append(("holder", j.attempt, time.monotonic()))
        fail.wait(60)
        raise RuntimeError("the holder's attempt fails")

    def waiter(j: lockworker.Job) -> None:
        acquired.append(("waiter", j.attempt, time.monotonic()))

    locked = threading.Event()
    clients = [cluster.client(decode_responses=True, socket_timeout=2.0) for _ in range(2)]
    a, b = (
        Worker(client, namespace=namespace, lock_timeout=LEASE, handle_signals=False,
               on_acquired=hook, **extra)
        for client, hook, extra in (
            (clients[0], holder, {}),
            (clients[1], waiter, {"on_locked": lambda j: locked.set()}),
        )
    )
    b.protocol = replies = Replies(b.protocol)  # type: ignore[assignment]
    try:
        held, _ = in_thread(lambda: a.process(job))
        wait_for(lambda: acquired)
        waited, result = in_thread(lambda: b.process(job))
        # The waiter listens on the job's channel: its only one, so its pub/sub
        # connection is on the victim, the master of the job's slot.
        wait_for(lambda: locked.is_set() and b._hub.subscribed(keys.wake), timeout=10)
        fail_over(cluster, victim, keys, replies)
        failed_at = time.monotonic()
        fail.set()
        waited.join(LEASE + 10)
        held.join(10)
    finally:
        fail.set()
        for worker in (a, b):
            worker.stop()
            worker.close()
        for client in clients:
            client.close()
    assert result.get("result") is Outcome.DONE, result
    (_, attempt, took_over_at), = [entry for entry in acquired if entry[0] == "waiter"]
    assert attempt == 2
    assert took_over_at - failed_at < WOKEN_WITHIN


def test_an_asyncio_waiter_listening_through_a_failover_is_woken_by_the_next_failure(
    cluster: Cluster, namespace: str
) -> None:
    victim, job = victim_and_job(cluster, namespace)
    keys = JobKeys.of(namespace, job)
    acquired: list[tuple[str, int, float]] = []
    moments: dict[str, float] = {}

    async def scenario() -> Any:
        fail = asyncio.Event()
        locked = asyncio.Event()

        async def holder(j: lockworker.Job) -> None:
            acquired.append(("holder", j.attempt, time.monotonic()))
            await fail.wait()
            raise RuntimeError("the holder's attempt fails")

        async def waiter(j: lockworker.Job) -> None:
            acquired.append(("waiter", j.attempt, time.monotonic()))

        async def on_locked(j: lockworker.Job) -> None:
            locked.set()

        nodes = [ClusterNode("127.0.0.1", n.port) for n in cluster.nodes if n.running]
        clients = [AsyncRedisCluster(startup_nodes=nodes, socket_timeout=2.0) for _ in range(2)]
        a = aio.Worker(clients[0], namespace=namespace, lock_timeout=LEASE,
                       handle_signals=False, on_acquired=holder)
        b = aio.Worker(clients[1], namespace=namespace, lock_timeout=LEASE,
                       handle_signals=False, on_acquired=waiter, on_locked=on_locked)
        b.protocol = replies = AsyncReplies(b.protocol)  # type: ignore[assignment]
        try:
            held = asyncio.create_task(a.process(job))
            await until(lambda: acquired)
            waited = asyncio.create_task(b.process(job))
            await until(lambda: locked.is_set() and b._hub.subscribed(keys.wake))
            await asyncio.to_thread(fail_over, cluster, victim, keys, replies)
            moments["failed"] = time.monotonic()
            fail.set()
            outcome = await asyncio.wait_for(waited, LEASE + 10)
            await asyncio.wait_for(held, 10)
            return outcome
        finally:
            fail.set()
            for worker in (a, b):
                worker.stop()
                await worker.close()
            for client in clients:
                await client.aclose()

    assert asyncio.run(scenario()) is Outcome.DONE
    (_, attempt, took_over_at), = [entry for entry in acquired if entry[0] == "waiter"]
    assert attempt == 2
    assert took_over_at - moments["failed"] < WOKEN_WITHIN


def test_a_waiter_is_woken_when_its_client_reconnects_the_wake_connection_by_itself(
    redis_cluster: Cluster, namespace: str
) -> None:
    """A cluster client that re-reads its slot map (as after a failover or a moved
    slot) marks the connections of the node it asked to reconnect, the wake
    connection's too when it is on that node: redis-py reconnects it at its next read,
    drops the message that read found, and subscribes anew. The waiter is woken
    anyway, to re-read. (Marked here on every node, as the refresh does on one.)"""
    channel = JobKeys.of(namespace, "job").wake
    with (
        contextlib.closing(redis_cluster.client(socket_timeout=2.0)) as client,
        contextlib.closing(redis_cluster.client(socket_timeout=2.0)) as publisher,
        hub_for(client).listen(client, channel) as woken,
    ):
        pools = [client.get_redis_connection(n).connection_pool for n in client.get_nodes()]
        if not hasattr(pools[0], "update_active_connections_for_reconnect"):
            pytest.skip("this redis-py never reconnects a pub/sub connection by itself")
        for pool in pools:
            pool.update_active_connections_for_reconnect()
        publisher.publish(channel, "released")
        assert woken.wait(WOKEN_WITHIN)
