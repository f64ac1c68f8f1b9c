"""``lockworker index`` on a real Redis Cluster of three masters: the jobs of every
master are found (a SCAN per master) and each is indexed in its own slot's index key,
whatever master holds it."""

from __future__ import annotations

import pytest
from redis.cluster import RedisCluster

from lockworker.cli.reindex import index_all
from lockworker.model.index import Kind
from lockworker.model.keys import JobKeys
from lockworker.protocol import ScriptProtocol, registry
from lockworker.protocol import index as reading
from lockworker.protocol.reindex import masters
from tests.helpers import RETENTION, grant, held

pytestmark = pytest.mark.processes  # a real cluster: server processes

JOBS = 30


def test_every_masters_jobs_are_indexed_in_their_slots(
    cluster_client: RedisCluster, namespace: str
) -> None:
    protocol = ScriptProtocol(cluster_client)
    for i in range(JOBS):
        keys = JobKeys.of(namespace, f"job-{i}")
        g = grant(protocol, keys, "a", max_attempts=1)
        if i % 2:
            protocol.fail(keys, held(g, "a"), 1, RETENTION)
    nodes = {cluster_client.get_node_from_key(JobKeys.of(namespace, f"job-{i}").state).name
             for i in range(JOBS)}
    assert len(nodes) == 3  # the jobs are spread over every master
    for node in masters(cluster_client):  # the index as a release without it leaves it
        for key in node.keys(f"lw:index:{namespace}:*"):
            node.delete(key)
    assert reading.count(cluster_client, namespace).held == 0

    tally = index_all(cluster_client, namespace, RETENTION)[namespace]

    assert (tally.kinds[Kind.HELD], tally.kinds[Kind.GAVE_UP]) == (JOBS // 2, JOBS // 2)
    held_ids = {e.job_id for e in reading.listed(cluster_client, namespace, Kind.HELD)}
    gave_up = {e.job_id for e in reading.listed(cluster_client, namespace, Kind.GAVE_UP)}
    assert held_ids == {f"job-{i}" for i in range(0, JOBS, 2)}
    assert gave_up == {f"job-{i}" for i in range(1, JOBS, 2)}
    assert namespace in registry.indexed(cluster_client)
