"""The namespace's index on a real Redis Cluster of three masters: each job's step
writes its entry in the index key of the job's own slot, on the master that serves
it, and the views read every master (one call each), so jobs whose slots sit on
different nodes are all counted and listed, for both protocols."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from redis.cluster import RedisCluster

from lockworker.model.index import Kind
from lockworker.model.keys import JobKeys
from lockworker.protocol import LockProtocol, ScriptProtocol
from lockworker.protocol import index as reading
from lockworker.protocol.txn import TxnProtocol
from tests.helpers import LEASE, RETENTION, grant, held

pytestmark = pytest.mark.processes  # a real cluster: server processes

PROTOCOLS: dict[str, Callable[[Any], LockProtocol]] = {
    "script": ScriptProtocol, "txn": TxnProtocol,
}


@pytest.mark.parametrize("implementation", sorted(PROTOCOLS))
def test_jobs_on_every_master_are_all_counted_and_listed(
    cluster_client: RedisCluster, implementation: str
) -> None:
    protocol = PROTOCOLS[implementation](cluster_client)
    ns = f"cluster-index-{uuid.uuid4().hex[:8]}"
    every = [JobKeys.of(ns, f"job-{i} {{%}}:") for i in range(24)]
    nodes = {k.job_id: cluster_client.get_node_from_key(k.state).name for k in every}
    assert len(set(nodes.values())) == 3, nodes  # the jobs' slots span the three masters
    want: dict[Kind, set[str]] = {kind: set() for kind in Kind}
    for i, keys in enumerate(every):
        g = grant(protocol, keys, "a", max_attempts=2)
        kind = list(Kind)[i % 4] if i % 5 else None  # every fifth job: DONE, no entry
        if kind is None:
            protocol.complete(keys, held(g, "a"), RETENTION)
        elif kind is Kind.BACKOFF:
            protocol.fail(keys, held(g, "a"), 2, RETENTION, delay_ms=60_000)
        elif kind is Kind.PENDING:
            protocol.release(keys, held(g, "a"), RETENTION)
        elif kind is Kind.GAVE_UP:
            protocol.fail(keys, held(g, "a"), 2, RETENTION, give_up=True)
        else:
            protocol.renew(keys, held(g, "a"), LEASE, RETENTION)
        if kind is not None:
            want[kind].add(keys.job_id)
        # the entry sits on the job's own master, in its slot's key
        assert cluster_client.get_node_from_key(keys.index).name == nodes[keys.job_id]
    for kind, jobs in want.items():
        listed = reading.listed(cluster_client, ns, kind)
        assert {e.job_id for e in listed} == jobs, kind
        assert len({nodes[j] for j in jobs}) > 1, (kind, jobs)  # not one master's alone
        assert len(reading.listed(cluster_client, ns, kind, limit=2)) == min(2, len(jobs))
    counts = reading.count(cluster_client, ns)
    assert tuple(counts.of(kind) for kind in Kind) == tuple(len(want[k]) for k in Kind)
    assert len(reading.calls(cluster_client, ns)) == 3  # one call per master
