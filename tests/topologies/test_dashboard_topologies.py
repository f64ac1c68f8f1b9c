"""The dashboard reads a cluster (every master) and a Sentinel group's master through
the same URLs as ``lockworker status``: the namespace's index, counted and listed on
every master (finished jobs are not listed; ``done`` is the last hour's outcomes)."""

from __future__ import annotations

import pytest

import lockworker
from lockworker.cli.common import connect
from lockworker.cli.web.view import Collector
from lockworker.testing import Cluster, SentinelGroup

pytestmark = pytest.mark.processes


def fail(_job: lockworker.Job) -> None:
    raise RuntimeError("nope")


def seen_by_the_dashboard(url: str, namespace: str) -> dict[str, int | None]:
    client = connect(url)
    try:
        done = lockworker.Worker(client, namespace=namespace, on_acquired=lambda j: None,
                                 handle_signals=False, lock_timeout=2.0)
        failing = lockworker.Worker(client, namespace=namespace, on_acquired=fail,
                                    max_attempts=1, handle_signals=False, lock_timeout=2.0)
        for i in range(12):
            (done if i % 3 else failing).process(f"job-{i}")
        done.close()
        failing.close()
        collector = Collector(client, namespace=namespace)
        view = collector.read()
        assert view.error is None
        snapshot = collector.inspect(namespace, "job-0")
        assert snapshot is not None and snapshot.status.value == "gave_up"
        listed = sorted(r.id for r in view.jobs if r.namespace == namespace)
        assert listed == sorted(f"job-{i}" for i in range(0, 12, 3))
        return view.counts[namespace]
    finally:
        client.close()


def test_on_a_cluster_every_masters_jobs_are_counted(
    redis_cluster: Cluster, namespace: str
) -> None:
    seeds = ",".join(f"127.0.0.1:{m.port}" for m in redis_cluster.masters[:2])
    counts = seen_by_the_dashboard(f"redis+cluster://{seeds}", namespace)
    assert isinstance(counts["done"], int) and counts["gave_up"] == 4


def test_through_the_sentinels_the_masters_jobs_are_counted(
    redis_sentinel: SentinelGroup, namespace: str
) -> None:
    sentinels = ",".join(f"{h}:{p}" for h, p in redis_sentinel.sentinels)
    url = f"redis+sentinel://{sentinels}/{redis_sentinel.master_name}"
    counts = seen_by_the_dashboard(url, namespace)
    assert isinstance(counts["done"], int) and counts["gave_up"] == 4
