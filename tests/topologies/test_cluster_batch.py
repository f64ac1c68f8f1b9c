"""A batch on a real Redis Cluster of three masters: the steps of one script on one
master travel in one looped command sent to that node (their keys, of many slots,
among its arguments), and a step whose slot that node does not serve (as when the slot
moved after the plan) is sent again alone, routed by key. Every step gives, and
writes, what it gives and writes sent alone, once."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from test_cluster_aio import async_client

from lockworker.aio import batcher as aio_batcher
from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant
from lockworker.protocol import batch
from lockworker.protocol.luacall import LuaScript
from lockworker.protocol.script import Step, acquire_step
from lockworker.testing import Cluster
from tests.helpers import who

pytestmark = pytest.mark.processes  # a real cluster: server processes

COUNT = LuaScript("""
local n = redis.call('INCR', KEYS[2])
if ARGV[1] == 'raise' then return redis.call('LPUSH', KEYS[1], 'x') end
return {ARGV[1], n}
""")
"""A step that counts its runs in the job's state key; ``raise`` fails after that
(WRONGTYPE on the string its lock key holds: a foreign value)."""

JOBS = 24


def count_step(keys: JobKeys, mode: str) -> Step[Any]:
    return Step(COUNT, keys, (mode,), decode=lambda reply: reply)


def jobs(namespace: str, client: RedisCluster) -> list[JobKeys]:
    every = [JobKeys.of(namespace, f"job-{i}") for i in range(JOBS)]
    for keys in every:
        client.set(keys.lock, "a string")
    assert len({client.get_node_from_key(k.lock).name for k in every}) == 3
    return every


def modes(n: int) -> list[str]:
    return ["raise" if i % 5 == 3 else f"v{i}" for i in range(n)]


def shape(result: Any) -> Any:
    """A result as compared: an error by its class, bytes (the asyncio client does not
    decode) as text."""
    if isinstance(result, BaseException):
        return type(result).__name__
    if isinstance(result, list):
        return [r.decode() if isinstance(r, bytes) else r for r in result]
    return result


def test_one_command_per_master_carries_its_steps(
    cluster_client: RedisCluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = jobs(namespace, cluster_client)
    steps = [count_step(k, m) for k, m in zip(keys, modes(JOBS), strict=True)]
    calls = batch.plan(cluster_client, steps)
    assert len(calls) == 3 and all(c.node is not None and c.looped for c in calls)
    assert sorted(i for c in calls for i in c.steps) == list(range(JOBS))
    for call in calls:  # every key of a call is on its node
        names = {k for i in call.steps for k in steps[i].names}
        assert {cluster_client.get_node_from_key(k).name for k in names} == {call.node.name}
        assert call.keys == []  # declared keys must share a slot: they go among the args
        cluster_client.script_load(call.script.source)
    sent: list[tuple[str, Any]] = []
    execute = cluster_client.execute_command

    def counted(*args: Any, **kwargs: Any) -> Any:
        sent.append((str(args[0]), kwargs.get("target_nodes")))
        return execute(*args, **kwargs)

    monkeypatch.setattr(cluster_client, "execute_command", counted)
    results = batch.send(cluster_client, steps)
    monkeypatch.undo()
    # One EVALSHA per master, each sent to its node (counted as the client sends them:
    # other tests' leftover connections may run commands on the shared cluster).
    assert sorted(node.name for command, node in sent if command == "EVALSHA") == sorted(
        call.node.name for call in calls
    )
    assert len(sent) == 3
    assert [shape(r) for r in results] == [
        "ForeignValueError" if m == "raise" else [m, 1] for m in modes(JOBS)
    ]
    assert [cluster_client.get(k.state) for k in keys] == ["1"] * JOBS


def test_a_step_whose_slot_is_elsewhere_is_sent_again_alone(
    cluster_client: RedisCluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps planned for a node that does not serve all their slots (as when a slot
    moved after the plan): those fail at their first key, writing nothing, and are sent
    again alone; every step runs exactly once."""
    keys = jobs(namespace, cluster_client)
    wrong = cluster_client.get_node_from_key(keys[0].lock)
    monkeypatch.setattr(cluster_client, "get_node_from_key", lambda *_a, **_k: wrong)
    steps = [count_step(k, m) for k, m in zip(keys, modes(JOBS), strict=True)]
    calls = batch.plan(cluster_client, steps)
    assert len(calls) == 1 and calls[0].node is wrong
    monkeypatch.undo()
    monkeypatch.setattr(batch, "plan", lambda *_a: calls)
    results = batch.send(cluster_client, steps)
    assert [shape(r) for r in results] == [
        "ForeignValueError" if m == "raise" else [m, 1] for m in modes(JOBS)
    ]
    assert [cluster_client.get(k.state) for k in keys] == ["1"] * JOBS


def test_job_steps_looped_per_master_grant_every_job_once(
    cluster_client: RedisCluster, namespace: str
) -> None:
    keys = [JobKeys.of(namespace, f"grant-{i}") for i in range(JOBS)]
    steps = [acquire_step(k, who("a"), 10_000, 3, 60_000) for k in keys]
    granted = batch.send(cluster_client, steps)
    assert all(isinstance(g, Grant) and g.attempt == 1 for g in granted), granted
    again = batch.send(cluster_client, [acquire_step(k, who("b"), 10_000, 3, 60_000) for k in keys])
    assert all(not isinstance(g, Grant) for g in again), again


def test_the_asyncio_side_loops_per_master_and_falls_back_alike(
    redis_cluster: Cluster, cluster_client: RedisCluster, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = jobs(namespace, cluster_client)
    first, second = keys[: JOBS // 2], keys[JOBS // 2 :]

    async def main() -> tuple[list[Any], list[Any], collections.Counter[str]]:
        client: AsyncRedisCluster = async_client(redis_cluster)
        try:
            await client.initialize()
            steps = [count_step(k, m) for k, m in zip(first, modes(len(first)), strict=True)]
            nodes = collections.Counter(
                c.node.name for c in batch.plan(client, steps) if c.node is not None
            )
            looped = await aio_batcher.send(client, steps)
            wrong = client.get_node_from_key(second[0].lock)
            plan = batch.plan
            monkeypatch.setattr(
                batch, "plan", lambda c, s: [
                    batch.Call(call.script, call.keys, call.args, call.steps, wrong)
                    if call.node is not None else call
                    for call in plan(c, s)
                ],
            )
            refused = await aio_batcher.send(
                client, [count_step(k, m) for k, m in zip(second, modes(len(second)), strict=True)]
            )
            return looped, refused, nodes
        finally:
            await client.aclose()

    looped, refused, nodes = asyncio.run(main())
    assert len(nodes) == 3  # one looped command per master
    for results, part in ((looped, first), (refused, second)):
        assert [shape(r) for r in results] == [
            "ForeignValueError" if m == "raise" else [m, 1] for m in modes(len(part))
        ]
    assert [cluster_client.get(k.state) for k in keys] == ["1"] * JOBS
